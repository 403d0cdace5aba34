package confchange_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"go.etcd.io/raft/v3/raftpb"
)

// A three-voter cluster with one learner, as the leader (member 1) sees it.
func exampleView() confchange.View {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	healthy := confchange.Progress{Match: 5000, Next: 5001, State: confchange.StateReplicate, RecentActive: true, LastContact: now}
	learner := healthy
	learner.Match = 790 // 4,210 entries behind
	return confchange.View{
		Config: confchange.ConfigFromConfState(&raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}),
		Members: map[uint64]confchange.Member{
			1: {ID: 1, PeerAddr: "10.0.0.1:7001"},
			2: {ID: 2, PeerAddr: "10.0.0.2:7001"},
			3: {ID: 3, PeerAddr: "10.0.0.3:7001"},
			4: {ID: 4, PeerAddr: "10.0.0.4:7001", Metadata: map[string]string{"client_addr": "10.0.0.4:8001"}},
		},
		Leader:     1,
		LastIndex:  5000,
		Now:        now,
		Progress:   map[uint64]confchange.Progress{2: healthy, 3: healthy, 4: learner},
		ReadySince: map[uint64]time.Time{2: now.Add(-time.Hour), 3: now.Add(-time.Hour)},
	}
}

// Promoting a learner that has not caught up is refused with the numbers.
func ExamplePlanChange_refused() {
	v := exampleView()
	_, err := confchange.PlanChange(v, confchange.Settings{}, confchange.Promote(4))
	var r *confchange.Refusal
	if errors.As(err, &r) {
		fmt.Println(errors.Is(err, confchange.ErrLearnerNotReady), r.Code(), r.Readiness.Lag)
		fmt.Println(err)
	}
	// Output:
	// true learner_not_ready 4210
	// confchange: learner not ready: member 4: lag 4,210 entries > 1,000
}

// Once the learner has caught up and stayed so for the stabilization period,
// the promotion is one simple conf change.
func ExamplePlanChange() {
	v := exampleView()
	pr := v.Progress[4]
	pr.Match = 4990
	v.Progress[4] = pr
	v.ReadySince = confchange.UpdateReadySince(v, confchange.Settings{}) // ready from now on
	fmt.Println(confchange.Readiness(v, confchange.Settings{}, 4))

	v.Now = v.Now.Add(10 * time.Second) // the node refreshes its view on every tick
	v.ReadySince = confchange.UpdateReadySince(v, confchange.Settings{})
	fmt.Println(confchange.Readiness(v, confchange.Settings{}, 4))

	req := confchange.Promote(4)
	req.ChangeID = 17
	plan, err := confchange.PlanChange(v, confchange.Settings{}, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(plan)
	fmt.Println(raftpb.ConfChangesToString(plan.Change.GetChanges()), plan.EntersJoint())
	ctx, _ := confchange.DecodeContext(plan.Change.GetContext())
	fmt.Println("change", ctx.ChangeID)
	// Output:
	// stable for 0s of 10s
	// ready
	// promote 4: voters=(1 2 3) learners=(4) → voters=(1 2 3 4)
	// v4 false
	// change 17
}

// Check lists every refusal, each with a stable code, as the example server's
// dry run shows them.
func ExampleCheck() {
	v := exampleView()
	v.PendingChange = true
	for _, r := range confchange.Check(v, confchange.Settings{MaxLearners: 1}, confchange.AddLearner(confchange.Member{ID: 4, PeerAddr: "10.0.0.2:7001"})) {
		fmt.Println(r.Code()+":", r.Detail)
	}
	// Output:
	// member_exists: member 4 is already a learner
	// member_exists: peer address "10.0.0.2:7001" is already used by member 2
	// too_many_learners: the cluster has 1 learner, at most 1
	// change_in_progress: the last one proposed is not applied yet
}

// The default policy swaps a voter that has been unreachable for
// FailoverAfter for a ready standby, through a joint configuration the node
// leaves with its own proposal.
func ExampleDefaultPolicy() {
	v := exampleView()
	pr := v.Progress[4]
	pr.Match = 5000
	v.Progress[4] = pr
	v.ReadySince[4] = v.Now.Add(-time.Minute)
	lost := v.Progress[3]
	lost.RecentActive, lost.LastContact = false, v.Now.Add(-45*time.Second)
	v.Progress[3] = lost

	policy := confchange.DefaultPolicy{Settings: confchange.Settings{FailoverAfter: 30 * time.Second}}
	req, ok := policy.Next(v)
	fmt.Println(req, ok)
	plan, _ := confchange.PlanChange(v, policy.Settings, req)
	fmt.Println(plan)
	fmt.Println(plan.Change.GetTransition())

	// After the joint configuration is applied on the leader:
	leave := confchange.LeaveJointChange(18)
	fmt.Println(leave.LeaveJoint())
	// Output:
	// swap 3 for 4 true
	// swap 3 for 4: voters=(1 2 3) learners=(4) → voters=(1 2 4)&&(1 2 3) learners_next=(3) → voters=(1 2 4) learners=(3)
	// ConfChangeTransitionJointExplicit
	// true
}

// Every conf change carries the change ID and the member records it adds, so
// every member learns addresses through the log.
func ExampleContext() {
	b, _ := confchange.Context{ChangeID: 9, Members: []confchange.Member{{ID: 5, PeerAddr: "10.0.0.5:7001"}}}.Encode()
	c, err := confchange.DecodeContext(b)
	fmt.Println(c.ChangeID, c.Members[0], err)
	_, err = confchange.DecodeContext([]byte{7, 1, 2})
	fmt.Println(errors.Is(err, confchange.ErrBadContext), err)
	// Output:
	// 9 5@10.0.0.5:7001 <nil>
	// true confchange: bad context: unknown version 7
}

// Settings report every problem at once.
func ExampleSettings_Validate() {
	err := confchange.Settings{TargetVoters: 4, Stabilization: -time.Second}.Validate()
	fmt.Println(err)
	fmt.Println(confchange.Code(err))
	// Output:
	// confchange: invalid settings: TargetVoters (4) must be odd, from 1 to 9
	// confchange: invalid settings: Stabilization (-1s) must not be negative
	// invalid_setting
}
