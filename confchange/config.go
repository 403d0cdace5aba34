package confchange

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	etcdconfchange "go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// MaxVoters is the largest voter count this package plans (etcd's guidance:
// Raft is most efficient with 3 to 9 voters).
const MaxVoters = 9

// Role is a member's part in the incoming configuration: the role it has, or
// will have once a joint configuration is left.
type Role uint8

const (
	// RoleNone: not in the incoming configuration (not a member, or a voter
	// that a joint configuration is removing).
	RoleNone Role = iota
	// RoleVoter: a voter in the incoming configuration.
	RoleVoter
	// RoleLearner: a learner, or a voter that a joint configuration turns
	// into a learner when it is left (LearnersNext).
	RoleLearner
)

// String returns "none", "voter" or "learner".
func (r Role) String() string {
	switch r {
	case RoleVoter:
		return "voter"
	case RoleLearner:
		return "learner"
	case RoleNone:
		return "none"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// Config is a raft configuration as plain data: who votes and who learns,
// joint or not. It mirrors raftpb.ConfState and etcd's tracker.Config. Every
// slice is sorted, without duplicates, and nil when empty (see Normalize).
//
// A configuration is joint while VotersOutgoing is not empty: decisions then
// need a majority of Voters and a majority of VotersOutgoing. Written as in
// etcd, (1 2 4)&&(1 2 3) is the joint configuration entered to replace 3 by 4.
type Config struct {
	// Voters are the voters of the incoming configuration.
	Voters []uint64
	// VotersOutgoing are the voters of the outgoing configuration; empty
	// unless the configuration is joint.
	VotersOutgoing []uint64
	// Learners are the learners of the incoming configuration.
	Learners []uint64
	// LearnersNext are outgoing voters that become learners when the joint
	// configuration is left.
	LearnersNext []uint64
	// AutoLeave is set when raft leaves the joint configuration by itself.
	// Plans from this package never set it: the node leaves explicitly.
	AutoLeave bool
}

// ConfigFromConfState converts raft's ConfState; nil gives the empty Config.
func ConfigFromConfState(cs *raftpb.ConfState) Config {
	return Config{
		Voters:         cs.GetVoters(),
		VotersOutgoing: cs.GetVotersOutgoing(),
		Learners:       cs.GetLearners(),
		LearnersNext:   cs.GetLearnersNext(),
		AutoLeave:      cs.GetAutoLeave(),
	}.Normalize()
}

// ConfigFromTracker converts the configuration etcd raft tracks (what
// RawNode.Status().Config holds).
func ConfigFromTracker(tc tracker.Config) Config {
	return Config{
		Voters:         mapIDs(tc.Voters[0]),
		VotersOutgoing: mapIDs(tc.Voters[1]),
		Learners:       mapIDs(tc.Learners),
		LearnersNext:   mapIDs(tc.LearnersNext),
		AutoLeave:      tc.AutoLeave,
	}.Normalize()
}

func mapIDs[V any](m map[uint64]V) []uint64 {
	if len(m) == 0 {
		return nil
	}
	out := make([]uint64, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	return out
}

// CanLead says whether leadership may move to member id: only a voter of
// the incoming configuration can take it. A learner, a voter that a joint
// configuration turns into a learner, and a voter that it removes (only in
// the outgoing half) are refused with ErrLearnerCannotLead; an ID outside
// the configuration with ErrUnknownMember. The error is a *Refusal. The
// node's leadership transfers and its hand-off on stop follow this rule, as
// the planner's OpTransferLeader check does.
func (c Config) CanLead(id uint64) error {
	if !c.Contains(id) {
		return &Refusal{Err: ErrUnknownMember, ID: id, Detail: memberDetail(id, "is not in the configuration")}
	}
	switch c.Role(id) {
	case RoleLearner:
		what := "is a learner"
		if slices.Contains(c.LearnersNext, id) {
			what = "is becoming a learner"
		}
		return &Refusal{Err: ErrLearnerCannotLead, ID: id, Detail: memberDetail(id, what)}
	case RoleNone:
		return &Refusal{Err: ErrLearnerCannotLead, ID: id, Detail: memberDetail(id, "is leaving the voters")}
	}
	return nil
}

// ConfState converts the Config back into raft's ConfState.
func (c Config) ConfState() *raftpb.ConfState {
	c = c.Normalize()
	cs := &raftpb.ConfState{
		Voters:         c.Voters,
		VotersOutgoing: c.VotersOutgoing,
		Learners:       c.Learners,
		LearnersNext:   c.LearnersNext,
	}
	if c.AutoLeave {
		cs.AutoLeave = new(true)
	}
	return cs
}

// Normalize returns a copy of c with every slice sorted, deduplicated and nil
// when empty. It shares no memory with c.
func (c Config) Normalize() Config {
	return Config{
		Voters:         normIDs(c.Voters),
		VotersOutgoing: normIDs(c.VotersOutgoing),
		Learners:       normIDs(c.Learners),
		LearnersNext:   normIDs(c.LearnersNext),
		AutoLeave:      c.AutoLeave,
	}
}

func normIDs(ids []uint64) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// Joint reports whether the configuration is joint.
func (c Config) Joint() bool { return len(c.VotersOutgoing) > 0 }

// Role returns id's role in the incoming configuration.
func (c Config) Role(id uint64) Role {
	switch {
	case slices.Contains(c.Voters, id):
		return RoleVoter
	case slices.Contains(c.Learners, id), slices.Contains(c.LearnersNext, id):
		return RoleLearner
	}
	return RoleNone
}

// Contains reports whether id is in the configuration at all, in any role and
// either half.
func (c Config) Contains(id uint64) bool {
	return slices.Contains(c.Voters, id) || slices.Contains(c.VotersOutgoing, id) ||
		slices.Contains(c.Learners, id) || slices.Contains(c.LearnersNext, id)
}

// IDs returns every ID in the configuration, sorted.
func (c Config) IDs() []uint64 {
	var all []uint64
	all = append(all, c.Voters...)
	all = append(all, c.VotersOutgoing...)
	all = append(all, c.Learners...)
	all = append(all, c.LearnersNext...)
	return normIDs(all)
}

// Equal reports whether c and o describe the same configuration.
func (c Config) Equal(o Config) bool {
	c, o = c.Normalize(), o.Normalize()
	return slices.Equal(c.Voters, o.Voters) && slices.Equal(c.VotersOutgoing, o.VotersOutgoing) &&
		slices.Equal(c.Learners, o.Learners) && slices.Equal(c.LearnersNext, o.LearnersNext) &&
		c.AutoLeave == o.AutoLeave
}

// VotersString draws the voters as etcd does: (1 2 3) when simple, and
// (1 2 4)&&(1 2 3) (incoming&&outgoing) when joint.
func (c Config) VotersString() string {
	if !c.Joint() {
		return idList(c.Voters)
	}
	return idList(c.Voters) + "&&" + idList(c.VotersOutgoing)
}

// String draws the configuration deterministically, in etcd's notation with
// decimal IDs: voters=(1 2)&&(1) learners=(3) learners_next=(4) autoleave.
func (c Config) String() string {
	c = c.Normalize()
	var b strings.Builder
	b.WriteString("voters=")
	b.WriteString(c.VotersString())
	if len(c.Learners) > 0 {
		b.WriteString(" learners=" + idList(c.Learners))
	}
	if len(c.LearnersNext) > 0 {
		b.WriteString(" learners_next=" + idList(c.LearnersNext))
	}
	if c.AutoLeave {
		b.WriteString(" autoleave")
	}
	return b.String()
}

func idList(ids []uint64) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(id, 10))
	}
	b.WriteByte(')')
	return b.String()
}

// validate checks that c has a voter and keeps etcd's invariants (the ones
// raft enforces when it restores a ConfState): a learner is in neither half
// of the voters nor in LearnersNext; LearnersNext are outgoing voters that
// are not incoming voters; a configuration that is not joint has no
// LearnersNext and no AutoLeave. c must be normalized.
func (c Config) validate() error {
	bad := func(why string) error { return fmt.Errorf("configuration %s is invalid: %s", c, why) }
	if len(c.Voters) == 0 {
		return bad("no voters")
	}
	for _, id := range c.Learners {
		if slices.Contains(c.Voters, id) || slices.Contains(c.VotersOutgoing, id) || slices.Contains(c.LearnersNext, id) {
			return bad(strconv.FormatUint(id, 10) + " is a learner and a voter")
		}
	}
	for _, id := range c.LearnersNext {
		if !slices.Contains(c.VotersOutgoing, id) || slices.Contains(c.Voters, id) {
			return bad(strconv.FormatUint(id, 10) + " is in learners_next but not only an outgoing voter")
		}
	}
	if !c.Joint() && c.AutoLeave {
		return bad("autoleave without a joint configuration")
	}
	return nil
}

// tracker restores c into an etcd progress tracker, exactly as raft does.
func (c Config) tracker() (tracker.ProgressTracker, error) {
	chg := etcdconfchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: 1}
	cfg, trk, err := etcdconfchange.Restore(chg, c.ConfState())
	if err != nil {
		return tracker.ProgressTracker{}, err
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	return chg.Tracker, nil
}

// apply runs cc through etcd's own confchange.Changer on top of c, the way
// raft applies it, and returns the resulting configuration. A change raft
// would refuse returns an error.
func (c Config) apply(cc *raftpb.ConfChangeV2) (Config, error) {
	trk, err := c.tracker()
	if err != nil {
		return Config{}, err
	}
	chg := etcdconfchange.Changer{Tracker: trk, LastIndex: 1}
	var cfg tracker.Config
	if cc.LeaveJoint() {
		cfg, _, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		cfg, _, err = chg.EnterJoint(autoLeave, cc.GetChanges()...)
	} else {
		cfg, _, err = chg.Simple(cc.GetChanges()...)
	}
	if err != nil {
		return Config{}, err
	}
	return configFromTracker(cfg), nil
}

func configFromTracker(cfg tracker.Config) Config {
	return Config{
		Voters:         quorum.MajorityConfig(cfg.Voters[0]).Slice(),
		VotersOutgoing: quorum.MajorityConfig(cfg.Voters[1]).Slice(),
		Learners:       quorum.MajorityConfig(cfg.Learners).Slice(),
		LearnersNext:   quorum.MajorityConfig(cfg.LearnersNext).Slice(),
		AutoLeave:      cfg.AutoLeave,
	}.Normalize()
}
