package understudy_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestUpdateMemberRefusesAnIncarnationNotItsOwn: an update that records
// for learner 4 (not started yet) the incarnation copied from member 1's
// record is refused, on the leader and through a follower. Before, it was
// recorded, and every peer then refused 4's real replica as wiped, for
// good. 4 then joins and publishes its own incarnation itself.
func TestUpdateMemberRefusesAnIncarnationNotItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	tc.published(ctx, l.ID(), 3)
	var follower *understudy.Group
	for _, h := range tc.hosts {
		if h != l {
			follower = h
		}
	}
	ln4 := listen(t)
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}))
	rec1, ok := l.Member(1)
	require.True(t, ok)
	copied := raft.Member{ID: 4, PeerAddr: ln4.Addr().String(), Incarnation: rec1.Incarnation}
	for _, via := range []*understudy.Group{l, follower} {
		err := via.UpdateMember(ctx, copied)
		require.ErrorIs(t, err, confchange.ErrInvalidMember, "through member %d", via.ID())
		require.Contains(t, err.Error(), "leave Incarnation 0")
	}
	rec4, ok := l.Member(4)
	require.True(t, ok)
	require.Zero(t, rec4.Incarnation, "nothing recorded")

	h4, err := tc.join(ctx, 4, ln4, tc.addrs[1], tc.addrs[2], tc.addrs[3])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		m, ok := l.Member(4)
		return ok && m.Incarnation == h4.Incarnation() && m.Incarnation != 0
	}, 20*time.Second, 10*time.Millisecond, "4 published its own incarnation")
	v, err := h4.Read(ctx, []byte("nothing"))
	require.NoError(t, err)
	require.Empty(t, v)
}

// TestHostRestoreBackupWithACopiedRecord: the restored member's record
// copied from Membership (incarnation included) does not record the old
// copy's incarnation: the restored data is a new copy, and before, the
// restored member stopped itself as wiped on every start.
func TestHostRestoreBackupWithACopiedRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	tc.published(ctx, l.ID(), 3)
	_, err := l.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = l.Backup(ctx, &buf)
	require.NoError(t, err)

	self, ok := l.Member(l.ID())
	require.True(t, ok)
	require.NotZero(t, self.Incarnation)
	ln := listen(t)
	self.PeerAddr = ln.Addr().String()
	id := self.ID
	dir := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, understudy.RestoreBackup(bytes.NewReader(buf.Bytes()), dir, self))
	cfg := tc.cfg(id, ln)
	cfg.DataDir = dir
	h, err := understudy.Start(ctx, cfg, kv.New())
	require.NoError(t, err)
	defer func() { _ = h.Close(context.Background()) }()
	_, err = h.Propose(ctx, kv.Put("b", "2"))
	require.NoError(t, err, "the restored member runs (%v)", h.Err())
	v, err := h.Read(ctx, []byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
	require.Eventually(t, func() bool {
		m, ok := h.Member(id)
		return ok && m.Incarnation == h.Incarnation() && m.Incarnation != self.Incarnation
	}, 20*time.Second, 10*time.Millisecond, "it published the new copy's incarnation")
}
