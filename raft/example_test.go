package raft_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// A single-member cluster on loopback with durable storage and the TCP
// transport: propose a command, then read it back linearizably. A three-member
// cluster differs only in InitialMembers (see examples/demo).
func Example() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	store, err := storage.Open(filepath.Join(dir, "1"), storage.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	sm := kv.New() // the host's raft.StateMachine
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	node, err := raft.NewNode(raft.Config{
		ID:             1,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: ln.Addr().String()}}, // a member is recorded with the address it is reached at
		TickInterval:   10 * time.Millisecond,
	}, sm, store)
	if err != nil {
		panic(err)
	}
	tr, err := transport.New(transport.Config{ID: 1, ClusterID: 1, Listener: ln, Handler: node.PeerHandler(), Snapshots: store})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	if err := node.Start(tr); err != nil {
		panic(err)
	}
	defer node.Stop(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := node.Propose(ctx, kv.Put("greeting", "hello")); err != nil {
		panic(err)
	}
	v, err := node.Read(ctx, []byte("greeting"))
	fmt.Println(string(v), err)
	// Output: hello <nil>
}

// Adding a member: member 1 adds member 2 as a learner (the quorum is
// unchanged), member 2 starts empty and joins, catches up and serves a
// linearizable read. Promoting it at once is refused with a reason: it has
// not been caught up for the stabilization period yet (the default policy
// promotes ready learners on its own; ManualMembership turns it off).
func ExampleNode_AddLearner() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := func(id uint64, initial []raft.Member, seeds ...raft.Member) (*raft.Node, string) {
		store, _ := storage.Open(filepath.Join(dir, fmt.Sprint(id)), storage.Options{NoSync: true})
		node, _ := raft.NewNode(raft.Config{ID: id, InitialMembers: initial, TickInterval: 10 * time.Millisecond, ManualMembership: true}, kv.New(), store)
		tr, _ := transport.New(transport.Config{ID: id, ClusterID: 1, ListenAddr: "127.0.0.1:0", Handler: node.PeerHandler(), Snapshots: store})
		for _, s := range seeds { // a joiner must be able to reach the cluster
			tr.AddPeer(s.ID, s.PeerAddr)
		}
		_ = node.Start(tr)
		go func() { <-node.Done(); tr.Close(); store.Close() }()
		return node, tr.Addr().String()
	}
	// A one-member cluster; the address is known once it listens.
	n1, addr1 := start(1, []raft.Member{{ID: 1, PeerAddr: "127.0.0.1:1"}})
	defer n1.Stop(context.Background())
	if err := n1.UpdateMember(ctx, raft.Member{ID: 1, PeerAddr: addr1}); err != nil {
		panic(err)
	}
	_, _ = n1.Propose(ctx, kv.Put("greeting", "hello"))

	n2, addr2 := start(2, nil, raft.Member{ID: 1, PeerAddr: addr1})
	defer n2.Stop(context.Background())
	if err := n1.AddLearner(ctx, raft.Member{ID: 2, PeerAddr: addr2}); err != nil {
		panic(err)
	}
	v, err := n2.Read(ctx, []byte("greeting"))
	fmt.Println("learner 2 reads:", string(v), err)
	err = n1.Promote(ctx, 2)
	fmt.Println("promote 2 at once:", confchange.Code(err))
	// Output:
	// learner 2 reads: hello <nil>
	// promote 2 at once: learner_not_ready
}

// Retrying a write whose outcome is unknown (a leader change, a timeout)
// with the same RequestID applies it at most once: the retry of a command
// already applied is answered with the first answer instead of applying it
// again.
func ExampleNode_ProposeWithID() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	store, err := storage.Open(filepath.Join(dir, "1"), storage.Options{NoSync: true})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	node, err := raft.NewNode(raft.Config{
		ID:             1,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: ln.Addr().String()}}, // a member is recorded with the address it is reached at
		TickInterval:   10 * time.Millisecond,
	}, kv.New(), store)
	if err != nil {
		panic(err)
	}
	tr, err := transport.New(transport.Config{ID: 1, ClusterID: 1, Listener: ln, Handler: node.PeerHandler(), Snapshots: store})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	if err := node.Start(tr); err != nil {
		panic(err)
	}
	defer node.Stop(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := node.RegisterClient(ctx) // once per client
	if err != nil {
		panic(err)
	}
	id := raft.RequestID{Client: client, Seq: 1} // the session and the client's request number
	cmd := kv.CAS("lock", "", "client-42")
	_, err = node.ProposeWithID(ctx, id, cmd)
	fmt.Println("first attempt:", err)
	// Say the caller never saw that answer, and retries: applied again, the
	// CAS would fail (the lock is taken); the retry gets the first answer.
	_, err = node.ProposeWithID(ctx, id, cmd)
	fmt.Println("retry:", err)
	// The next request of this client.
	_, err = node.ProposeWithID(ctx, raft.RequestID{Client: client, Seq: 2, Acked: 1}, kv.CAS("lock", "", "client-42"))
	fmt.Println("second request:", errors.Is(err, kv.ErrCompareFailed))
	// Output:
	// first attempt: <nil>
	// retry: <nil>
	// second request: true
}
