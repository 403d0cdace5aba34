package raft

import (
	"bufio"
	"fmt"

	etcdraft "go.etcd.io/raft/v3"
	etcdconf "go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// The peers a member's storage knows, read before the log is replayed.
//
// Only what is committed counts. A log's tail past the commit index may
// never commit (a leader that appended a removal and crashed before
// replicating it restarts holding the entry; the next leader overwrites it),
// so reading it would refuse a live member as removed — and a refused member
// tombstones its data dir — or let an address update that never happened
// override the committed one. And a member is removed when the configuration
// stops listing it, not when a change names it: the outgoing voters of a
// joint change are still members until the joint configuration is left.
// confReplay therefore follows the configuration through the committed conf
// changes exactly as raft applies them, and the member table does the rest,
// as the apply task will when it replays the same entries.

// confReplay follows a member table through committed conf changes.
type confReplay struct {
	tr    tracker.ProgressTracker
	table *memberTable
}

// newConfReplay starts from table, whose configuration is table.confState.
func newConfReplay(table *memberTable) (*confReplay, error) {
	r := &confReplay{tr: tracker.MakeProgressTracker(1, 0), table: table}
	cfg, prs, err := etcdconf.Restore(etcdconf.Changer{Tracker: r.tr, LastIndex: table.index}, table.confState)
	if err != nil {
		return nil, fmt.Errorf("raft: restoring the stored configuration %v: %w", table.confState, err)
	}
	r.tr.Config, r.tr.Progress = cfg, prs
	return r, nil
}

// apply applies the conf change entry e (committed) as raft and the apply
// goroutine would, and returns the members it removed. A change raft could
// not apply is an error (applying it would stop the node the same way).
func (r *confReplay) apply(e *raftpb.Entry) (removed []uint64, err error) {
	cci, err := decodeConfChange(e)
	if err != nil {
		return nil, err
	}
	cc := cci.AsV2()
	chg := etcdconf.Changer{Tracker: r.tr, LastIndex: e.GetIndex()}
	var (
		cfg tracker.Config
		prs tracker.ProgressMap
	)
	if cc.LeaveJoint() {
		cfg, prs, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		cfg, prs, err = chg.EnterJoint(autoLeave, cc.GetChanges()...)
	} else {
		cfg, prs, err = chg.Simple(cc.GetChanges()...)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: conf change at index %d: %v", ErrCorruptEntry, e.GetIndex(), err)
	}
	r.tr.Config, r.tr.Progress = cfg, prs
	ctx, _ := changeContext(cci) // ignored alike by the apply task
	return r.table.apply(e.GetIndex(), ctx, r.tr.ConfState()), nil
}

// replayCommitted applies the conf changes of the log in [lo, hi] (all
// committed) to r.
func replayCommitted(store etcdraft.Storage, r *confReplay, lo, hi uint64) error {
	for lo <= hi {
		ents, err := store.Entries(lo, hi+1, 4<<20)
		if err != nil {
			return fmt.Errorf("raft: reading the log: %w", err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if isConfChange(e) {
				if _, err := r.apply(e); err != nil {
					return err
				}
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

// preloadPeers makes every member that the committed conf changes in
// [lo, hi] add reachable in the transport, at its committed address, before
// the log is replayed (a restarted member would otherwise refuse its peers
// as unknown until it applied their entries). The member table itself
// changes only as the entries are applied.
func (n *Node) preloadPeers(lo, hi uint64) error {
	r, err := newConfReplay(n.apply.members.clone())
	if err != nil {
		return err
	}
	if err := replayCommitted(n.store, r, lo, hi); err != nil {
		return err
	}
	for _, m := range r.table.records {
		if id := m.ID; id != n.cfg.ID && !n.apply.members.isRemoved(id) {
			n.tr.AddPeer(id, m.PeerAddr)
			n.setPeerIncarnation(id, m.Incarnation)
		}
	}
	// The incarnations of the uncommitted tail too (learnIncarnations).
	last, err := n.store.LastIndex()
	if err != nil {
		return err
	}
	incs, err := tailIncarnations(n.store, hi+1, last)
	if err != nil {
		return err
	}
	for id, inc := range incs {
		if id != n.cfg.ID {
			n.setPeerIncarnation(id, inc)
		}
	}
	return nil
}

// The incarnations are taken from every conf change a member holds, not
// only the committed ones: a record's incarnation was published by that
// copy of the member's data, and a copy's incarnation never changes, so
// refusing another one is right whether the record commits or not. And a
// candidate that holds the record of member i's incarnation k but does not
// know yet that it committed (its commit index lags; it restarted) must
// refuse a wiped copy of i just the same: the writes i acknowledged after
// publishing k are the ones its vote would let a stale candidate lose.

// learnIncarnations tells the transport the incarnations in the member
// records of ents, conf changes as they are appended (committed or not),
// and stops the node when one of them records another incarnation for
// this member than its own.
func (n *Node) learnIncarnations(ents []*raftpb.Entry) {
	for _, e := range ents {
		if !isConfChange(e) {
			continue
		}
		cc, err := decodeConfChange(e)
		if err != nil {
			continue // the apply task stops the node on it, if it commits
		}
		ctx, err := changeContext(cc)
		if err != nil {
			continue
		}
		for _, m := range ctx.Members {
			switch {
			case m.Incarnation == 0:
			case m.ID != n.cfg.ID:
				n.setPeerIncarnation(m.ID, m.Incarnation)
			case n.inc.Load() != 0 && m.Incarnation != n.inc.Load():
				n.wiped(fmt.Sprintf("its log holds, at index %d, its record with incarnation %x; its data is incarnation %x", e.GetIndex(), m.Incarnation, n.inc.Load()))
			}
		}
	}
}

// tailIncarnations returns the incarnations recorded in the conf changes
// of the log in [lo, hi], committed or not (see learnIncarnations).
func tailIncarnations(store etcdraft.Storage, lo, hi uint64) (map[uint64]uint64, error) {
	incs := map[uint64]uint64{}
	for lo <= hi {
		ents, err := store.Entries(lo, hi+1, 4<<20)
		if err != nil {
			return nil, fmt.Errorf("raft: reading the log: %w", err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if !isConfChange(e) {
				continue
			}
			cc, err := decodeConfChange(e)
			if err != nil {
				continue
			}
			if ctx, err := changeContext(cc); err == nil {
				for _, m := range ctx.Members {
					if m.Incarnation != 0 && incs[m.ID] == 0 {
						incs[m.ID] = m.Incarnation
					}
				}
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return incs, nil
}

// StoredPeers returns the peer addresses a stopped member's storage knows
// (from its latest snapshot and the committed part of its log), by member
// ID, and the IDs removed from the cluster: what a host gives its transport
// before the node starts (understudy.Start does), so that a restarted member
// accepts its peers from the first moment instead of refusing them until its
// log is replayed. Entries past the stored commit index are not read: they
// may never commit, and a member that this member refuses as removed stops
// for good.
func StoredPeers(store Storage) (peers map[uint64]string, removed []uint64, err error) {
	ms, removed, err := StoredMembers(store)
	if err != nil {
		return nil, nil, err
	}
	peers = make(map[uint64]string, len(ms))
	for id, m := range ms {
		peers[id] = m.PeerAddr
	}
	return peers, removed, nil
}

// StoredMembers is StoredPeers with each member's whole record (its
// incarnation included: what a host gives its transport to refuse a
// wiped member from the first moment, transport.Config.PeerIncarnations).
func StoredMembers(store Storage) (members map[uint64]Member, removed []uint64, err error) {
	table := newMemberTable()
	snap, err := store.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("raft: reading the snapshot: %w", err)
	}
	if !etcdraft.IsEmptySnap(snap) {
		table.index = snap.GetMetadata().GetIndex()
		table.confState = snap.GetMetadata().GetConfState()
		rc, size, err := store.OpenSnapshot(snap)
		if err != nil {
			return nil, nil, fmt.Errorf("raft: opening the snapshot: %w", err)
		}
		if size > 0 {
			h, herr := readSnapHeader(bufio.NewReaderSize(rc, 64<<10))
			if herr != nil {
				_ = rc.Close()
				return nil, nil, herr
			}
			for _, m := range h.members {
				table.put(m)
			}
			for _, id := range h.removed {
				table.markRemoved(id)
			}
		}
		_ = rc.Close()
	}
	hs, _, err := store.InitialState()
	if err != nil {
		return nil, nil, fmt.Errorf("raft: reading the hard state: %w", err)
	}
	first, err := store.FirstIndex()
	if err != nil {
		return nil, nil, err
	}
	r, err := newConfReplay(table)
	if err != nil {
		return nil, nil, err
	}
	if err := replayCommitted(store, r, first, hs.GetCommit()); err != nil {
		return nil, nil, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return nil, nil, err
	}
	incs, err := tailIncarnations(store, hs.GetCommit()+1, last)
	if err != nil {
		return nil, nil, err
	}
	members = make(map[uint64]Member, len(table.records))
	for _, m := range table.records {
		if id := m.ID; !table.isRemoved(id) {
			if m.Incarnation == 0 {
				m.Incarnation = incs[id] // from the uncommitted tail (learnIncarnations)
			}
			members[id] = m
		}
	}
	return members, table.removedIDs(), nil
}
