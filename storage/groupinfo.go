package storage

import (
	"fmt"
	"slices"

	etcdraft "go.etcd.io/raft/v3"
)

// GroupInfo is what a data dir holds of one group, read from its records
// without opening it (Engine.GroupInfos): a running group's too.
type GroupInfo struct {
	// ID is the group.
	ID uint64
	// Identity is the cluster and member IDs recorded for the group's
	// member; zero when none is recorded yet.
	Identity Identity
	// HasState reports whether the group holds a member's raft state: a
	// log, a hard state or a snapshot. A group without (its records hold at
	// most an identity) never started: a bootstrap or a join that stopped
	// before its first write.
	HasState bool
	// Removed reports whether the group's member was removed
	// (Store.MarkRemoved): Engine.Group refuses it with ErrRemoved.
	Removed bool
}

// GroupInfos returns what the data dir holds of each of its groups, in
// group order: the groups Groups lists.
//
// Errors: ErrClosed; ErrCorrupt (a record of a group fails its check);
// the storage's.
func (e *Engine) GroupInfos() ([]GroupInfo, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	var out []GroupInfo
	err := e.view(func(tx kvTx) error {
		names, err := tx.BucketsWithPrefix([]byte("group/"), 0)
		if err != nil {
			return err
		}
		for _, k := range names {
			id, kind, ok := parseGroupBucket(k)
			if !ok || kind != "state" {
				continue
			}
			info, err := e.groupInfo(tx, id)
			if err != nil {
				return err
			}
			out = append(out, info)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b GroupInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// GroupInfo returns what the data dir holds of group id.
//
// Errors: ErrNoGroup when it holds nothing of id; ErrClosed; ErrCorrupt;
// the storage's.
func (e *Engine) GroupInfo(id uint64) (GroupInfo, error) {
	if err := e.usable(); err != nil {
		return GroupInfo{}, err
	}
	var info GroupInfo
	err := e.view(func(tx kvTx) error {
		if tx.Bucket(stateBucketName(id)) == nil {
			return fmt.Errorf("%w: %d in %s", ErrNoGroup, id, e.dir)
		}
		var err error
		info, err = e.groupInfo(tx, id)
		return err
	})
	return info, err
}

// usable is ErrClosed once the engine is closing.
func (e *Engine) usable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return ErrClosed
	}
	return nil
}

// groupInfo reads group id's records, as Store.load does.
func (e *Engine) groupInfo(tx kvTx, id uint64) (GroupInfo, error) {
	info := GroupInfo{ID: id}
	name := stateBucketName(id)
	sb := tx.Bucket(name)
	if sb == nil {
		return info, nil
	}
	info.Removed = sb.Get(removedKey) != nil
	if v := sb.Get(identityKey); v != nil {
		id, err := decodeIdentity(v)
		if err != nil {
			return info, &CorruptError{File: e.dbPath, Where: string(name) + "/" + string(identityKey), Err: err}
		}
		info.Identity = id
	}
	if v := sb.Get(hardStateKey); v != nil {
		hs, err := decodeHardState(v)
		if err != nil {
			return info, &CorruptError{File: e.dbPath, Where: string(name) + "/" + string(hardStateKey), Err: err}
		}
		info.HasState = !etcdraft.IsEmptyHardState(hs)
	}
	if v := sb.Get(boundsKey); v != nil && !info.HasState {
		vs, err := decodeUvarints(v, 3)
		if err != nil {
			return info, &CorruptError{File: e.dbPath, Where: string(name) + "/" + string(boundsKey), Err: err}
		}
		info.HasState = vs[2] > 0 // the last index: entries, or a snapshot
	}
	if !info.HasState && e.lazyBounds.Load() {
		// The bounds record is not rewritten by appends: entries are
		// state too.
		if lb := tx.Bucket(logBucketName(id)); lb != nil {
			k, _ := lb.Cursor().Last()
			info.HasState = k != nil
		}
	}
	return info, nil
}

// decodeIdentity decodes an identity record: two fields (cluster and member
// IDs), or three since incarnations exist.
func decodeIdentity(v []byte) (Identity, error) {
	vs, err := decodeUvarints(v, 3)
	if err != nil {
		if vs, err = decodeUvarints(v, 2); err == nil {
			vs = append(vs, 0)
		}
	}
	if err != nil {
		return Identity{}, err
	}
	return Identity{ClusterID: vs[0], MemberID: vs[1], Incarnation: vs[2]}, nil
}
