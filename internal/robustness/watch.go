package robustness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// oddWatch checks that every configuration a member applies outside a
// joint state has an odd number of voters: it subscribes to every run of
// every member and, on each membership change a member applied, reads the
// configuration that member now has.
type oddWatch struct {
	c      *cluster.Cluster
	h      *History
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	subbed map[*raft.Node]bool
	even   []string
}

func startOddWatch(c *cluster.Cluster, h *History) *oddWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &oddWatch{c: c, h: h, ctx: ctx, cancel: cancel, subbed: map[*raft.Node]bool{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for ctx.Err() == nil {
			for _, m := range c.Running() {
				w.subscribe(m)
			}
			time.Sleep(2 * time.Millisecond) // a restarted member's new run is picked up at once
		}
	}()
	return w
}

func (w *oddWatch) subscribe(m *cluster.Member) {
	node := m.Node
	w.mu.Lock()
	done := w.subbed[node]
	w.subbed[node] = true
	w.mu.Unlock()
	if done {
		return
	}
	ch, unsub := node.Subscribe(256)
	w.check(m.ID, node) // the configuration it has now
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer unsub()
		for {
			select {
			case <-w.ctx.Done():
				return
			case ev, ok := <-ch:
				if !ok {
					return // the run ended
				}
				if ev.Type == raft.EventMembershipChanged {
					w.check(m.ID, node)
				}
			}
		}
	}()
}

// check reads member id's configuration and records it if even outside a
// joint state.
func (w *oddWatch) check(id uint64, node *raft.Node) {
	ctx, cancel := context.WithTimeout(w.ctx, time.Second)
	defer cancel()
	st, err := node.Status(ctx)
	if err != nil || st.Joint() || len(st.Voters)%2 == 1 || len(st.Voters) == 0 {
		return // (no voters: a joiner that has no configuration yet)
	}
	w.mu.Lock()
	w.even = append(w.even, fmt.Sprintf("%.3fs: member %d applied voters %v", w.h.Since().Seconds(), id, st.Voters))
	w.mu.Unlock()
}

// stop ends the watch and returns the even configurations seen.
func (w *oddWatch) stop() []string {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.even
}
