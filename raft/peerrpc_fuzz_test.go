package raft

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// FuzzServeRequest: any member-to-member request is answered or refused
// with an error — never a panic — by a running member.
func FuzzServeRequest(f *testing.F) {
	for _, r := range []rpcRequest{
		{V: peerRPCVersion, Op: rpcDiscover},
		{V: peerRPCVersion, Op: rpcMembership},
		{V: peerRPCVersion, Op: rpcCheck, Req: confchange.AddLearner(Member{ID: 9, PeerAddr: "127.0.0.1:9"})},
		{V: peerRPCVersion, Op: rpcCheck, Req: confchange.Promote(1, 2, 3)},
		{V: 9, Op: rpcChange},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"op":"change","req":{"Op":99}}`))
	n := startLone(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var req rpcRequest
		if json.Unmarshal(b, &req) == nil && req.Op == rpcChange {
			return // a change that would go through would change the member under test
		}
		out, err := n.serveRequest(ctx, 2, b)
		if err == nil {
			var resp rpcResponse
			if jerr := json.Unmarshal(out, &resp); jerr != nil {
				t.Fatalf("answer does not decode: %v", jerr)
			}
		}
	})
}

// addrCallerFunc is an AddrCaller answering with a fixed reply.
type addrCallerFunc func(ctx context.Context, addr string, req []byte) (*transport.Reply, error)

func (f addrCallerFunc) CallAddr(ctx context.Context, addr string, req []byte) (*transport.Reply, error) {
	return f(ctx, addr, req)
}

// FuzzDiscoverAnswer: whatever a peer answers a joiner, Discover returns a
// listed member's cluster or a typed error, never a panic.
func FuzzDiscoverAnswer(f *testing.F) {
	good, _ := json.Marshal(rpcResponse{V: peerRPCVersion, Cluster: &ClusterInfo{ClusterID: 7, From: 1,
		Config: confchange.Config{Voters: []uint64{1}, Learners: []uint64{4}}, Members: []Member{{ID: 1, PeerAddr: "a:1"}, {ID: 4, PeerAddr: "b:2"}}}})
	f.Add(good, uint64(7))
	f.Add([]byte(`{"v":1,"cluster":{"cluster_id":7,"removed":[4]}}`), uint64(7))
	f.Add([]byte(`{"v":1}`), uint64(0))
	f.Fuzz(func(t *testing.T, payload []byte, cluster uint64) {
		tr := addrCallerFunc(func(context.Context, string, []byte) (*transport.Reply, error) {
			return &transport.Reply{Payload: payload, ClusterID: cluster, MemberID: 1}, nil
		})
		// One attempt (Discover retries a refusal until its context ends:
		// that would make each input cost the whole timeout).
		info, err := discoverAt(context.Background(), tr, "x:1", nil, 4, 0, 0)
		if err == nil {
			if _, ok := info.Member(4); !ok || info.ClusterID == 0 {
				t.Fatalf("Discover accepted a cluster that does not list member 4: %+v", info)
			}
		}
	})
}

// FuzzRestoreBackup: any bytes restore a backup or fail with an error —
// ErrCorruptBackup for a damaged one — and a failed restore leaves the
// storage empty.
func FuzzRestoreBackup(f *testing.F) {
	f.Add([]byte("USBK\x00\x00\x00\x01\x00\x00\x00\x00"))
	f.Add([]byte("USBK\x00\x00\x00\x01\x00\x00\x00\x04\x08\x01\x10\x01"))
	f.Add([]byte("garbage"))
	st, err := storage.Open(f.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := RestoreBackup(bytes.NewReader(b), st, Member{ID: 1, PeerAddr: "127.0.0.1:1"})
		if err == nil {
			t.Skip("a valid backup: the storage is no longer empty")
		}
		if errors.Is(err, ErrInvalidConfig) {
			t.Skip("the storage holds an earlier valid backup")
		}
		if last, lerr := st.LastIndex(); lerr != nil || last != 0 {
			t.Fatalf("a failed restore left the storage at last index %d (%v): %v", last, lerr, err)
		}
	})
}

// TestServeRequestBeforeStart: a member made but not started yet (a host
// hands a new replica's transport its handler before Node.Start) answers
// every request with an error, never a panic. A joiner's CheckBootstrap
// asks every listed member at once, so another standby joining at the same
// moment asked one in that window: rpcDiscover read the member table,
// installed only by Start, and the process died (fleetload, 24 standbys
// joining together, about one run in six).
func TestServeRequestBeforeStart(t *testing.T) {
	n := newTestNode(t, 3, nopSM{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, op := range []string{rpcDiscover, rpcMembership, rpcTransfer} {
		b, _ := json.Marshal(rpcRequest{V: peerRPCVersion, Op: op})
		out, err := n.PeerHandler().ServeRequest(ctx, 2, b)
		if err == nil {
			var resp rpcResponse
			if jerr := json.Unmarshal(out, &resp); jerr != nil || (resp.Err == nil && resp.Cluster != nil) {
				t.Errorf("%s before Start: answered %s (%v), want an error", op, out, jerr)
			}
		}
	}
}
