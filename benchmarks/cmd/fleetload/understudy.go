package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// usMember is an understudy member as a user runs one: a Host with one
// group, TCP on 127.0.0.1.
type usMember struct {
	host  *understudy.Host
	group *understudy.Group
}

// sampledKV is kv's store, recording the apply times of sampled indexes.
type sampledKV struct {
	*kv.Store
	samples *applySamples
}

func (s *sampledKV) Apply(cmds []raft.Command, results []raft.Result) {
	s.Store.Apply(cmds, results)
	s.samples.record(func(yield func(uint64) bool) {
		for _, c := range cmds {
			if !yield(c.Index) {
				return
			}
		}
	})
}

func startUnderstudy(ctx context.Context, f *memberFlags, samples *applySamples) (*usMember, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Pebble by default, as Start and NewHost pick for a new data dir.
	backend := storage.BackendPebble
	if f.engine == "bolt" {
		backend = storage.BackendBolt
	}
	h, err := understudy.NewHost(understudy.HostConfig{DataDir: f.dir, ListenPeer: f.listen, AdvertisePeer: f.listen,
		Logger: log, Storage: storage.EngineOptions{NoSync: !f.fsync, Backend: backend}})
	if err != nil {
		return nil, err
	}
	gc := understudy.GroupConfig{
		GroupID: 1, ID: f.id,
		// The host relays, and its standbys answer through their relays,
		// unless told not to (setting Raft.Relay false would not do it).
		DisableRelay: !f.relay, DisableRelayAnswers: !f.relay || !f.relayAnswers,
		Transport: transport.Config{LearnerBatchDelay: f.learnerBatchDelay},
		Raft: raft.Config{
			TickInterval: f.tick, ElectionTicks: f.electionTicks, SnapshotCount: f.snapshotCount, SnapshotLogRatio: f.snapshotLogRatio, InlineApply: f.inlineApply,
			// Three voters; every standby stays a learner (the default
			// policy only promotes up to TargetVoters).
			Membership: confchange.Settings{TargetVoters: 3, MaxLearners: f.maxLearners},
		},
	}
	if f.standby {
		gc.Join = f.voters
		gc.NotListedGrace = -1
	} else {
		for i, a := range f.voters {
			gc.InitialMembers = append(gc.InitialMembers, raft.Member{ID: uint64(i + 1), PeerAddr: a})
		}
	}
	g, err := h.StartGroup(ctx, gc, &sampledKV{Store: kv.New(), samples: samples})
	if err != nil {
		_ = h.Close(ctx)
		return nil, fmt.Errorf("understudy member %d: %w", f.id, err)
	}
	return &usMember{host: h, group: g}, nil
}

func (m *usMember) status(ctx context.Context) (memberStatus, error) {
	st, err := m.group.Status(ctx)
	if err != nil {
		return memberStatus{}, err
	}
	out := memberStatus{ID: st.ID, Leader: st.Leader == st.ID, Applied: st.Applied, Commit: st.Commit}
	if s := m.group.Storage(); s != nil {
		sm := s.Metrics()
		out.StoreCommits, out.StoreSaves = sm.Commits, sm.Saves
	}
	for id, p := range st.Progress {
		if p.RelayedBy != 0 {
			if out.Relayed == nil {
				out.Relayed = map[uint64]uint64{}
			}
			out.Relayed[id] = p.RelayedBy
		}
	}
	return out, nil
}

// add retries while another membership change is in progress (the
// previous add's entry not applied yet, or one of the policy's), as an
// operator's script would.
func (m *usMember) add(ctx context.Context, id uint64, addr string) error {
	for {
		err := m.group.AddLearner(ctx, raft.Member{ID: id, PeerAddr: addr})
		if !errors.Is(err, confchange.ErrChangeInProgress) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *usMember) write(ctx context.Context, cmd []byte) error {
	_, err := m.group.Propose(ctx, cmd)
	return err
}

// sent sums the group transport's counters over its peers: every raft
// message the member wrote, relay envelopes included (a relay's are
// counted on the relay's peer), frames included in the bytes.
func (m *usMember) sent() (msgs, bytes uint64) {
	for _, p := range m.group.Transport().Stats().Peers {
		msgs += p.MessagesSent
		bytes += p.BytesSent
	}
	return msgs, bytes
}

// received sums the raft messages the group's transport read, from its
// voters and from its learners (relay envelopes count as the messages
// they carry, on the relay's peer).
func (m *usMember) received() (fromVoters, fromLearners uint64) {
	for _, p := range m.group.Transport().Stats().Peers {
		if p.Learner {
			fromLearners += p.MessagesReceived
		} else {
			fromVoters += p.MessagesReceived
		}
	}
	return fromVoters, fromLearners
}

func (m *usMember) close(ctx context.Context) error {
	return m.host.Close(ctx)
}
