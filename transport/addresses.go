package transport

import (
	"maps"
	"net"
	"strconv"
)

// The host's address book. A group's member record names a peer's host by
// the peer address it was recorded with; when a host moves, it says where
// it is now in the attachments of its host links (wire.Attach.Addr, its
// Config.AdvertiseAddr). The listener then maps the recorded address to
// the new one for every group at once: one update per host moved, not one
// membership change per group. Records are still updated by their groups
// (a member publishes its own record), which makes them right for members
// that never met the moved host; until then, the book routes.
//
// Trust: an attachment is admitted only from a sender the group knows (and,
// with mutual TLS, only from a certified host), exactly as the messages it
// carries; a peer that can send raft messages as a member can already do
// worse than redirect them.

// resolve returns where the host recorded at addr is now: addr itself, or
// the address the book learned for it (followed through later moves).
func (m *Mux) resolve(addr string) string {
	if m == nil {
		return addr
	}
	m.bookMu.Lock()
	defer m.bookMu.Unlock()
	for range 8 { // moves chain (A→B, B→C); a cycle is cut short
		next, ok := m.book[addr]
		if !ok {
			break
		}
		addr = next
	}
	return addr
}

// learnAddress records that the host a group records at recorded is now
// at now (from an admitted attachment), and re-routes every group's peers
// recorded there. It reports whether the book changed.
func (m *Mux) learnAddress(recorded, now string) bool {
	if recorded == "" || now == "" || !dialable(now) || m.resolve(recorded) == now {
		return false
	}
	m.bookMu.Lock()
	if recorded == now {
		delete(m.book, recorded) // back where it was recorded
	} else {
		m.book[recorded] = now
	}
	if m.book[now] == recorded {
		delete(m.book, now) // it moved back: no cycle
	}
	book := maps.Clone(m.book)
	m.bookMu.Unlock()
	m.addrsLearned.Add(1)
	m.log.Info("a peer host moved: its groups' peers recorded at the old address are dialed at the new one",
		"recorded", recorded, "now", now)
	if m.onAddress != nil {
		m.onAddress(book)
	}
	m.mu.Lock()
	ts := make([]*Transport, 0, len(m.groups)+1)
	for _, t := range m.groups {
		ts = append(ts, t)
	}
	m.mu.Unlock()
	for _, t := range ts {
		for _, p := range *t.peers.Load() {
			p.reroute()
		}
	}
	return true
}

// Addresses returns the address book: each peer address that member
// records name, mapped to where that host is now (learned from its host
// links). Addresses not in it are dialed as recorded.
func (m *Mux) Addresses() map[string]string {
	m.bookMu.Lock()
	defer m.bookMu.Unlock()
	return maps.Clone(m.book)
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
