package confchange

import (
	"strconv"
	"strings"
)

// Op is what a Request asks for.
type Op uint8

const (
	opInvalid Op = iota
	// OpAddLearner adds Member as a learner (the default way to add).
	OpAddLearner
	// OpAddVoter adds Member directly as a voter: an explicit opt-in,
	// allowed only when the cluster keeps an active majority counting the
	// new member as down.
	OpAddVoter
	// OpPromote makes the learners IDs voters (a joint change for several).
	OpPromote
	// OpDemote makes the voters IDs learners (a joint change for several).
	OpDemote
	// OpRemove removes the member IDs[0], voter or learner.
	OpRemove
	// OpReplace removes voter IDs[0] and promotes learner IDs[1], in one
	// joint change.
	OpReplace
	// OpSwap demotes voter IDs[0] to a learner and promotes learner IDs[1],
	// in one joint change (standby failover).
	OpSwap
	// OpUpdate replaces the record of the existing member Member.ID (its peer
	// address or metadata).
	OpUpdate
	// OpLeaveJoint leaves the current joint configuration.
	OpLeaveJoint
	// OpTransferLeader checks a leadership transfer to IDs[0]; its plan has
	// no conf change.
	OpTransferLeader
)

var opNames = [...]string{
	opInvalid:        "invalid",
	OpAddLearner:     "add-learner",
	OpAddVoter:       "add-voter",
	OpPromote:        "promote",
	OpDemote:         "demote",
	OpRemove:         "remove",
	OpReplace:        "replace",
	OpSwap:           "swap",
	OpUpdate:         "update",
	OpLeaveJoint:     "leave-joint",
	OpTransferLeader: "transfer-leader",
}

// String returns the op's kebab-case name, e.g. "add-learner".
func (o Op) String() string {
	if int(o) < len(opNames) && o != opInvalid {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Request is one membership change to check and plan. Build it with the
// constructors (AddLearner, Promote, …) or as a literal.
type Request struct {
	Op Op
	// Member is the record for OpAddLearner, OpAddVoter and OpUpdate.
	Member Member
	// IDs are the members concerned: one or more for OpPromote and
	// OpDemote; one for OpRemove and OpTransferLeader; two for OpReplace and
	// OpSwap (the voter that leaves its seat, then the learner that takes it).
	IDs []uint64
	// ChangeID is the node's ID for this change. It is carried in the
	// ConfChangeV2's Context so the node can tell whether raft appended it.
	ChangeID uint64
}

// AddLearner asks to add m as a learner.
func AddLearner(m Member) Request { return Request{Op: OpAddLearner, Member: m} }

// AddVoter asks to add m directly as a voter (checked opt-in).
func AddVoter(m Member) Request { return Request{Op: OpAddVoter, Member: m} }

// Promote asks to make the learners ids voters.
func Promote(ids ...uint64) Request { return Request{Op: OpPromote, IDs: ids} }

// Demote asks to make the voters ids learners.
func Demote(ids ...uint64) Request { return Request{Op: OpDemote, IDs: ids} }

// Remove asks to remove member id.
func Remove(id uint64) Request { return Request{Op: OpRemove, IDs: []uint64{id}} }

// Replace asks to remove voter old and promote learner new, at once.
func Replace(old, new uint64) Request { return Request{Op: OpReplace, IDs: []uint64{old, new}} }

// Swap asks to demote voter old and promote learner new, at once.
func Swap(old, new uint64) Request { return Request{Op: OpSwap, IDs: []uint64{old, new}} }

// UpdateMember asks to replace the record of member m.ID.
func UpdateMember(m Member) Request { return Request{Op: OpUpdate, Member: m} }

// LeaveJoint asks to leave the current joint configuration.
func LeaveJoint() Request { return Request{Op: OpLeaveJoint} }

// TransferLeader asks whether leadership may move to id.
func TransferLeader(id uint64) Request { return Request{Op: OpTransferLeader, IDs: []uint64{id}} }

// String draws the request, e.g. "promote 4 5", "swap 3 for 4",
// "add-learner 4@10.0.0.4:7001".
func (r Request) String() string {
	var b strings.Builder
	b.WriteString(r.Op.String())
	switch r.Op {
	case OpAddLearner, OpAddVoter, OpUpdate:
		b.WriteString(" " + r.Member.String())
	case OpReplace, OpSwap:
		if len(r.IDs) == 2 {
			word := " by "
			if r.Op == OpSwap {
				word = " for "
			}
			b.WriteString(" " + strconv.FormatUint(r.IDs[0], 10) + word + strconv.FormatUint(r.IDs[1], 10))
			break
		}
		b.WriteString(" " + idsString(r.IDs))
	default:
		if len(r.IDs) > 0 {
			b.WriteString(" " + idsString(r.IDs))
		}
	}
	return b.String()
}

func idsString(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, " ")
}
