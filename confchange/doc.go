// Package confchange is understudy's membership logic: the member and role
// model, learner readiness, the safety checks, planning a change as one etcd
// raft ConfChangeV2 (through joint consensus where needed) and the automatic
// promotion policy.
//
// It is pure: no I/O, no goroutines, no clock. Everything comes in as a View —
// the applied configuration, the member table, the leader's progress for each
// member, the leader's last index and the time — and goes out as data: a
// Reason, Refusals, a Plan, a Request. The node (package raft) builds the
// view, proposes the plan and keeps the small state the rules need over time
// (ReadySince, via UpdateReadySince).
//
// # Configurations
//
// A Config is drawn as etcd draws it: (1 2 3) is three voters, and
// (1 2 3 4)&&(1 2 3) is a joint configuration in which every decision needs a
// majority of the incoming voters (1 2 3 4) and of the outgoing ones (1 2 3).
// Promoting learner 4 is one voter change, so it is a simple change:
//
//	voters=(1 2 3) learners=(4) → voters=(1 2 3 4)
//
// Promoting learners 4 and 5 at once changes two voters, so it enters a joint
// configuration, explicitly (raft's Section 4.3; etcd's EnterJoint turns
// (1 2 3)&&() into (1 2 3 4 5)&&(1 2 3)), and the node leaves it with its own
// proposal (LeaveJointChange) once the entering change is applied on the
// leader:
//
//	(1 2 3)&&() → (1 2 3 4 5)&&(1 2 3) → (1 2 3 4 5)&&()
//
// Swapping lost voter 3 for standby 4 goes the same way, 3 becoming a learner
// when the joint configuration is left:
//
//	voters=(1 2 3) learners=(4) → voters=(1 2 4)&&(1 2 3) learners_next=(3) → voters=(1 2 4) learners=(3)
//
// A joint configuration always ends in its incoming configuration, so the
// checks below must hold for both halves before it is entered.
//
// # Readiness
//
// A member is ready to be promoted when the leader heard from it within the
// last election timeout (recently active), replicates to it (not probing) with
// no snapshot in flight, it is at most Settings.MaxLag entries behind the
// leader's last index (default a tenth of SnapshotCount, etcd's proposal),
// and all of that has held for Settings.Stabilization (default 10s). When it
// is not, the Reason says why in a sentence: "lag 4,210 entries > 1,000",
// "snapshot in flight", "no contact for 12s", "stable for 3s of 10s".
//
// # The rules
//
// An active voter is the leader or a voter the leader heard from recently.
// Check lists every rule a request breaks, each as a *Refusal that unwraps to
// a sentinel error with a stable code:
//
//   - A request that names no member, the wrong number of members or one
//     twice, or leaves a configuration that is not joint; a view whose
//     configuration breaks raft's invariants: ErrInvalidRequest.
//   - A member record with ID 0, a peer address that is not host:port, or an
//     empty metadata key; promoting a voter, demoting a learner: ErrInvalidMember.
//   - Adding an ID that is a member or was ever removed (IDs are never reused),
//     or a peer address another member uses: ErrMemberExists.
//   - Naming an ID that is not in the configuration: ErrUnknownMember.
//   - Making a read-only member a voter: ErrMemberReadOnly.
//   - Leadership to a learner (or to a voter that is leaving): ErrLearnerCannotLead.
//   - Promoting (or swapping in) a member that is not ready: ErrLearnerNotReady,
//     with its Reason.
//   - Adding a learner when there are already MaxLearners learners (default 2,
//     48 on a node with relays; at most MaxLearnersLimit, 64):
//     ErrTooManyLearners. Demoted voters become learners even above the
//     maximum; adds are refused until the count is below it again.
//   - A change that grows the voters past 9 (MaxVoters): ErrTooManyVoters.
//   - A change while another is proposed but not applied, or while the
//     configuration is joint (only leaving it is allowed): ErrChangeInProgress.
//   - A change without an active majority in the current configuration (in
//     both halves when joint), or one whose new configuration — or, for a
//     joint change, the joint configuration's incoming half — would lack a
//     majority of active voters: ErrQuorumAtRisk. A voter added directly
//     (OpAddVoter, an explicit opt-in) counts as down until it starts, so
//     adding a voter to a one-member cluster, or to three members with one
//     unreachable, is refused; adding a learner is not, as a learner never
//     changes the quorum and is removed again if it never comes up.
//
// Leadership transfers are checked (OpTransferLeader) but are no conf change.
//
// # Plans
//
// PlanChange turns an accepted Request into one ConfChangeV2: a simple change
// when at most one voter changes, otherwise a joint change with the explicit
// transition (ConfChangeTransitionJointExplicit), never left by raft on its
// own, so a joint configuration stays visible until the node — or, after a
// leader crash, the next leader through the policy — leaves it. The plan is
// computed with etcd's own confchange.Changer, so raft accepts what is
// planned. Every change's Context carries the change ID and the member
// records it adds or updates (see Context).
//
// # The default policy
//
// DefaultPolicy never acts while a change is pending or without an active
// majority; completes a joint configuration first; fills voter seats up to
// TargetVoters (odd, default 3, at most 9) with ready learners, promoting two
// at once rather than leave an even voter count; swaps a voter unreachable for
// FailoverAfter (default 30s) for a ready standby in one joint change, keeping
// the voter count; and, when RemoveDeadAfter is set, removes learners silent
// that long. Ties go to the least lag, then the lowest ID.
package confchange
