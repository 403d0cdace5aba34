package raft

import (
	"bufio"
	"fmt"
	"slices"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The peers a member's storage knows, read before the log is replayed.

// preloadPeers reads the conf changes of the log in [lo, hi] and makes every
// member they add reachable in the transport (and forgets those they remove)
// before the log is replayed. The member table itself changes only as the
// entries are applied.
func (n *Node) preloadPeers(lo, hi uint64) error {
	peers := map[uint64]string{}
	if err := logPeers(n.store, lo, hi, peers, nil); err != nil {
		return err
	}
	for id, addr := range peers {
		if id != n.cfg.ID && !n.apply.members.removed[id] {
			n.tr.AddPeer(id, addr)
		}
	}
	return nil
}

// logPeers updates peers (ID → peer address) with the conf changes of the
// log in [lo, hi]: members they add or update, minus those they remove,
// which it adds to removed (if not nil).
func logPeers(store etcdraft.Storage, lo, hi uint64, peers map[uint64]string, removed map[uint64]bool) error {
	for lo <= hi {
		ents, err := store.Entries(lo, hi+1, 4<<20)
		if err != nil {
			return fmt.Errorf("raft: reading the log: %w", err)
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
				continue // applying it will stop the node with the error
			}
			ctx, _ := changeContext(cc)
			for _, m := range ctx.Members {
				peers[m.ID] = m.PeerAddr
			}
			for _, c := range cc.AsV2().GetChanges() {
				if c.GetType() == raftpb.ConfChangeRemoveNode {
					delete(peers, c.GetNodeId())
					if removed != nil {
						removed[c.GetNodeId()] = true
					}
				}
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

// StoredPeers returns the peer addresses a stopped member's storage knows
// (from its latest snapshot and its log), by member ID, and the IDs removed
// from the cluster: what a host gives its transport before the node starts
// (understudy.Start does), so that a restarted member accepts its peers from
// the first moment instead of refusing them until its log is replayed.
func StoredPeers(store Storage) (peers map[uint64]string, removed []uint64, err error) {
	peers = map[uint64]string{}
	gone := map[uint64]bool{}
	snap, err := store.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("raft: reading the snapshot: %w", err)
	}
	if !etcdraft.IsEmptySnap(snap) {
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
				peers[m.ID] = m.PeerAddr
			}
			for _, id := range h.removed {
				gone[id] = true
			}
		}
		_ = rc.Close()
	}
	first, err := store.FirstIndex()
	if err != nil {
		return nil, nil, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return nil, nil, err
	}
	if err := logPeers(store, first, last, peers, gone); err != nil {
		return nil, nil, err
	}
	for id := range gone {
		delete(peers, id)
		removed = append(removed, id)
	}
	slices.Sort(removed)
	return peers, removed, nil
}
