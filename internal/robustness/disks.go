package robustness

import (
	"sync"
	"time"

	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// disks wraps every member's storage in a faultstore (a fresh one per run
// of a member: a restart starts on a disk with no fault pending) and
// applies the cluster-wide fsync delay to each.
type disks struct {
	mu    sync.Mutex
	by    map[uint64]*faultstore.Store
	delay time.Duration
}

func (d *disks) wrap(id uint64, s *storage.Store) raft.Storage {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.by == nil {
		d.by = map[uint64]*faultstore.Store{}
	}
	f := faultstore.Wrap(s)
	f.SetSaveDelay(d.delay)
	d.by[id] = f
	return f
}

// of returns member id's current disk (nil if it never ran).
func (d *disks) of(id uint64) *faultstore.Store {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.by[id]
}

// setDelay makes every fsync (Save) of every member take d more.
func (d *disks) setDelay(v time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = v
	for _, f := range d.by {
		f.SetSaveDelay(v)
	}
}
