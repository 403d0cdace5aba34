package confchange

import (
	"fmt"
	"slices"
	"strconv"

	"go.etcd.io/raft/v3/raftpb"
)

// Plan is a checked request turned into the one conf change to propose.
type Plan struct {
	// Request is what was asked.
	Request Request
	// Change is the conf change to propose: a simple change when at most one
	// voter changes, otherwise a joint change with an explicit transition,
	// which the node leaves with LeaveJointChange once the change is applied
	// on the leader. Its Context carries the request's ChangeID and the
	// member records it adds or updates. Nil for OpTransferLeader.
	Change *raftpb.ConfChangeV2
	// Before is the configuration the change applies to.
	Before Config
	// Joint is the joint configuration the change enters; zero when simple.
	Joint Config
	// After is the configuration once the change (and, when joint, the
	// leave-joint change) is applied.
	After Config
	// Members are the records the change adds or updates (also in Context).
	Members []Member
	// Description is the plan in words with the transition drawn, e.g.
	// "promote 4 5: (1 2 3)&&() → (1 2 3 4 5)&&(1 2 3) → (1 2 3 4 5)".
	Description string
}

// EntersJoint reports whether the change goes through a joint configuration.
func (p Plan) EntersJoint() bool { return p.Joint.Joint() }

// String returns the description.
func (p Plan) String() string { return p.Description }

// PlanChange checks r (see Check) and, when nothing refuses it, returns the
// plan. The error is the refusal (a *Refusal), or all of them (Refusals);
// errors.Is and errors.As work on both.
func PlanChange(v View, s Settings, r Request) (Plan, error) {
	if err := asError(Check(v, s, r)); err != nil {
		return Plan{}, err
	}
	before := v.Config.Normalize()
	p := Plan{Request: r, Before: before, After: before}
	if r.Op == OpTransferLeader {
		p.Description = "transfer leadership from " + strconv.FormatUint(v.Leader, 10) +
			" to " + strconv.FormatUint(r.IDs[0], 10)
		if r.IDs[0] == v.Leader {
			p.Description = "member " + strconv.FormatUint(v.Leader, 10) + " is already the leader"
		}
		return p, nil
	}

	single := func(t raftpb.ConfChangeType, id uint64) *raftpb.ConfChangeSingle {
		return &raftpb.ConfChangeSingle{Type: t.Enum(), NodeId: new(id)}
	}
	var ccs []*raftpb.ConfChangeSingle
	switch r.Op {
	case OpAddLearner:
		ccs = append(ccs, single(raftpb.ConfChangeAddLearnerNode, r.Member.ID))
		p.Members = []Member{r.Member}
	case OpAddVoter:
		ccs = append(ccs, single(raftpb.ConfChangeAddNode, r.Member.ID))
		p.Members = []Member{r.Member}
	case OpUpdate:
		ccs = append(ccs, single(raftpb.ConfChangeUpdateNode, r.Member.ID))
		p.Members = []Member{r.Member}
	case OpPromote:
		for _, id := range r.IDs {
			ccs = append(ccs, single(raftpb.ConfChangeAddNode, id))
		}
	case OpDemote:
		for _, id := range r.IDs {
			ccs = append(ccs, single(raftpb.ConfChangeAddLearnerNode, id))
		}
	case OpRemove:
		ccs = append(ccs, single(raftpb.ConfChangeRemoveNode, r.IDs[0]))
	case OpReplace:
		ccs = append(ccs, single(raftpb.ConfChangeAddNode, r.IDs[1]), single(raftpb.ConfChangeRemoveNode, r.IDs[0]))
	case OpSwap:
		ccs = append(ccs, single(raftpb.ConfChangeAddNode, r.IDs[1]), single(raftpb.ConfChangeAddLearnerNode, r.IDs[0]))
	}

	ctx, err := Context{ChangeID: r.ChangeID, Members: p.Members}.Encode()
	if err != nil {
		return Plan{}, err
	}
	cc := &raftpb.ConfChangeV2{Changes: ccs, Context: ctx}
	if len(ccs) > 1 {
		cc.Transition = raftpb.ConfChangeTransitionJointExplicit.Enum()
	}
	p.Change = cc

	// Apply the change with etcd's own Changer, as raft will: the plan's
	// configurations are raft's, and a change raft would drop is an error.
	next, err := before.apply(cc)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: raft would refuse %s on %s: %v", ErrInvalidRequest, r, before, err)
	}
	switch {
	case r.Op == OpLeaveJoint:
		p.After = next
	case next.Joint():
		p.Joint = next
		if p.After, err = next.apply(LeaveJointChange(0)); err != nil {
			return Plan{}, fmt.Errorf("%w: raft would not leave %s: %v", ErrInvalidRequest, next, err)
		}
	default:
		p.After = next
	}
	p.Description = describe(p)
	return p, nil
}

// describe draws the plan: "<request>: <before> → [<joint> →] <after>".
func describe(p Plan) string {
	steps := []string{p.Before.String()}
	if p.EntersJoint() {
		steps = append(steps, p.Joint.String())
	}
	steps = append(steps, p.After.String())
	if p.Request.Op == OpUpdate && p.Before.Equal(p.After) {
		steps = steps[:1]
	}
	s := p.Request.String() + ": "
	for i, st := range slices.Compact(steps) {
		if i > 0 {
			s += " → "
		}
		s += st
	}
	return s
}

// LeaveJointChange returns the conf change that leaves a joint configuration
// entered with an explicit transition (raftpb: no changes, automatic
// transition), carrying changeID in its Context. Propose it once the change
// that entered the joint configuration is applied on the leader (raft drops
// it before that); a new leader proposes it after applying its whole log.
func LeaveJointChange(changeID uint64) *raftpb.ConfChangeV2 {
	ctx, _ := Context{ChangeID: changeID}.Encode() // cannot fail: no members
	return &raftpb.ConfChangeV2{Context: ctx}
}
