// Command demo starts a three-member understudy cluster on 127.0.0.1 with
// durable storage (in a temporary directory) and the TCP transport, writes
// through a follower, reads linearizably from every member, adds a fourth
// member as a learner and reads from it, stops the leader (which hands
// leadership over first), writes again, restarts the old leader from its
// data directory, and prints what happened at each step.
//
//	go run ./examples/demo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// member is one running member: the host (storage, transport and node,
// started and closed together) and its state machine.
type member struct {
	id   uint64
	dir  string
	addr string
	node *understudy.Group
	sm   *kv.Store
}

func main() {
	verbose := flag.Bool("v", false, "log what the nodes do to stderr")
	dataDir := flag.String("data-dir", "", "where the members keep their data (default: a new temporary directory, removed at exit)")
	flag.Parse()
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if err := run(*dataDir, logger); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(dataDir string, logger *slog.Logger) error {
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "understudy-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dataDir = tmp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Listen first, so that every member knows the others' addresses.
	var initial []raft.Member
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns[id] = ln
		initial = append(initial, raft.Member{ID: id, PeerAddr: ln.Addr().String()})
	}
	members := map[uint64]*member{}
	for _, m := range initial {
		mem, err := start(ctx, understudy.Config{
			ID: m.ID, DataDir: filepath.Join(dataDir, fmt.Sprint(m.ID)), Listener: lns[m.ID],
			InitialMembers: initial, Logger: logger,
		})
		if err != nil {
			return err
		}
		members[m.ID] = mem
		fmt.Printf("member %d: listening on %s, data in %s\n", m.ID, m.PeerAddr, mem.dir)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, m := range members {
			m.stop(sctx)
		}
		fmt.Println("stopped every member")
	}()

	leader, err := waitLeader(ctx, members)
	if err != nil {
		return err
	}
	fmt.Printf("member %d was elected leader\n", leader)

	follower := members[leader%3+1]
	for i, pair := range [][2]string{{"color", "green"}, {"shape", "circle"}, {"size", "7"}} {
		t0 := time.Now()
		if _, err := follower.node.Propose(ctx, kv.Put(pair[0], pair[1])); err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
		fmt.Printf("wrote %s=%s through follower %d (forwarded to the leader) in %s\n", pair[0], pair[1], follower.id, time.Since(t0).Round(time.Microsecond))
	}
	for id := uint64(1); id <= 3; id++ {
		v, err := members[id].node.Read(ctx, []byte("color"))
		if err != nil {
			return fmt.Errorf("read on %d: %w", id, err)
		}
		fmt.Printf("member %d reads color=%s (linearizable, ReadIndex)\n", id, v)
	}

	// A fourth member joins as a learner: added through a follower (which
	// forwards the request to the leader), then started with empty storage
	// and one member's address, from which it learns the cluster.
	ln4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rec4 := raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}
	if err := follower.node.AddLearner(ctx, rec4); err != nil {
		ln4.Close()
		return fmt.Errorf("adding member 4 as a learner: %w", err)
	}
	fmt.Printf("added member 4 (%s) as a learner through follower %d: the quorum is unchanged\n", rec4.PeerAddr, follower.id)
	learner, err := start(ctx, understudy.Config{
		ID: 4, DataDir: filepath.Join(dataDir, "4"), Listener: ln4,
		Join: []string{follower.addr}, Logger: logger,
	})
	if err != nil {
		return err
	}
	members[4] = learner
	fmt.Printf("member 4 joined through %s alone (it learned the cluster ID and every address from it)\n", follower.addr)
	v, err := learner.node.Read(ctx, []byte("shape"))
	if err != nil {
		return fmt.Errorf("read on the learner: %w", err)
	}
	fmt.Printf("learner 4 caught up and reads shape=%s (linearizable, asked of the leader)\n", v)
	ms, err := learner.node.Membership(ctx)
	if err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	for _, m := range ms.Members {
		if m.ID == 4 {
			fmt.Printf("the leader's view of member 4: %s, lag %d, %s (a standby: %d voters is the target)\n", m.Role, m.Lag, m.Readiness, len(ms.Config.Voters))
		}
	}

	old := members[leader]
	fmt.Printf("stopping leader %d (it hands leadership to the most caught-up voter first)\n", leader)
	old.stop(ctx)
	delete(members, leader)
	leader, err = waitLeader(ctx, members)
	if err != nil {
		return err
	}
	fmt.Printf("member %d leads now\n", leader)
	if _, err := members[leader].node.Propose(ctx, kv.Put("color", "blue")); err != nil {
		return fmt.Errorf("write after the leader stopped: %w", err)
	}
	fmt.Println("wrote color=blue with two of three members up")

	ln, err := net.Listen("tcp", old.addr)
	if err != nil {
		return fmt.Errorf("re-listening on %s: %w", old.addr, err)
	}
	// The same configuration as at the first start: the data dir holds a
	// member now, so InitialMembers is ignored and it resumes.
	back, err := start(ctx, understudy.Config{ID: old.id, DataDir: old.dir, Listener: ln, InitialMembers: initial, Logger: logger})
	if err != nil {
		return err
	}
	members[old.id] = back
	fmt.Printf("restarted member %d from %s\n", old.id, old.dir)
	v, err = back.node.Read(ctx, []byte("color"))
	if err != nil {
		return fmt.Errorf("read on the restarted member: %w", err)
	}
	fmt.Printf("member %d caught up and reads color=%s (%d keys)\n", old.id, v, back.sm.Len())
	return nil
}

// start starts one member with the host API: it bootstraps, joins or
// restarts as its data dir says.
func start(ctx context.Context, cfg understudy.Config) (*member, error) {
	sm := kv.New()
	h, err := understudy.Start(ctx, cfg, sm)
	if err != nil {
		return nil, err
	}
	return &member{id: cfg.ID, dir: cfg.DataDir, addr: h.PeerAddr(), node: h, sm: sm}, nil
}

func (m *member) stop(ctx context.Context) {
	if err := m.node.Close(ctx); err != nil && !errors.Is(err, raft.ErrStopped) {
		fmt.Fprintf(os.Stderr, "member %d: %v\n", m.id, err)
	}
}

func waitLeader(ctx context.Context, members map[uint64]*member) (uint64, error) {
	for {
		for _, m := range members {
			st, err := m.node.Status(ctx)
			if err != nil {
				return 0, err
			}
			if st.Leader != 0 && members[st.Leader] != nil && st.Role == raft.RoleLeader {
				return m.id, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no leader elected: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
