package confchange

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ClusterSettings are the membership settings every member shares: the
// node carries them through the raft log (an entry of its own, never handed
// to the state machine) and in snapshots, so that they are the same on every
// member and survive restarts; a host's configuration only seeds them for a
// new cluster. The other Settings (Stabilization, MaxLag) stay local: the
// leader's apply.
type ClusterSettings struct {
	// TargetVoters is how many voters the policy keeps: odd, 1–MaxVoters.
	TargetVoters int
	// MaxLearners bounds adding learners: 1–MaxLearnersLimit.
	MaxLearners int
	// AutoPromote lets the policy change the membership on its own
	// (promote ready standbys, scale to TargetVoters, fail over, remove the
	// dead); false: only explicit requests do.
	AutoPromote bool
	// FailoverAfter is how long a voter must be silent before the policy
	// swaps it for a ready standby; positive.
	FailoverAfter time.Duration
	// RemoveDeadAfter, when positive, lets the policy remove a learner silent
	// that long; 0: off.
	RemoveDeadAfter time.Duration
}

// SeedClusterSettings returns the cluster settings that s (with defaults)
// and autoPromote describe: what a new cluster starts with.
func SeedClusterSettings(s Settings, autoPromote bool) ClusterSettings {
	d := s.WithDefaults()
	return ClusterSettings{
		TargetVoters: d.TargetVoters, MaxLearners: d.MaxLearners, AutoPromote: autoPromote,
		FailoverAfter: d.FailoverAfter, RemoveDeadAfter: d.RemoveDeadAfter,
	}
}

// Apply returns s with the cluster settings c in place of its own.
func (c ClusterSettings) Apply(s Settings) Settings {
	s.TargetVoters, s.MaxLearners = c.TargetVoters, c.MaxLearners
	s.FailoverAfter, s.RemoveDeadAfter = c.FailoverAfter, c.RemoveDeadAfter
	return s
}

// Validate reports every bad field at once, each wrapping ErrInvalidSettings.
// Unlike Settings, zero is not "the default": every field is explicit. A
// positive RemoveDeadAfter must be at least FailoverAfter: a lost voter is
// first failed over (demoted) and only then removed, so a delay shorter
// than the failover's would remove learners that a short restart made
// silent, while voters silent as long stay.
func (c ClusterSettings) Validate() error {
	errs := c.fieldErrors()
	if c.RemoveDeadAfter > 0 && c.FailoverAfter > 0 && c.RemoveDeadAfter < c.FailoverAfter {
		errs = append(errs, fmt.Errorf("%w: remove dead after (%s) must be 0 (off) or at least failover after (%s)",
			ErrInvalidSettings, c.RemoveDeadAfter, c.FailoverAfter))
	}
	return errors.Join(errs...)
}

// fieldErrors checks each field on its own: what a decoded entry must
// satisfy (an entry written before a rule between fields existed still
// applies).
func (c ClusterSettings) fieldErrors() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSettings}, args...)...))
	}
	if c.TargetVoters < 1 || c.TargetVoters > MaxVoters || c.TargetVoters%2 == 0 {
		bad("target voters (%d) must be odd, from 1 to %d", c.TargetVoters, MaxVoters)
	}
	if c.MaxLearners < 1 || c.MaxLearners > MaxLearnersLimit {
		bad("max learners (%d) must be from 1 to %d", c.MaxLearners, MaxLearnersLimit)
	}
	if c.FailoverAfter <= 0 {
		bad("failover after (%s) must be positive", c.FailoverAfter)
	}
	if c.RemoveDeadAfter < 0 {
		bad("remove dead after (%s) must not be negative (0: off)", c.RemoveDeadAfter)
	}
	return errs
}

// MaxLearnersLimit bounds MaxLearners, in Settings and in the replicated
// cluster settings. With relays the leader's bytes per write no longer
// grow with its standbys, but some of its work still does: it tracks each
// member's progress (raft's inflight window among it), sends each a
// heartbeat every heartbeat interval and takes its answer, answers each
// one's reads, and its bookkeeping looks at each once a second. 64 keeps
// that a small share of a leader's work. It is also part of the settings
// entry's format: a release that decodes a larger value must not be mixed
// with one that does not (an older member would skip the entry, and the
// members would hold different settings), so raising it needs a protocol
// version.
const MaxLearnersLimit = 64

// String prints the settings.
func (c ClusterSettings) String() string {
	return fmt.Sprintf("target-voters=%d max-learners=%d auto-promote=%t failover-after=%s remove-dead-after=%s",
		c.TargetVoters, c.MaxLearners, c.AutoPromote, c.FailoverAfter, c.RemoveDeadAfter)
}

// clusterSettingsVersion is the first byte of an encoding.
const clusterSettingsVersion = 1

// Encode returns the canonical encoding of c:
//
//	version            byte (1)
//	target voters      uvarint
//	max learners       uvarint
//	flags              byte: bit 0 auto-promote, other bits 0
//	failover after     uvarint nanoseconds
//	remove dead after  uvarint nanoseconds
//
// c must be valid (Validate); Encode does not check it.
func (c ClusterSettings) Encode() []byte {
	b := []byte{clusterSettingsVersion}
	b = binary.AppendUvarint(b, uint64(c.TargetVoters))
	b = binary.AppendUvarint(b, uint64(c.MaxLearners))
	var flags byte
	if c.AutoPromote {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(c.FailoverAfter))
	return binary.AppendUvarint(b, uint64(c.RemoveDeadAfter))
}

// DecodeClusterSettings decodes an encoding made by Encode and validates it.
// Anything else — an unknown version or flag, a truncated or overlong field,
// trailing bytes, invalid values — is an error wrapping ErrInvalidSettings;
// it never panics.
func DecodeClusterSettings(b []byte) (ClusterSettings, error) {
	fail := func(what string) (ClusterSettings, error) {
		return ClusterSettings{}, fmt.Errorf("%w: cluster settings encoding: %s", ErrInvalidSettings, what)
	}
	if len(b) == 0 || b[0] != clusterSettingsVersion {
		return fail("unknown version")
	}
	b = b[1:]
	var vals [4]uint64
	next := func(i int) bool {
		v, n := binary.Uvarint(b)
		if n <= 0 || n != len(binary.AppendUvarint(nil, v)) {
			return false
		}
		vals[i], b = v, b[n:]
		return true
	}
	if !next(0) || !next(1) {
		return fail("truncated or overlong count")
	}
	if len(b) == 0 || b[0]&^1 != 0 {
		return fail("missing or unknown flags")
	}
	auto := b[0]&1 != 0
	b = b[1:]
	if !next(2) || !next(3) {
		return fail("truncated or overlong duration")
	}
	if len(b) != 0 {
		return fail("trailing bytes")
	}
	if vals[0] > MaxVoters || vals[1] > MaxLearnersLimit || vals[2] > 1<<62 || vals[3] > 1<<62 {
		return fail("value out of range")
	}
	c := ClusterSettings{
		TargetVoters: int(vals[0]), MaxLearners: int(vals[1]), AutoPromote: auto,
		FailoverAfter: time.Duration(vals[2]), RemoveDeadAfter: time.Duration(vals[3]),
	}
	if err := errors.Join(c.fieldErrors()...); err != nil {
		return ClusterSettings{}, err
	}
	return c, nil
}
