package transport

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
)

// The host's address book. A group's member record names a peer's host by
// the peer address it was recorded with; when a host moves, it says where
// it is now in the attachments of its host links (wire.Attach.Addr, its
// Config.AdvertiseAddr), with its host ID (wire.Attach.HostID, made once in
// its data dir). The listener then dials that host's members recorded at
// its old address at the new one, for every group at once: one update per
// host moved, not one membership change per group. Records are still
// updated by their groups (a member publishes its own record), which makes
// them right for members that never met the moved host; until then, the
// book routes.
//
// The book is keyed by host ID, never by address: each entry is one host's
// current address and the addresses it was known at before. A record is
// resolved in one step, never through a chain of moves (host S2 moving
// B→C and then S1 moving A→B must not send S1's traffic to S2 at C), and
// two hosts that swap addresses are two entries. A move is learned only
// from the host that owns the member (peer.owner): the host ID that first
// spoke for the member on this host's links; see "Host identity and what a
// peer may do" in docs/architecture.md.

// maxBookHosts bounds the book; past it, the entry learned longest ago is
// dropped (its members are dialed as recorded again).
const maxBookHosts = 1024

// maxRecordedPerHost bounds the earlier addresses an entry keeps.
const maxRecordedPerHost = 8

// HostAddress is where the address book knows a peer host to be.
type HostAddress struct {
	// Addr is where the host listens now (its advertised peer address).
	Addr string `json:"addr"`
	// Recorded are addresses it was known at before: a record of one of
	// its members naming one of them is dialed at Addr.
	Recorded []string `json:"recorded"`
	// Learned orders the entries: a higher one was learned later.
	Learned uint64 `json:"learned"`
}

// resolve returns where to dial a member recorded at rec whose host is
// owner (0: not known yet): the owner's current address if rec is one it
// was known at before, else rec. For a member whose host is not known
// yet, rec is looked up among every host's earlier addresses (the one
// learned last wins), unless a host is known to be at rec now. One step,
// never a chain.
func (m *Mux) resolve(owner uint64, rec string) string {
	if m == nil {
		return rec
	}
	m.bookMu.Lock()
	defer m.bookMu.Unlock()
	if owner != 0 {
		if e := m.book[owner]; e != nil && slices.Contains(e.Recorded, rec) {
			return e.Addr
		}
		return rec
	}
	var best *HostAddress
	for _, e := range m.book {
		if e.Addr == rec {
			return rec // a host is there now
		}
		if slices.Contains(e.Recorded, rec) && (best == nil || e.Learned > best.Learned) {
			best = e
		}
	}
	if best != nil {
		return best.Addr
	}
	return rec
}

// learnAddress records that host, which owns a member recorded at
// recorded, is now at now (from an admitted attachment of its own link),
// and re-routes every group's peers. It reports whether the book changed.
func (m *Mux) learnAddress(host uint64, recorded, now string) bool {
	if host == 0 || recorded == "" || now == "" || !dialable(now) {
		return false
	}
	m.bookMu.Lock()
	e := m.book[host]
	if e == nil {
		if recorded == now {
			m.bookMu.Unlock()
			return false // where it was recorded: nothing to learn
		}
		if len(m.book) >= maxBookHosts {
			m.evictOldest()
		}
		e = &HostAddress{}
		m.book[host] = e
	}
	if e.Addr == now && (recorded == now || slices.Contains(e.Recorded, recorded)) {
		m.bookMu.Unlock()
		return false
	}
	e.Addr = now
	e.Recorded = slices.DeleteFunc(e.Recorded, func(a string) bool { return a == now })
	if recorded != now && !slices.Contains(e.Recorded, recorded) {
		e.Recorded = append(e.Recorded, recorded)
		if len(e.Recorded) > maxRecordedPerHost {
			e.Recorded = slices.Delete(e.Recorded, 0, len(e.Recorded)-maxRecordedPerHost)
		}
	}
	m.bookSeq++
	e.Learned = m.bookSeq
	if len(e.Recorded) == 0 {
		delete(m.book, host) // back where it was recorded
	}
	book := m.bookCopy()
	m.bookMu.Unlock()
	m.addrsLearned.Add(1)
	m.log.Info("a peer host moved: its members recorded at an earlier address are dialed at the new one, in every group",
		"host", fmt.Sprintf("%016x", host), "recorded", recorded, "now", now)
	if m.onAddress != nil {
		m.onAddress(book)
	}
	m.rerouteAll()
	return true
}

// evictOldest drops the entry learned longest ago. m.bookMu is held.
func (m *Mux) evictOldest() {
	var oldest uint64
	var at uint64
	for id, e := range m.book {
		if oldest == 0 || e.Learned < at {
			oldest, at = id, e.Learned
		}
	}
	delete(m.book, oldest)
}

// bookCopy returns a deep copy of the book. m.bookMu is held.
func (m *Mux) bookCopy() map[uint64]HostAddress {
	out := make(map[uint64]HostAddress, len(m.book))
	for id, e := range m.book {
		out[id] = HostAddress{Addr: e.Addr, Recorded: slices.Clone(e.Recorded), Learned: e.Learned}
	}
	return out
}

// rerouteAll re-resolves every group's peers.
func (m *Mux) rerouteAll() {
	m.mu.Lock()
	ts := slices.Collect(maps.Values(m.groups))
	m.mu.Unlock()
	for _, t := range ts {
		for _, p := range *t.peers.Load() {
			p.reroute()
		}
	}
}

// Addresses returns the address book: for each peer host (by host ID)
// that moved, where it is now and the addresses its members' records may
// still name. Records of other addresses are dialed as they are.
func (m *Mux) Addresses() map[uint64]HostAddress {
	m.bookMu.Lock()
	defer m.bookMu.Unlock()
	return m.bookCopy()
}

// dialable reports whether addr is a host:port another host can dial: not
// an unspecified address, not port 0.
func dialable(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return false
	}
	return true
}
