package understudy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestWipedJoinedReplicaRefusedAtJoin: replica 4 was added as a learner,
// joined, caught up and published its incarnation; its data is lost and
// it starts again with its usual configuration (Join). Its data dir is
// empty, so it takes the join path, where no bootstrap check runs: before,
// the member asked refused its incarnation as wiped and the join retried
// that forever ("no member answered yet"). Now the start is refused up
// front with raft.ErrAlreadyBootstrapped and what to do instead.
func TestWipedJoinedReplicaRefusedAtJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	ln4 := listen(t)
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}))
	join := []string{tc.addrs[1], tc.addrs[2], tc.addrs[3]}
	h4, err := tc.join(ctx, 4, ln4, join...)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := h4.StaleRead([]byte("a"))
		return err == nil && string(v) == "1"
	}, 20*time.Second, 10*time.Millisecond, "4 caught up")
	inc := h4.Incarnation()
	require.Eventually(t, func() bool {
		for id := uint64(1); id <= 3; id++ {
			if m, ok := tc.hosts[id].Member(4); !ok || m.Incarnation != inc {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "every member applied 4's incarnation")
	tc.stop(ctx, 4)
	tc.wipe(4)

	sctx, scancel := context.WithTimeout(ctx, 20*time.Second) // bounds the retries of the defect
	defer scancel()
	_, err = tc.restart(sctx, 4, func(c *understudy.Config) { c.Join = join })
	require.ErrorIs(t, err, raft.ErrAlreadyBootstrapped)
	require.Contains(t, err.Error(), "new ID")
	has, herr := understudy.HasMember(tc.cfg(4, nil).DataDir)
	require.NoError(t, herr)
	require.False(t, has, "a refused join wrote nothing")

	// The group runs on, 4 unchanged in it.
	_, err = tc.leader(ctx).Propose(ctx, kv.Put("b", "2"))
	require.NoError(t, err)
}
