package confchange

import (
	"errors"
	"strconv"
	"strings"
)

// The refusals. Each is returned wrapped in a *Refusal carrying the details;
// test with errors.Is. Code gives each a stable snake_case code.
var (
	// ErrLearnerNotReady: promoting a member that is not ready (see Readiness).
	ErrLearnerNotReady = errors.New("confchange: learner not ready")
	// ErrQuorumAtRisk: the current, joint or new configuration would lack a
	// majority of active voters.
	ErrQuorumAtRisk = errors.New("confchange: quorum at risk")
	// ErrLearnerCannotLead: transferring leadership to a learner.
	ErrLearnerCannotLead = errors.New("confchange: a learner cannot lead")
	// ErrChangeInProgress: a conf change is pending or the configuration is
	// joint.
	ErrChangeInProgress = errors.New("confchange: a membership change is in progress")
	// ErrTooManyLearners: adding a learner beyond Settings.MaxLearners.
	ErrTooManyLearners = errors.New("confchange: too many learners")
	// ErrMemberExists: a duplicate (or removed) ID, or a peer address
	// another member uses.
	ErrMemberExists = errors.New("confchange: member exists")
	// ErrUnknownMember: an ID that is not in the configuration.
	ErrUnknownMember = errors.New("confchange: unknown member")
	// ErrInvalidMember: ID 0, a bad peer address, or a member in the wrong
	// role for the request (promoting a voter, demoting a learner).
	ErrInvalidMember = errors.New("confchange: invalid member")
	// ErrTooManyVoters: a change that grows the voters past MaxVoters.
	ErrTooManyVoters = errors.New("confchange: too many voters")
	// ErrMemberReadOnly: making a read-only member a voter.
	ErrMemberReadOnly = errors.New("confchange: member is read-only")
	// ErrInvalidRequest: a malformed request (unknown op, wrong number of
	// IDs, nothing to leave) or a view with an invalid configuration.
	ErrInvalidRequest = errors.New("confchange: invalid request")
	// ErrInvalidSettings: a bad Settings field (see Settings.Validate).
	ErrInvalidSettings = errors.New("confchange: invalid settings")
	// ErrBadContext: a ConfChangeV2.Context that does not decode.
	ErrBadContext = errors.New("confchange: bad context")
	// ErrPolicyWouldUndo: a manual promotion or demotion that the policy,
	// acting on its own, would undo at its next step (PolicyWouldUndo): it
	// owns the voter count then; change its target, or turn it off.
	ErrPolicyWouldUndo = errors.New("confchange: the policy would undo the change")
)

var codes = []struct {
	err  error
	code string
}{
	{ErrLearnerNotReady, "learner_not_ready"},
	{ErrQuorumAtRisk, "quorum_at_risk"},
	{ErrLearnerCannotLead, "learner_cannot_lead"},
	{ErrChangeInProgress, "change_in_progress"},
	{ErrTooManyLearners, "too_many_learners"},
	{ErrMemberExists, "member_exists"},
	{ErrUnknownMember, "unknown_member"},
	{ErrInvalidMember, "invalid_member"},
	{ErrTooManyVoters, "too_many_voters"},
	{ErrMemberReadOnly, "member_read_only"},
	{ErrInvalidRequest, "invalid_request"},
	{ErrInvalidSettings, "invalid_setting"},
	{ErrBadContext, "bad_context"},
	{ErrPolicyWouldUndo, "policy_would_undo"},
}

// Code returns the stable snake_case code of err ("learner_not_ready",
// "quorum_at_risk", …): that of the first *Refusal in err's tree, else of the
// first sentinel of this package it wraps, else "".
func Code(err error) string {
	if r, ok := errors.AsType[*Refusal](err); ok {
		err = r.Err
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// Quorum is the arithmetic behind an ErrQuorumAtRisk refusal.
type Quorum struct {
	// Phase is "current", "joint" or "new": the configuration that fails.
	Phase string
	// Voters is the failing configuration's voters, drawn as etcd does.
	Voters string
	// Count, Active and Need: voters, active voters, and the majority.
	Count, Active, Need int
}

// Refusal is why a request is refused, as data. It unwraps to one of the
// sentinels, so errors.Is works, and errors.As gives the numbers.
type Refusal struct {
	// Err is the sentinel (ErrLearnerNotReady, ErrQuorumAtRisk, …).
	Err error
	// ID is the member concerned, 0 when none.
	ID uint64
	// Detail is the human explanation, without the sentinel's text.
	Detail string
	// Readiness is the member's readiness (ErrLearnerNotReady only).
	Readiness Reason
	// Quorum is the count that fails (ErrQuorumAtRisk only).
	Quorum Quorum
}

// Error returns the sentinel's text and the detail, e.g. "confchange: learner
// not ready: member 4: lag 4,210 entries > 1,000".
func (r *Refusal) Error() string { return r.Err.Error() + ": " + r.Detail }

// Unwrap returns the sentinel.
func (r *Refusal) Unwrap() error { return r.Err }

// Code returns the refusal's stable snake_case code.
func (r *Refusal) Code() string { return Code(r.Err) }

// Refusals is more than one refusal of the same request, as an error: Error
// joins them with "; ", errors.Is matches any of them and errors.As finds the
// first.
type Refusals []*Refusal

// Error joins the refusals' messages.
func (rs Refusals) Error() string {
	msgs := make([]string, len(rs))
	for i, r := range rs {
		msgs[i] = r.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the refusals.
func (rs Refusals) Unwrap() []error {
	out := make([]error, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}

// asError returns nil, the single refusal, or all of them.
func asError(rs []*Refusal) error {
	switch len(rs) {
	case 0:
		return nil
	case 1:
		return rs[0]
	}
	return Refusals(rs)
}

func memberDetail(id uint64, s string) string {
	return "member " + strconv.FormatUint(id, 10) + " " + s
}
