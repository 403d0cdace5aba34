package raft_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// confEntry is a conf change entry at index (term 1) carrying records.
func confEntry(t *testing.T, index uint64, cc *raftpb.ConfChangeV2, records ...raft.Member) *raftpb.Entry {
	t.Helper()
	ctx, err := confchange.Context{ChangeID: index, Members: records}.Encode()
	require.NoError(t, err)
	cc.Context = ctx
	data, err := proto.Marshal(cc)
	require.NoError(t, err)
	return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(1), Type: raftpb.EntryConfChangeV2.Enum(), Data: data}
}

func single(typ raftpb.ConfChangeType, id uint64) *raftpb.ConfChangeSingle {
	return &raftpb.ConfChangeSingle{Type: typ.Enum(), NodeId: proto.Uint64(id)}
}

// TestStoredPeersReadsOnlyWhatCommitted: what a restarting member's
// transport is told before the node starts (who its peers are, at which
// address, and who was removed — refused as such, which makes the refused
// member tombstone its data dir) comes from the committed part of the log
// only, and follows the configuration as raft applies it: a member named
// in a joint change's removals is still a member until the joint
// configuration is left. Every kind of conf change sits once below and once
// above the commit index. The old reading of the whole log (and of every
// RemoveNode as a removal) fails the uncommitted and the joint rows.
func TestStoredPeersReadsOnlyWhatCommitted(t *testing.T) {
	const (
		addV  = raftpb.ConfChangeAddNode
		addL  = raftpb.ConfChangeAddLearnerNode
		rm    = raftpb.ConfChangeRemoveNode
		upd   = raftpb.ConfChangeUpdateNode
		old3  = "127.0.0.1:7003"
		new3  = "127.0.0.1:9003"
		addr4 = "127.0.0.1:7004"
	)
	joint := raftpb.ConfChangeTransition_ConfChangeTransitionJointExplicit
	m := func(id uint64, addr string) raft.Member { return raft.Member{ID: id, PeerAddr: addr} }
	// After the bootstrap (members 1-3 at index 1-3), the tail entries,
	// from index 4 on; commit is the index committed.
	cases := []struct {
		name        string
		tail        func(i uint64) []*raftpb.Entry
		commit      uint64
		wantPeers   map[uint64]string
		wantRemoved []uint64
	}{
		{
			name: "removal committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(rm, 3)}})}
			},
			commit: 4, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002"}, wantRemoved: []uint64{3},
		},
		{
			name: "removal not committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(rm, 3)}})}
			},
			commit: 3, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: old3},
		},
		{
			name: "address update committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(upd, 3)}}, m(3, new3))}
			},
			commit: 4, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: new3},
		},
		{
			name: "address update not committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(upd, 3)}}, m(3, new3))}
			},
			commit: 3, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: old3},
		},
		{
			name: "learner added, not committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(addL, 4)}}, m(4, addr4))}
			},
			commit: 3, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: old3},
		},
		{
			name: "learner added and removed, only the add committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{
					confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(addL, 4)}}, m(4, addr4)),
					confEntry(t, 5, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(rm, 4)}}),
				}
			},
			commit: 4, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: old3, 4: addr4},
		},
		{
			name: "joint replacement entered, not left",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{
					confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(addL, 4)}}, m(4, addr4)),
					confEntry(t, 5, &raftpb.ConfChangeV2{Transition: joint.Enum(), Changes: []*raftpb.ConfChangeSingle{single(addV, 4), single(rm, 3)}}),
				}
			},
			commit: 5, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: old3, 4: addr4},
		},
		{
			name: "joint replacement left, the leave not committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{
					confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(addL, 4)}}, m(4, addr4)),
					confEntry(t, 5, &raftpb.ConfChangeV2{Transition: joint.Enum(), Changes: []*raftpb.ConfChangeSingle{single(addV, 4), single(rm, 3)}}),
					confEntry(t, 6, &raftpb.ConfChangeV2{}),
				}
			},
			commit: 5, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: old3, 4: addr4},
		},
		{
			name: "joint replacement left and committed",
			tail: func(uint64) []*raftpb.Entry {
				return []*raftpb.Entry{
					confEntry(t, 4, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(addL, 4)}}, m(4, addr4)),
					confEntry(t, 5, &raftpb.ConfChangeV2{Transition: joint.Enum(), Changes: []*raftpb.ConfChangeSingle{single(addV, 4), single(rm, 3)}}),
					confEntry(t, 6, &raftpb.ConfChangeV2{}),
				}
			},
			commit: 6, wantPeers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 4: addr4}, wantRemoved: []uint64{3},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
			require.NoError(t, err)
			defer store.Close()
			var ents []*raftpb.Entry
			for id := uint64(1); id <= 3; id++ {
				ents = append(ents, confEntry(t, id, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{single(addV, id)}}, m(id, fmt.Sprintf("127.0.0.1:%d", 7000+id))))
			}
			ents = append(ents, c.tail(4)...)
			require.NoError(t, store.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(c.commit)}, ents, nil))
			peers, removed, err := raft.StoredPeers(store)
			require.NoError(t, err)
			require.Equal(t, c.wantPeers, peers)
			require.Equal(t, c.wantRemoved, removed)
		})
	}
}
