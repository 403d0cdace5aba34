package understudy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
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

// Scaling at run time: the target voter count is a replicated setting.
// The dry run refuses an even target and previews the policy's next step;
// lowering the target from three to one demotes two voters at once (never
// the leader), who stay as standbys.
func ExampleGroup_scaling() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var lns []net.Listener
	var initial []raft.Member
	for id := uint64(1); id <= 3; id++ {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		lns = append(lns, ln)
		initial = append(initial, raft.Member{ID: id, PeerAddr: ln.Addr().String()})
	}
	var hosts []*understudy.Group
	for i, ln := range lns {
		h, err := understudy.Start(ctx, understudy.Config{
			ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprint(i+1)), Listener: ln,
			InitialMembers: initial,
			Raft:           raft.Config{TickInterval: 10 * time.Millisecond},
		}, kv.New())
		if err != nil {
			fmt.Println(err)
			return
		}
		defer h.Close(ctx)
		hosts = append(hosts, h)
	}
	if err := hosts[0].WaitReady(ctx); err != nil {
		fmt.Println(err)
		return
	}
	h := hosts[0] // any member: followers forward to the leader
	for m, _ := h.Membership(ctx); !inContact(m) || !published(m); m, _ = h.Membership(ctx) {
		// A new leader has not heard from everyone yet, or the members are
		// still publishing their records (their incarnations) through the
		// log: a change in flight, which the policy's preview waits for.
		time.Sleep(10 * time.Millisecond)
	}
	cs := h.Settings()

	cs.TargetVoters = 4
	_, err := h.CheckSettings(ctx, cs)
	fmt.Println("target 4:", confchange.Code(err))

	cs.TargetVoters = 1
	plan, err := h.CheckSettings(ctx, cs)
	fmt.Println("target 1, dry run demotes:", err == nil && strings.Contains(plan, "would then: demote"))
	if err := h.UpdateSettings(ctx, cs); err != nil {
		fmt.Println(err)
		return
	}
	for {
		m, err := h.Membership(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if len(m.Config.Voters) == 1 && !m.Joint() && !m.Pending {
			fmt.Printf("voters %d (the leader: %v), standbys %d\n", len(m.Config.Voters), m.Config.Voters[0] == m.Leader, len(m.Config.Learners))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// target 4: invalid_setting
	// target 1, dry run demotes: true
	// voters 1 (the leader: true), standbys 2
}

// published reports whether every member's record carries its
// incarnation and no change is in flight.
func published(m raft.Membership) bool {
	for _, st := range m.Members {
		if st.Incarnation == 0 {
			return false
		}
	}
	return !m.Pending
}

// inContact reports whether the leader has heard from every member lately.
func inContact(m raft.Membership) bool {
	for _, st := range m.Members {
		if st.ID != m.Leader && (st.Progress == nil || !st.Progress.RecentActive) {
			return false
		}
	}
	return len(m.Members) > 0
}
