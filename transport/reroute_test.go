package transport

import (
	"fmt"
	"sync"
	"testing"
)

// TestConcurrentReroutesLeaveOneFlow: a peer re-routed from many
// goroutines at once (its record updated while the address book moves it)
// ends on exactly one link, the one of the address it is dialed at, with
// its messages and its stats there; every other link it passed through is
// closed, none kept open by an orphaned flow.
func TestConcurrentReroutesLeaveOneFlow(t *testing.T) {
	m := newTestMux(t)
	tr := groupOn(t, m, 1, 1, &fakeHandler{})
	addrs := make([]string, 8)
	for i := range addrs {
		addrs[i] = deadAddr(t)
	}
	tr.AddPeer(2, addrs[0])
	p := tr.peer(2)
	for round := range 50 {
		var wg sync.WaitGroup
		for i := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr.UpdatePeer(2, addrs[(i+round)%len(addrs)])
			}()
		}
		wg.Wait()
		p.mu.Lock()
		addr, cur := p.addr, p.flow
		p.mu.Unlock()
		m.mu.Lock()
		links := make(map[string]*link, len(m.links))
		for a, l := range m.links {
			links[a] = l
		}
		m.mu.Unlock()
		var flows []string
		for a, l := range links {
			for _, f := range l.flowList() {
				if f.p == p {
					flows = append(flows, a)
				}
			}
		}
		if len(flows) != 1 || len(links) != 1 || links[addr] == nil || cur == nil || cur.l != links[addr] {
			t.Fatalf("round %d: peer dialed at %s has flows on links %v; the mux has %d links; its current flow is on %v",
				round, addr, flows, len(links), fmt.Sprint(cur != nil && cur.l == links[addr]))
		}
	}
}
