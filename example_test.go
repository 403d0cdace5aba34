package understudy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// A host in five lines: start a member (here the only one of a new
// cluster), write, read, close.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	h, err := understudy.Start(ctx, understudy.Config{
		ID: 1, DataDir: filepath.Join(dir, "1"), ListenPeer: "127.0.0.1:0",
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: "127.0.0.1:0"}},
	}, kv.New())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)
	if _, err := h.Propose(ctx, kv.Put("greeting", "hello")); err != nil {
		fmt.Println(err)
		return
	}
	v, _ := h.Read(ctx, []byte("greeting"))
	fmt.Println(string(v))
	// Output: hello
}

// Joining by address only: member 2 is added as a learner through member 1,
// then started with an empty data dir and member 1's address, from which it
// learns the cluster ID and every member's address.
func ExampleStart_join() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ln1, _ := net.Listen("tcp", "127.0.0.1:0")
	addr1 := ln1.Addr().String()
	h1, err := understudy.Start(ctx, understudy.Config{
		ID: 1, DataDir: filepath.Join(dir, "1"), Listener: ln1,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: addr1}},
	}, kv.New())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h1.Close(ctx)
	_, _ = h1.Propose(ctx, kv.Put("color", "green"))

	// Phase one: the cluster learns of member 2 (a learner: the quorum does
	// not change). Phase two: member 2 starts and joins.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := h1.AddLearner(ctx, raft.Member{ID: 2, PeerAddr: ln2.Addr().String()}); err != nil {
		fmt.Println(err)
		return
	}
	h2, err := understudy.Start(ctx, understudy.Config{
		ID: 2, DataDir: filepath.Join(dir, "2"), Listener: ln2,
		Join: []string{addr1},
	}, kv.New())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h2.Close(ctx)
	v, _ := h2.Read(ctx, []byte("color"))
	st, _ := h2.Status(ctx)
	fmt.Printf("member 2 (%s) reads color=%s; same cluster: %v\n", st.Role, v, h1.ClusterID() == h2.ClusterID())
	// Output: member 2 (learner) reads color=green; same cluster: true
}
