package raft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft/raftio"
)

// TestDiscoverRefusesAWipedJoiner: a replica that first joined, lost its
// data and starts again with its usual Join is refused up front
// (ErrAlreadyBootstrapped), whether the member asked refuses its
// incarnation as wiped (before: DiscoverWith retried that until its
// context ended) or answers with a record of it that holds another
// incarnation (before: it joined, empty, and could vote). A record with
// no incarnation, or this data's own, is a first join (or its retry).
func TestDiscoverRefusesAWipedJoiner(t *testing.T) {
	answer := func(inc uint64) addrCallerFunc {
		payload, err := json.Marshal(rpcResponse{V: peerRPCVersion, Cluster: &ClusterInfo{ClusterID: 7, From: 1, Index: 42,
			Config:  confchange.Config{Voters: []uint64{1}, Learners: []uint64{4}},
			Members: []Member{{ID: 1, PeerAddr: "a:1"}, {ID: 4, PeerAddr: "b:2", Incarnation: inc}}}})
		require.NoError(t, err)
		return func(context.Context, string, []byte) (*Reply, error) {
			return &Reply{Payload: payload, ClusterID: 7, MemberID: 1}, nil
		}
	}
	wiped := addrCallerFunc(func(context.Context, string, []byte) (*Reply, error) {
		return nil, fmt.Errorf("%w: member 4 is recorded with another incarnation", raftio.ErrWiped)
	})
	for _, c := range []struct {
		name string
		tr   AddrCaller
		inc  uint64
		want error
	}{
		{"refused as wiped", wiped, 0xbbb, ErrAlreadyBootstrapped},
		{"recorded with another incarnation", answer(0xaaa), 0xbbb, ErrAlreadyBootstrapped},
		{"recorded with one, joiner has none", answer(0xaaa), 0, ErrAlreadyBootstrapped},
		{"first join", answer(0), 0xbbb, nil},
		{"join again, same data", answer(0xbbb), 0xbbb, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := DiscoverWith(ctx, c.tr, DiscoverOptions{Addrs: []string{"x:1"}, ID: 4, Incarnation: c.inc})
			if c.want == nil {
				require.NoError(t, err)
				require.Equal(t, uint64(7), info.ClusterID)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.False(t, errors.Is(err, context.DeadlineExceeded), "refused up front, not retried: %v", err)
			require.Contains(t, err.Error(), "new ID")
		})
	}
}
