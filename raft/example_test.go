package raft_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/understudy-raft/understudy/internal/testkv"
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
	sm := testkv.New() // the host's raft.StateMachine
	node, err := raft.NewNode(raft.Config{
		ID:             1,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: "127.0.0.1:0"}},
		TickInterval:   10 * time.Millisecond,
	}, sm, store)
	if err != nil {
		panic(err)
	}
	tr, err := transport.New(transport.Config{ID: 1, ClusterID: 1, ListenAddr: "127.0.0.1:0", Handler: node.PeerHandler(), Snapshots: store})
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
	if _, err := node.Propose(ctx, testkv.Put("greeting", "hello")); err != nil {
		panic(err)
	}
	v, err := node.Read(ctx, []byte("greeting"))
	fmt.Println(string(v), err)
	// Output: hello <nil>
}
