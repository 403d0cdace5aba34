package understudy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestHostRelayedStandbys: three hosts and six standbys over TCP with
// Relay on. The leader feeds the standbys through its followers (TypeRelay
// frames on the host links), they apply every write, and the leader's
// bytes to the standbys stay small (headers and answers' worth, no
// entries); then a relay host is closed and its standbys are fed directly
// again and catch up.
func TestHostRelayedStandbys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const standbys = 6
	relayed := func(c *understudy.Config) {
		// Nine hosts in one process (under -race, on two cores): a
		// standby answers after two hops, so give it 400 ms of silence
		// before it falls back.
		c.Raft.TickInterval, c.Raft.ElectionTicks = 20*time.Millisecond, 20
		c.Raft.Relay = true
		c.Raft.ManualMembership = true
		c.Raft.Membership = confchange.Settings{Stabilization: 100 * time.Millisecond, MaxLearners: standbys + 1}
	}
	tc := newTestCluster(t, 3, relayed)
	l := tc.leader(ctx)
	var ids []uint64
	for i := range standbys {
		id := uint64(4 + i)
		ln := listen(t)
		require.NoError(t, l.AddLearner(ctx, raft.Member{ID: id, PeerAddr: ln.Addr().String()}))
		cfg := tc.cfg(id, ln)
		cfg.Join = []string{tc.addrs[l.ID()]}
		relayed(&cfg)
		h, err := understudy.Start(ctx, cfg, kv.New())
		require.NoError(t, err)
		tc.hosts[id], tc.addrs[id] = h, ln.Addr().String()
		ids = append(ids, id)
	}
	waitRelayed(ctx, t, l, ids, "the standbys relayed")
	before := l.Transport().Stats()
	const writes = 200
	val := strings.Repeat("v", 512)
	for i := range writes {
		_, err := l.Propose(ctx, kv.Put(fmt.Sprintf("k%d", i), val))
		require.NoError(t, err)
	}
	after := l.Transport().Stats()
	var toVoters, toStandbys uint64
	for _, p := range after.Peers {
		var b0 uint64
		for _, q := range before.Peers {
			if q.ID == p.ID {
				b0 = q.BytesSent
			}
		}
		if p.ID <= 3 {
			toVoters += p.BytesSent - b0
		} else {
			toStandbys += p.BytesSent - b0
		}
	}
	t.Logf("leader bytes per write: %d to its 2 followers (relays), %d to its %d standbys", toVoters/writes, toStandbys/writes, standbys)
	// Fed directly, the six standbys would cost the leader three times
	// what its two followers do; relayed, nothing but a fallback's worth
	// (a standby silent for an election timeout on a loaded machine).
	if toStandbys > toVoters {
		t.Fatalf("the leader sent %d bytes to its relayed standbys for %d writes, %d to its followers: entries went to the standbys directly", toStandbys, writes, toVoters)
	}
	// Every standby's relay, again: one may have fallen back meanwhile.
	st := waitRelayed(ctx, t, l, ids, "the standbys relayed after the writes")
	waitApplied := func(id uint64, index uint64) {
		for tc.hosts[id].AppliedIndex() < index {
			select {
			case <-ctx.Done():
				t.Fatalf("member %d applied %d, want %d", id, tc.hosts[id].AppliedIndex(), index)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	for _, id := range ids {
		waitApplied(id, st.Commit)
		v, err := tc.hosts[id].StaleRead([]byte(fmt.Sprintf("k%d", writes-1)))
		require.NoError(t, err)
		require.Equal(t, val, string(v))
		rs, err := tc.hosts[st.Progress[id].RelayedBy].Status(ctx)
		require.NoError(t, err)
		require.NotZero(t, rs.RelayedOn, "relay %d handed nothing on", st.Progress[id].RelayedBy)
	}
	// A relay host closes: its standbys are fed another way and catch up.
	relay := st.Progress[ids[0]].RelayedBy
	require.NoError(t, tc.hosts[relay].Close(ctx))
	delete(tc.hosts, relay)
	for i := range 50 {
		_, err := l.Propose(ctx, kv.Put(fmt.Sprintf("after%d", i), "x"))
		require.NoError(t, err)
	}
	st, err := l.Status(ctx)
	require.NoError(t, err)
	for _, id := range ids {
		waitApplied(id, st.Commit)
	}
}
