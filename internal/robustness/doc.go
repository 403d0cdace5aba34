// Package robustness is the randomized fault suite: a scenario runner over
// the in-process cluster (internal/cluster) whose nemesis composes faults at
// random per seed while clients put, get, compare-and-swap, delete and read
// stale from every member role, giving up on requests at random.
//
// The faults (see the kind constants): symmetric and one-way partitions,
// the leader isolated (also with a conf change it cannot commit), message
// drop, delay and reorder, duplication; crash (no flush) and clean stop of
// a member of a random role, restart (also onto a slow disk), a restart at
// once after an idle period with reads waiting, pause (a frozen member whose
// messages arrive late in a burst); slow, stalled and failing fsync, a crash
// in the middle of a log write, a disk that fills up part-way through a
// write, snapshots on demand with a small snapshot count; and membership
// churn as a fault: learners added (they catch up by snapshot) and removed,
// promote, demote, remove a voter, replace a voter by a standby in one joint
// change (sometimes crashing the leader inside it), leadership transfer, and
// the replicated target voter count scaled up and down — in one-, two- and
// three-voter clusters.
//
// Two scenarios are scripted instead (Scenario.Script; script.go,
// walks.go): their changes run in a fixed order while the clients run, each
// asserted to take effect within a bound (refusals such as quorum_at_risk,
// learner_not_ready and change_in_progress are retried), and the leader is
// crashed inside joint configurations deterministically: appends carrying
// the leave-joint entry are dropped until the next leader has inherited the
// joint configuration, which it must then complete (its voters the incoming
// ones). The membership walk, with the policy off and twice over: two
// learners added, each catching up by snapshot; both promoted in one joint
// change (leader crashed inside it); two voters demoted at once; a voter
// swapped for a learner (leader crashed inside it); a voter replaced by a
// learner, and so removed; a learner removed — the voter count odd outside
// joint configurations throughout. The scale walk, with the policy on:
// target voters 1 → 3 → 5 → 3 → 1 → 3, each step one joint change with the
// leader crashed inside it, ending only once the leader reports exactly
// that many voters; before each scale-down leadership moves to the
// highest-ID voter, and the policy must not demote it.
//
// The fleet scenario (fleet_test.go, TestFleetUnderFaults) is issue 36's
// shape: 3 voters and 24 standbys fed through relays (raft.Config.Relay),
// a third of the clients' operations sent to the leader and the others to
// standbys, which forward the writes and serve the linearizable reads;
// its nemesis partitions, crashes, slows disks and aims at the relays
// (crashed, cut off, their fsync held so they hand on appends they have
// not written), and swaps a voter for a standby in one joint change. It
// also fails unless standbys served reads and forwarded
// writes, and the leader relays again once the faults end.
//
// Each run checks: the history is linearizable (porcupine; a violation
// writes porcupine's HTML visualization, with the fault timeline drawn on
// it, to the temporary directory); every member holds every acknowledged
// write; stale reads on one run of a member never go backwards and never
// return a value that was never written; with the policy alone changing
// voters, no configuration outside a joint state has an even voter count;
// after the faults stop, a write and a membership change succeed within 30
// seconds. A failure prints the scenario, the seed and the fault timeline.
//
// Clock steps are not among the faults: the library measures every
// interval (contact, readiness, stabilization, timeouts) on the local
// monotonic clock and persists no wall-clock time, so a wall-clock step
// cannot change what it does.
//
// The fixed seeds run with go test; a soak runs random seeds of every
// scenario until the time is up and prints what it checked:
//
//	go test ./internal/robustness -run TestRobustness -soak 30m -timeout 40m
//
// Replay one seed of every scenario with ROBUSTNESS_SEED=n.
package robustness
