package confchange

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Defaults of Settings, applied by WithDefaults to zero fields.
//
// DefaultMaxLearners is for a leader that sends every standby its own copy
// of each entry: each one adds the bytes of a follower to the leader's
// sends per write. DefaultMaxLearnersRelayed is the default a node with
// relays on (raft.Config.Relay) seeds instead: the leader then sends each
// entry once per relay, 48 standbys cost it about what a few followers do
// (see "Running a fleet of standbys" in docs/operations.md). Either only
// seeds a new cluster: the replicated cluster settings hold the number
// itself, so a cluster keeps what it was created with until an operator
// changes it (raft.Node.UpdateSettings).
const (
	DefaultTargetVoters       = 3
	DefaultMaxLearners        = 2
	DefaultMaxLearnersRelayed = 48
	DefaultFailoverAfter      = 30 * time.Second
	DefaultStabilization      = 10 * time.Second
	DefaultSnapshotCount      = 10000
)

// Settings are the membership rules' knobs. The zero value of every field
// means its default, so Settings{} is valid. Apply the defaults with
// WithDefaults; Validate reports every bad field.
type Settings struct {
	// TargetVoters is how many voters the default policy fills seats up to
	// with ready learners. Odd, 1–9; default 3. Learners beyond it stay
	// standbys.
	TargetVoters int
	// MaxLearners bounds adding learners (ErrTooManyLearners); default 2
	// (etcd allows 1; standbys need room), 48 on a node with relays on
	// (DefaultMaxLearnersRelayed); at most MaxLearnersLimit. Voters that are
	// demoted become learners even above it; adds are then refused until
	// the count is below it again.
	MaxLearners int
	// FailoverAfter is how long a voter must be unreachable (no contact)
	// before the default policy swaps it for a ready standby; default 30s.
	FailoverAfter time.Duration
	// Stabilization is how long a member must stay ready before it may be
	// promoted; default 10s (as Consul's autopilot).
	Stabilization time.Duration
	// SnapshotCount is the node's snapshot interval in entries; default
	// 10,000. It only sets the default of MaxLag.
	SnapshotCount uint64
	// MaxLag is the most entries a member may be behind the leader's last
	// index and still be ready; default SnapshotCount/10 (etcd's proposal),
	// at least 1. At most SnapshotCount.
	MaxLag uint64
	// RemoveDeadAfter, when set, lets the default policy remove a learner
	// (e.g. a voter it failed over) it has not heard from for that long;
	// default 0: off.
	RemoveDeadAfter time.Duration
}

// DefaultSettings returns the defaults, filled in.
func DefaultSettings() Settings { return Settings{}.WithDefaults() }

// WithDefaults returns s with every zero field set to its default.
func (s Settings) WithDefaults() Settings {
	if s.TargetVoters == 0 {
		s.TargetVoters = DefaultTargetVoters
	}
	if s.MaxLearners == 0 {
		s.MaxLearners = DefaultMaxLearners
	}
	if s.FailoverAfter == 0 {
		s.FailoverAfter = DefaultFailoverAfter
	}
	if s.Stabilization == 0 {
		s.Stabilization = DefaultStabilization
	}
	if s.SnapshotCount == 0 {
		s.SnapshotCount = DefaultSnapshotCount
	}
	if s.MaxLag == 0 {
		s.MaxLag = max(s.SnapshotCount/10, 1)
	}
	return s
}

// Validate reports every bad field at once (errors.Join), each problem naming
// the field and its value and wrapping ErrInvalidSettings. Zero fields are
// valid (they mean the default). It does not change s.
func (s Settings) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSettings}, args...)...))
	}
	if s.TargetVoters < 0 || s.TargetVoters > MaxVoters || (s.TargetVoters != 0 && s.TargetVoters%2 == 0) {
		bad("TargetVoters (%d) must be odd, from 1 to %d", s.TargetVoters, MaxVoters)
	}
	if s.MaxLearners < 0 || s.MaxLearners > MaxLearnersLimit {
		bad("MaxLearners (%d) must be from 0 (the default) to %d", s.MaxLearners, MaxLearnersLimit)
	}
	if s.FailoverAfter < 0 {
		bad("FailoverAfter (%s) must not be negative", s.FailoverAfter)
	}
	if s.Stabilization < 0 {
		bad("Stabilization (%s) must not be negative", s.Stabilization)
	}
	if s.RemoveDeadAfter < 0 {
		bad("RemoveDeadAfter (%s) must not be negative", s.RemoveDeadAfter)
	}
	d := s.WithDefaults()
	if s.RemoveDeadAfter > 0 && s.RemoveDeadAfter < d.FailoverAfter {
		bad("RemoveDeadAfter (%s) must be 0 (off) or at least FailoverAfter (%s): a lost voter is failed over before it is removed", s.RemoveDeadAfter, d.FailoverAfter)
	}
	if s.MaxLag != 0 && s.MaxLag > d.SnapshotCount {
		bad("MaxLag (%d) must not exceed SnapshotCount (%d): a member that far behind needs a snapshot", s.MaxLag, d.SnapshotCount)
	}
	return errors.Join(errs...)
}

// String prints the settings as given (zero fields print as 0).
func (s Settings) String() string {
	return "target-voters=" + strconv.Itoa(s.TargetVoters) +
		" max-learners=" + strconv.Itoa(s.MaxLearners) +
		" failover-after=" + s.FailoverAfter.String() +
		" stabilization=" + s.Stabilization.String() +
		" snapshot-count=" + strconv.FormatUint(s.SnapshotCount, 10) +
		" max-lag=" + strconv.FormatUint(s.MaxLag, 10) +
		" remove-dead-after=" + s.RemoveDeadAfter.String()
}
