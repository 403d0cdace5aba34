package understudy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// slowRestore is a kv state machine whose Restore takes a while: a
// restarted member's transport runs for that long before its log replay
// begins.
type slowRestore struct {
	*kv.Store
	delay time.Duration
}

func (s slowRestore) Restore(r io.Reader) error {
	time.Sleep(s.delay)
	return s.Store.Restore(r)
}

// TestHostUncommittedChangeAtTheTail: a leader that appended a conf change
// and crashed before replicating it restarts holding the entry past its
// commit index. Before, a restarting member read every RemoveNode of its
// log, this one included, and refused the member it names as removed; that
// member — alive, a voter, here the new leader — was told so when it
// dialed, tombstoned its data dir and stopped for good. Only committed
// changes count now. Each kind of change sits at the tail in turn (a
// removal of the live leader, an address update to a dead address, a
// learner's add), with a snapshot and a slow restore before the replay.
func TestHostUncommittedChangeAtTheTail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	_, err := tc.leader(ctx).Propose(ctx, kv.Put("k", "0"))
	require.NoError(t, err)

	kinds := []struct {
		name string
		cc   func(live uint64) (*raftpb.ConfChangeV2, []raft.Member)
	}{
		{"removal of the live leader", func(live uint64) (*raftpb.ConfChangeV2, []raft.Member) {
			return &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(live)}}}, nil
		}},
		{"address update of the live leader", func(live uint64) (*raftpb.ConfChangeV2, []raft.Member) {
			return &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: proto.Uint64(live)}}},
				[]raft.Member{{ID: live, PeerAddr: "127.0.0.1:1"}}
		}},
		{"a learner's add", func(uint64) (*raftpb.ConfChangeV2, []raft.Member) {
			return &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(9)}}},
				[]raft.Member{{ID: 9, PeerAddr: "127.0.0.1:1"}}
		}},
	}
	for round, kind := range kinds {
		// The leader stops (a crash, as far as its disk is concerned: the
		// entry it "appended" is written below) and another takes over.
		l := tc.leader(ctx)
		lid, term := l.ID(), l.Term()
		_, err := l.Snapshot(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Close(ctx))
		delete(tc.hosts, lid)
		live := tc.leader(ctx)

		dir := filepath.Join(tc.dir, fmt.Sprint(lid))
		store, err := storage.Open(dir, storage.Options{NoSync: true})
		require.NoError(t, err)
		hs, _, err := store.InitialState()
		require.NoError(t, err)
		last, err := store.LastIndex()
		require.NoError(t, err)
		cc, records := kind.cc(live.ID())
		cctx, err := confchange.Context{ChangeID: 1000 + uint64(round), Members: records}.Encode()
		require.NoError(t, err)
		cc.Context = cctx
		data, err := proto.Marshal(cc)
		require.NoError(t, err)
		// At the term it led, past its commit index, never replicated.
		require.GreaterOrEqual(t, hs.GetTerm(), term)
		tail := &raftpb.Entry{Index: proto.Uint64(last + 1), Term: proto.Uint64(term), Type: raftpb.EntryConfChangeV2.Enum(), Data: data}
		require.NoError(t, store.Save(nil, []*raftpb.Entry{tail}, nil))
		require.NoError(t, store.Close())

		ln, err := net.Listen("tcp", tc.addrs[lid])
		require.NoError(t, err)
		h, err := understudy.Start(ctx, tc.cfg(lid, ln), slowRestore{kv.New(), 500 * time.Millisecond})
		require.NoError(t, err, kind.name)
		tc.hosts[lid] = h

		// The cluster goes on with all three: the restarted member's tail is
		// overwritten, the live leader was never refused, and a write
		// through the restarted member reaches everyone.
		want := fmt.Sprint(round + 1)
		_, err = h.Propose(ctx, kv.Put("k", want))
		require.NoError(t, err, kind.name)
		for id, m := range tc.hosts {
			require.NoError(t, m.Err(), "member %d after %s", id, kind.name)
			require.Eventually(t, func() bool {
				v, err := m.Read(ctx, []byte("k"))
				return err == nil && string(v) == want
			}, 20*time.Second, 10*time.Millisecond, "member %d after %s", id, kind.name)
		}
		cfg, err := live.Membership(ctx)
		require.NoError(t, err, kind.name)
		require.Len(t, cfg.Members, 3, kind.name)
		for _, ms := range cfg.Members {
			require.NotEqual(t, "127.0.0.1:1", ms.PeerAddr, kind.name)
		}
	}
	tc.closeAll()
	for id := range tc.hosts {
		has, err := understudy.HasMember(filepath.Join(tc.dir, fmt.Sprint(id)))
		require.NoError(t, err, "member %d's data dir", id)
		require.True(t, has)
	}
}
