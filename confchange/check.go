package confchange

import (
	"errors"
	"slices"
	"strconv"
)

// Check returns every reason to refuse r in the view v, in a fixed order, or
// nil when r may go ahead. Nothing is proposed; the example server's dry run
// lists these. The rules are in the package documentation.
func Check(v View, s Settings, r Request) []*Refusal {
	c := &checker{v: v, s: s.WithDefaults()}
	c.check(r)
	return c.out
}

type checker struct {
	v   View
	s   Settings
	out []*Refusal
}

func (c *checker) refuse(err error, id uint64, detail string) *Refusal {
	r := &Refusal{Err: err, ID: id, Detail: detail}
	c.out = append(c.out, r)
	return r
}

// next is what a request would do to the incoming voters: the voters after
// it, the member counted as down (a directly added voter), and whether the
// change goes through a joint configuration.
type next struct {
	voters []uint64
	down   uint64
	joint  bool
}

func (c *checker) check(r Request) {
	cfg := c.v.Config.Normalize()
	c.v.Config = cfg
	if err := cfg.validate(); err != nil {
		c.refuse(ErrInvalidRequest, 0, "the view's "+err.Error())
		return
	}
	if !c.shape(r) {
		return
	}
	n := next{voters: cfg.Voters}
	switch r.Op {
	case OpAddLearner, OpAddVoter:
		n = c.add(r)
	case OpPromote:
		n = c.promote(dedup(r.IDs))
	case OpDemote:
		n = c.demote(dedup(r.IDs))
	case OpRemove:
		n = c.remove(r.IDs[0])
	case OpReplace, OpSwap:
		n = c.replace(r.IDs[0], r.IDs[1])
	case OpUpdate:
		c.update(r.Member)
	case OpLeaveJoint:
		if !cfg.Joint() {
			c.refuse(ErrInvalidRequest, 0, "the configuration "+cfg.String()+" is not joint: there is nothing to leave")
		}
		n.voters = cfg.Voters
	case OpTransferLeader:
		c.transfer(r.IDs[0])
		return
	}
	if nv := len(normIDs(n.voters)); nv > MaxVoters && nv > len(cfg.Voters) {
		c.refuse(ErrTooManyVoters, 0, "the change would make "+strconv.Itoa(nv)+
			" voters, at most "+strconv.Itoa(MaxVoters))
	}
	c.inProgress(r.Op)
	c.quorum(r.Op, n)
}

// shape checks the request's form; false means nothing else can be checked.
func (c *checker) shape(r Request) bool {
	want := map[Op][2]int{ // how many IDs: min, max
		OpAddLearner: {0, 0}, OpAddVoter: {0, 0}, OpUpdate: {0, 0}, OpLeaveJoint: {0, 0},
		OpPromote: {1, MaxVoters}, OpDemote: {1, MaxVoters},
		OpRemove: {1, 1}, OpTransferLeader: {1, 1}, OpReplace: {2, 2}, OpSwap: {2, 2},
	}
	w, ok := want[r.Op]
	if !ok {
		c.refuse(ErrInvalidRequest, 0, "unknown op "+r.Op.String())
		return false
	}
	if len(r.IDs) < w[0] || len(r.IDs) > w[1] {
		c.refuse(ErrInvalidRequest, 0, r.Op.String()+" takes "+countWord(w)+", got "+strconv.Itoa(len(r.IDs)))
		return false
	}
	if len(dedup(r.IDs)) != len(r.IDs) {
		c.refuse(ErrInvalidRequest, 0, r.Op.String()+" names a member twice: "+idsString(r.IDs))
		if len(r.IDs) == 2 && (r.Op == OpReplace || r.Op == OpSwap) {
			return false
		}
	}
	return true
}

func countWord(w [2]int) string {
	switch {
	case w[1] == 0:
		return "no IDs"
	case w[0] == w[1]:
		return plural(w[0], "ID")
	}
	return strconv.Itoa(w[0]) + " to " + strconv.Itoa(w[1]) + " IDs"
}

func dedup(ids []uint64) []uint64 {
	var out []uint64
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// known refuses an ID that is not in the configuration and reports whether it
// is in it.
func (c *checker) known(id uint64) bool {
	switch {
	case id == 0:
		c.refuse(ErrInvalidMember, 0, "member ID 0 is reserved")
		return false
	case c.v.Config.Contains(id):
		return true
	case c.v.Removed[id]:
		c.refuse(ErrUnknownMember, id, memberDetail(id, "was removed from the cluster"))
	default:
		c.refuse(ErrUnknownMember, id, memberDetail(id, "is not in the configuration "+c.v.Config.String()))
	}
	return false
}

// isVoter reports whether id is a voter of the incoming configuration, and
// refuses it (as the wrong role) when it is not.
func (c *checker) isVoter(id uint64) bool {
	switch c.v.Config.Role(id) {
	case RoleVoter:
		return true
	case RoleLearner:
		c.refuse(ErrInvalidMember, id, memberDetail(id, "is a learner, not a voter"))
	default:
		c.refuse(ErrInvalidMember, id, memberDetail(id, "is leaving the configuration"))
	}
	return false
}

// promotable refuses id for every reason it may not become a voter, and
// reports whether it is a learner, i.e. whether the new configuration would
// have it as a voter (active or not) were the refusals lifted.
func (c *checker) promotable(id uint64) bool {
	if !c.known(id) {
		return false
	}
	switch c.v.Config.Role(id) {
	case RoleVoter:
		c.refuse(ErrInvalidMember, id, memberDetail(id, "is already a voter"))
		return false
	case RoleNone:
		c.refuse(ErrInvalidMember, id, memberDetail(id, "is leaving the configuration"))
		return false
	}
	if c.v.Members[id].ReadOnly {
		c.refuse(ErrMemberReadOnly, id, memberDetail(id, "is never promoted (update it without read-only first)"))
	}
	if rs := Readiness(c.v, c.s, id); !rs.Ready() {
		c.refuse(ErrLearnerNotReady, id, "member "+strconv.FormatUint(id, 10)+": "+rs.String()).Readiness = rs
	}
	return true
}

func (c *checker) add(r Request) next {
	m, cfg := r.Member, c.v.Config
	n := next{voters: cfg.Voters}
	for _, p := range m.problems() {
		c.refuse(ErrInvalidMember, m.ID, p)
	}
	if m.Incarnation != 0 {
		// A new member has no data yet: its incarnation is its own to
		// publish once it runs. One given here (a record copied from
		// another member) would make every peer refuse the real replica
		// as wiped.
		c.refuse(ErrInvalidMember, m.ID, memberDetail(m.ID, "is added with incarnation "+
			strconv.FormatUint(m.Incarnation, 16)+": a new member's incarnation is published by the member itself once it runs; leave Incarnation 0"))
	}
	switch {
	case m.ID == 0:
	case cfg.Contains(m.ID):
		c.refuse(ErrMemberExists, m.ID, memberDetail(m.ID, "is already a "+c.v.roleString(m.ID)))
	case c.v.Removed[m.ID]:
		c.refuse(ErrMemberExists, m.ID, memberDetail(m.ID, "was removed; IDs are never reused"))
	}
	c.addrInUse(m)
	if r.Op == OpAddLearner {
		if l := len(cfg.Learners) + len(cfg.LearnersNext); l >= c.s.MaxLearners {
			c.refuse(ErrTooManyLearners, m.ID, "the cluster has "+plural(l, "learner")+
				", at most "+strconv.Itoa(c.s.MaxLearners))
		}
		return n
	}
	if m.ReadOnly {
		c.refuse(ErrMemberReadOnly, m.ID, memberDetail(m.ID, "cannot be a voter"))
	}
	n.voters = append(slices.Clone(cfg.Voters), m.ID)
	n.down = m.ID
	return n
}

// addrInUse refuses m when another configuration member has its address.
func (c *checker) addrInUse(m Member) {
	if m.PeerAddr == "" {
		return
	}
	for _, id := range c.v.Config.IDs() {
		if o, ok := c.v.Members[id]; ok && id != m.ID && o.PeerAddr == m.PeerAddr {
			c.refuse(ErrMemberExists, m.ID, "peer address "+strconv.Quote(m.PeerAddr)+
				" is already used by member "+strconv.FormatUint(id, 10))
		}
	}
}

func (c *checker) promote(ids []uint64) next {
	n := next{voters: slices.Clone(c.v.Config.Voters)}
	k := 0
	for _, id := range ids {
		if c.promotable(id) {
			n.voters = append(n.voters, id)
			k++
		}
	}
	n.joint = k > 1
	return n
}

func (c *checker) demote(ids []uint64) next {
	n := next{voters: slices.Clone(c.v.Config.Voters)}
	k := 0
	for _, id := range ids {
		if c.known(id) && c.isVoter(id) {
			n.voters = slices.DeleteFunc(n.voters, func(x uint64) bool { return x == id })
			k++
		}
	}
	n.joint = k > 1
	return n
}

func (c *checker) remove(id uint64) next {
	n := next{voters: slices.Clone(c.v.Config.Voters)}
	if c.known(id) {
		n.voters = slices.DeleteFunc(n.voters, func(x uint64) bool { return x == id })
	}
	return n
}

func (c *checker) replace(old, new uint64) next {
	n := next{voters: slices.Clone(c.v.Config.Voters), joint: true}
	if c.known(old) && c.isVoter(old) {
		n.voters = slices.DeleteFunc(n.voters, func(x uint64) bool { return x == old })
	}
	if c.promotable(new) {
		n.voters = append(n.voters, new)
	}
	return n
}

func (c *checker) update(m Member) {
	if !c.known(m.ID) {
		return
	}
	for _, p := range m.problems() {
		c.refuse(ErrInvalidMember, m.ID, p)
	}
	if cur := c.v.Members[m.ID].Incarnation; m.Incarnation != 0 && cur != 0 && m.Incarnation != cur {
		c.refuse(ErrInvalidMember, m.ID, memberDetail(m.ID, "is recorded with incarnation "+
			strconv.FormatUint(cur, 16)+", not "+strconv.FormatUint(m.Incarnation, 16)+
			": the data it runs from is not the data it had (it was lost and started afresh); remove it and add a new member under a new ID"))
	}
	if m.ReadOnly && !c.v.Members[m.ID].ReadOnly && (slices.Contains(c.v.Config.Voters, m.ID) || slices.Contains(c.v.Config.VotersOutgoing, m.ID)) {
		c.refuse(ErrMemberReadOnly, m.ID, memberDetail(m.ID, "is a voter: a voter cannot be read-only (demote it first)"))
	}
	c.addrInUse(m)
}

func (c *checker) transfer(id uint64) {
	if !c.known(id) {
		return
	}
	var ref *Refusal
	if errors.As(c.v.Config.CanLead(id), &ref) {
		c.refuse(ref.Err, id, ref.Detail)
	}
}

func (c *checker) inProgress(op Op) {
	if c.v.PendingChange {
		c.refuse(ErrChangeInProgress, 0, "the last one proposed is not applied yet")
	}
	if op != OpLeaveJoint && c.v.Config.Joint() {
		c.refuse(ErrChangeInProgress, 0, "the configuration "+c.v.Config.String()+
			" is joint: it must be left first")
	}
}

// quorum refuses a change that starts without an active majority in the
// current configuration (both halves when joint), or whose joint or new
// configuration would lack one.
func (c *checker) quorum(op Op, n next) {
	cfg := c.v.Config
	for _, half := range [][]uint64{cfg.Voters, cfg.VotersOutgoing} {
		if len(half) == 0 {
			continue
		}
		if active, ok := c.v.majority(half, 0); !ok {
			q := Quorum{Phase: "current", Voters: cfg.VotersString(), Count: len(half), Active: active, Need: len(half)/2 + 1}
			what := "the current configuration " + cfg.VotersString()
			if cfg.Joint() {
				what += ": its half " + idList(half)
			}
			c.refuse(ErrQuorumAtRisk, 0, what+" has "+q.counts()+": nothing can commit").Quorum = q
			break
		}
	}
	if op == OpLeaveJoint {
		return
	}
	nv := normIDs(n.voters)
	if slices.Equal(nv, cfg.Voters) {
		return
	}
	if len(nv) == 0 {
		c.refuse(ErrQuorumAtRisk, 0, "the new configuration would have no voters").Quorum = Quorum{Phase: "new", Voters: "()"}
		return
	}
	active, ok := c.v.majority(nv, n.down)
	if ok {
		return
	}
	q := Quorum{Phase: "new", Voters: idList(nv), Count: len(nv), Active: active, Need: len(nv)/2 + 1}
	what := "the new configuration " + q.Voters
	if n.joint {
		q.Phase, q.Voters = "joint", idList(nv)+"&&"+idList(cfg.Voters)
		what = "the joint configuration " + q.Voters + ": its incoming half " + idList(nv)
	}
	detail := what + " would have " + q.counts()
	if n.down != 0 {
		detail += " (member " + strconv.FormatUint(n.down, 10) + " counted as down until it starts)"
	}
	c.refuse(ErrQuorumAtRisk, 0, detail).Quorum = q
}

// counts prints "1 of 3 voters active, needs 2".
func (q Quorum) counts() string {
	return strconv.Itoa(q.Active) + " of " + strconv.Itoa(q.Count) + " voters active, needs " + strconv.Itoa(q.Need)
}

// plural prints "1 learner", "2 learners".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
