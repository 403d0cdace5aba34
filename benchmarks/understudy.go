package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/understudy-raft/understudy/internal/testkv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

const understudyClusterID = 0xbe7c4

// UnderstudyTick is understudy's tick: elections after 10 ticks (100ms),
// heartbeats every tick. Short, for a quick start-up.
const UnderstudyTick = 10 * time.Millisecond

type usMember struct {
	id    uint64
	node  *raft.Node
	store *storage.Store
	tr    *transport.Transport
	sm    *testkv.Store
}

// understudyCluster is three understudy members, each with its own bbolt
// store (fsync on) and TCP transport on 127.0.0.1.
type understudyCluster struct {
	members []*usMember
	leader  *usMember
}

// StartUnderstudy starts a three-member understudy cluster under dir.
func StartUnderstudy(dir string) (Cluster, error) {
	logger := slog.New(slog.DiscardHandler)
	var initial []raft.Member
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns[id] = ln
		initial = append(initial, raft.Member{ID: id, PeerAddr: ln.Addr().String()})
	}
	c := &understudyCluster{}
	for _, m := range initial {
		mem, err := startUnderstudyMember(m.ID, filepath.Join(dir, fmt.Sprint(m.ID)), lns[m.ID], initial, logger)
		if err != nil {
			for id, l := range lns {
				if id >= m.ID {
					l.Close()
				}
			}
			c.Close()
			return nil, err
		}
		c.members = append(c.members, mem)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.findLeader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	// One committed write, so that connections are up and the leader's
	// first-term entry is committed before anything is timed.
	if err := c.Write(ctx, Command("warmup")); err != nil {
		c.Close()
		return nil, fmt.Errorf("understudy: warm-up write: %w", err)
	}
	return c, nil
}

func startUnderstudyMember(id uint64, dir string, ln net.Listener, initial []raft.Member, logger *slog.Logger) (*usMember, error) {
	store, err := storage.Open(dir, storage.Options{NoSync: false, Logger: logger})
	if err != nil {
		ln.Close()
		return nil, err
	}
	sm := testkv.New()
	node, err := raft.NewNode(raft.Config{
		ID:             id,
		InitialMembers: initial,
		TickInterval:   UnderstudyTick,
		SnapshotCount:  1 << 40, // no snapshot during a run
		Logger:         logger,
	}, sm, store)
	if err != nil {
		ln.Close()
		store.Close()
		return nil, err
	}
	tr, err := transport.New(transport.Config{
		ID: id, ClusterID: understudyClusterID, Listener: ln,
		Handler: node.PeerHandler(), Snapshots: store, Logger: logger,
	})
	if err != nil {
		ln.Close()
		store.Close()
		return nil, err
	}
	if err := node.Start(tr); err != nil {
		tr.Close()
		store.Close()
		return nil, err
	}
	return &usMember{id: id, node: node, store: store, tr: tr, sm: sm}, nil
}

func (c *understudyCluster) findLeader(ctx context.Context) error {
	for {
		for _, m := range c.members {
			st, err := m.node.Status(ctx)
			if err != nil {
				return err
			}
			if st.Role == raft.RoleLeader {
				c.leader = m
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("understudy: no leader elected: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Write proposes cmd on the member that was leader at start (were
// leadership to move, it would forward the command to the new leader).
func (c *understudyCluster) Write(ctx context.Context, cmd []byte) error {
	_, err := c.leader.node.Propose(ctx, cmd)
	return err
}

func (c *understudyCluster) Read(ctx context.Context, key string) (string, bool, error) {
	if err := c.findLeader(ctx); err != nil {
		return "", false, err
	}
	v, err := c.leader.node.Read(ctx, []byte(key))
	if err != nil {
		return "", false, err
	}
	return string(v), len(v) > 0, nil
}

// Leader returns the leader's node and state machine (for tests).
func (c *understudyCluster) Leader() (*raft.Node, *testkv.Store) { return c.leader.node, c.leader.sm }

func (c *understudyCluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	// Followers first, so that the leader's hand-off on Stop is not
	// attempted towards members that are about to stop too.
	ms := make([]*usMember, 0, len(c.members))
	for _, m := range c.members {
		if m != c.leader {
			ms = append(ms, m)
		}
	}
	if c.leader != nil {
		ms = append(ms, c.leader)
	}
	for _, m := range ms {
		if err := m.node.Stop(ctx); err != nil && !errors.Is(err, raft.ErrStopped) {
			errs = append(errs, fmt.Errorf("understudy member %d: stop: %w", m.id, err))
		}
		if err := m.tr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("understudy member %d: transport: %w", m.id, err))
		}
		if err := m.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("understudy member %d: storage: %w", m.id, err))
		}
	}
	return errors.Join(errs...)
}
