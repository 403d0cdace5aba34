package raft

import (
	"context"
	"log/slog"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
)

// Settings returns the cluster settings this member applied — the same on
// every member once replicated (target voters, maximum learners, automatic
// promotion, failover and dead-member delays) — or, before the first leader
// replicated them, the ones this member's Config seeds. No round trip.
func (n *Node) Settings() confchange.ClusterSettings {
	if cs := n.settings.Load(); cs != nil {
		return *cs
	}
	return n.seedSettings(0)
}

// seedSettings are the settings the Config describes: what the first
// leader replicates. A new cluster's target is at least its voter count
// (rounded up to odd), so that bootstrapping five members with the default
// target of three does not demote two at once.
func (n *Node) seedSettings(voters int) confchange.ClusterSettings {
	cs := confchange.SeedClusterSettings(n.cfg.Membership, !n.cfg.ManualMembership)
	if voters > cs.TargetVoters {
		cs.TargetVoters = min(voters|1, confchange.MaxVoters)
	}
	return cs
}

// UpdateSettings replaces the cluster settings: cs is validated (an odd
// target of 1–9 voters, at least one learner, a positive failover delay)
// and replicated through the log; the call returns once this member applied
// it. The default policy then acts on the new values: raising TargetVoters
// promotes ready standbys (two at once), lowering it demotes the surplus
// voters (least healthy first, never the leader), both in one joint change.
// It works on any member (followers and learners forward it).
//
// Errors: confchange.ErrInvalidSettings (nothing proposed); the errors of
// Propose (ErrLeaderChanged, ErrTimeout: the outcome is unknown, read
// Settings; ErrNotProposed with ctx's error: safe to retry; ErrStopped).
func (n *Node) UpdateSettings(ctx context.Context, cs confchange.ClusterSettings) error {
	if err := cs.Validate(); err != nil {
		return err
	}
	_, err := n.proposeEntry(ctx, RequestID{}, cs.Encode(), entrySettings)
	return err
}

// CheckSettings is UpdateSettings' dry run: it validates cs and, on the
// leader's current view of the membership, says what the default policy
// would do next under cs (e.g. "promote 4 5", "demote 5 4", or what it
// would wait for), proposing nothing. The preview is the policy's next
// step only, on the membership as it is now, judged with this member's
// Stabilization and MaxLag (the leader applies its own): readiness moves,
// and the policy re-plans every tick.
//
// Errors: every way cs is invalid at once, joined (each wraps
// confchange.ErrInvalidSettings; the plan then only says what was asked);
// Membership's errors (ctx's error, joined with ErrNoLeader while no
// leader is known; ErrStopped).
func (n *Node) CheckSettings(ctx context.Context, cs confchange.ClusterSettings) (string, error) {
	plan := "set " + cs.String()
	if err := cs.Validate(); err != nil {
		return plan, err
	}
	if !cs.AutoPromote {
		return plan + "; automatic changes off: the policy changes nothing on its own", nil
	}
	if n.ownPolicy {
		return plan + "; the host's own policy decides what follows", nil
	}
	m, err := n.Membership(ctx)
	if err != nil {
		return plan, err
	}
	v := m.view(time.Now())
	p := confchange.DefaultPolicy{Settings: cs.Apply(n.cfg.Membership)}
	if r, ok := p.Next(v); ok {
		return plan + "; the policy would then: " + r.String(), nil
	}
	if w := p.Waiting(v); w != "" {
		return plan + "; the policy would then wait: " + w, nil
	}
	return plan + "; the policy would change nothing now", nil
}

// membershipSettings are the rules' settings in force: the local Config's
// with the replicated cluster settings in place.
func (n *Node) membershipSettings() confchange.Settings {
	if cs := n.settings.Load(); cs != nil {
		return cs.Apply(n.cfg.Membership)
	}
	return n.cfg.Membership
}

// autoPromote reports whether the policy may change the membership on its own.
func (n *Node) autoPromote() bool {
	if cs := n.settings.Load(); cs != nil {
		return cs.AutoPromote
	}
	return !n.cfg.ManualMembership
}

// policy is the host's policy, or the default one with the settings in force.
func (n *Node) policy() confchange.Policy {
	if n.ownPolicy {
		return n.cfg.Policy
	}
	return confchange.DefaultPolicy{Settings: n.membershipSettings()}
}

// seedSettingsOnce, on a leader that has applied its log, replicates the
// seed settings when no settings were ever replicated (a cluster
// bootstrapped by this version, or by an older one): from then on every
// member follows the same ones. It is retried every election timeout until
// an entry is applied.
func (n *Node) seedSettingsOnce(voters int) {
	l := &n.loop
	if n.settings.Load() != nil || l.ticks < l.ms.seedRetry {
		return
	}
	l.ms.seedRetry = l.ticks + uint64(n.cfg.ElectionTicks)
	cs := n.seedSettings(voters)
	if err := n.proposeOwn(func(id requestID) []byte { return appendSettingsKind(nil, entrySettingsSeed, id, cs.Encode()) }); err != nil {
		n.log.Debug("seeding the cluster settings: not proposed now", slog.Any("err", err))
		return
	}
	n.log.Info("replicating the cluster settings", slog.String("settings", cs.String()))
}

// proposeOwn hands raft, on the loop, an entry of the node's own (settings
// seed, readiness record) that no caller waits for; encode builds its
// payload with a fresh request ID, so that a duplicate is applied once.
func (n *Node) proposeOwn(encode func(requestID) []byte) error {
	data := encode(requestID{proposer: n.cfg.ID, seq: n.seq.Add(1)})
	return n.loop.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: &n.cfg.ID, Entries: []*raftpb.Entry{{Data: data}}})
}
