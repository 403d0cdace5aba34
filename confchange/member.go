package confchange

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Member is one member's record in the membership table: how to reach it and
// what the application says about it. Records travel through the log inside
// every conf change (see Context), so every member learns them.
type Member struct {
	// ID is the raft node ID; never 0, and never reused once removed.
	ID uint64
	// PeerAddr is the member's peer address, host:port, kept exactly as given.
	PeerAddr string
	// Metadata is opaque application data, e.g. {"client_addr": "…"}. Keys are
	// not empty; nil and empty mean the same.
	Metadata map[string]string
	// ReadOnly marks a learner that is never promoted and never a failover
	// seat (ErrMemberReadOnly).
	ReadOnly bool
	// Incarnation identifies the member's data (storage.Identity's): the
	// member publishes it once it runs, and its peers then refuse a
	// member of that ID that presents another one — its data was lost and
	// it started afresh, so its votes and acknowledgements no longer stand
	// for what it had. 0: not known yet. Once recorded it never changes:
	// a record without one keeps it, and a change to another one is
	// refused (ErrInvalidMember).
	Incarnation uint64
}

// maxAddrLen bounds a peer address (a DNS name is at most 253 bytes).
const maxAddrLen = 512

// problems returns what is wrong with m as a new member record, one string
// per problem.
func (m Member) problems() []string {
	var out []string
	if m.ID == 0 {
		out = append(out, "member ID 0 is reserved")
	}
	if err := checkPeerAddr(m.PeerAddr); err != "" {
		out = append(out, "member "+strconv.FormatUint(m.ID, 10)+": "+err)
	}
	if _, ok := m.Metadata[""]; ok {
		out = append(out, "member "+strconv.FormatUint(m.ID, 10)+": metadata has an empty key")
	}
	return out
}

// checkPeerAddr returns why addr is not a usable host:port, or "". It accepts
// a host name, an IPv4 address or a bracketed IPv6 address, and a decimal
// port 1–65535; it does no lookup.
func checkPeerAddr(addr string) string {
	q := strconv.Quote(addr)
	if addr == "" {
		return "peer address is empty"
	}
	if len(addr) > maxAddrLen {
		return "peer address is longer than " + strconv.Itoa(maxAddrLen) + " bytes"
	}
	if strings.Contains(addr, "://") || strings.ContainsAny(addr, "/?#@") {
		return "peer address " + q + " is not host:port (no scheme, user or path)"
	}
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "peer address " + q + " has no port (want host:port)"
	}
	host, port := addr[:i], addr[i+1:]
	if host == "" {
		return "peer address " + q + " has no host"
	}
	if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return "peer address " + q + " has an invalid port"
	}
	if p, _ := strconv.Atoi(port); p < 1 || p > 65535 || port[0] == '0' {
		return "peer address " + q + " has an invalid port"
	}
	if host[0] == '[' {
		inner, ok := strings.CutSuffix(host[1:], "]")
		ip, zone, hasZone := strings.Cut(inner, "%")
		if !ok || !strings.Contains(ip, ":") || !onlyChars(ip, "0123456789abcdefABCDEF:.") ||
			(hasZone && (zone == "" || !onlyChars(zone, hostChars))) {
			return "peer address " + q + " has an invalid IPv6 host"
		}
		if onlyChars(ip, "0:") {
			return "peer address " + q + unspecified
		}
		return ""
	}
	if strings.Contains(host, ":") {
		return "peer address " + q + " has an IPv6 host without brackets"
	}
	if !onlyChars(host, hostChars) {
		return "peer address " + q + " has an invalid host"
	}
	if onlyChars(host, "0.") {
		return "peer address " + q + unspecified
	}
	return ""
}

// unspecified ends the reason an unspecified address is refused: a member
// that records one is dialed by every other member at its own address.
const unspecified = " is unspecified (0.0.0.0 or ::): record the address the other members reach this one at, never a listen-everywhere address"

// CheckPeerAddr returns an error matching ErrInvalidMember that says why
// addr is not a peer address a member may be recorded with, or nil: a
// host name, an IPv4 address or a bracketed IPv6 address — never an
// unspecified one (0.0.0.0, [::]), which every other member would dial as
// itself — and a decimal port 1–65535. It does no lookup.
func CheckPeerAddr(addr string) error {
	if p := checkPeerAddr(addr); p != "" {
		return &Refusal{Err: ErrInvalidMember, Detail: p}
	}
	return nil
}

const hostChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._"

func onlyChars(s, allowed string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(allowed, s[i]) < 0 {
			return false
		}
	}
	return true
}

// Equal reports whether m and o are the same record (nil and empty Metadata
// are the same).
func (m Member) Equal(o Member) bool {
	return m.ID == o.ID && m.PeerAddr == o.PeerAddr && m.ReadOnly == o.ReadOnly && m.Incarnation == o.Incarnation &&
		len(m.Metadata) == len(o.Metadata) && maps.Equal(m.Metadata, o.Metadata)
}

// String draws the record deterministically:
// 4@10.0.0.4:7001 read-only client_addr=10.0.0.4:8001 (metadata keys sorted).
func (m Member) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(m.ID, 10))
	b.WriteByte('@')
	b.WriteString(m.PeerAddr)
	if m.ReadOnly {
		b.WriteString(" read-only")
	}
	if m.Incarnation != 0 {
		b.WriteString(" incarnation=" + strconv.FormatUint(m.Incarnation, 16))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Metadata)) {
		b.WriteString(" " + k + "=" + m.Metadata[k])
	}
	return b.String()
}
