package confchange

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/quorum"
)

// chooser makes the random choices of the generators: from a PRNG in the
// quick tests, from the fuzzer's bytes in the fuzz targets (so the fuzzer's
// coverage guidance steers the views).
type chooser interface{ Intn(n int) int }

type byteChooser struct{ b []byte }

func (c *byteChooser) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	if len(c.b) == 0 {
		return 0
	}
	x := int(c.b[0])
	c.b = c.b[1:]
	if n > 256 && len(c.b) > 0 {
		x = x<<8 | int(c.b[0])
		c.b = c.b[1:]
	}
	return x % n
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	return c.r.IntN(n)
}

// genView makes a random view over IDs 1–12: usually valid, sometimes joint,
// sometimes invalid, with random health, lag, replication state, readiness
// times, records, pending changes and removed IDs.
func genView(c chooser) View {
	v := View{
		Leader: 1, LastIndex: uint64(1000 + c.Intn(5000)), Now: t0,
		Members: map[uint64]Member{}, Progress: map[uint64]Progress{}, ReadySince: map[uint64]time.Time{},
	}
	ids := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	for i := len(ids) - 1; i > 0; i-- {
		j := c.Intn(i + 1)
		ids[i], ids[j] = ids[j], ids[i]
	}
	nv := 1 + c.Intn(MaxVoters+1)
	nl := c.Intn(5)
	cfg := Config{Voters: slices.Clone(ids[:nv]), Learners: slices.Clone(ids[nv:min(nv+nl, len(ids))])}
	switch c.Intn(8) {
	case 0: // joint: replace or demote some voters
		out := slices.Clone(cfg.Voters)
		k := 1 + c.Intn(2)
		if k < len(cfg.Voters) {
			cfg.Voters = cfg.Voters[k:]
			if c.Intn(2) == 0 {
				cfg.LearnersNext = out[:k]
			}
		}
		if len(cfg.Learners) > 0 && c.Intn(2) == 0 {
			cfg.Voters = append(cfg.Voters, cfg.Learners[0])
			cfg.Learners = cfg.Learners[1:]
		}
		cfg.VotersOutgoing = out
		cfg.AutoLeave = c.Intn(4) == 0
	case 1: // invalid
		if len(cfg.Learners) > 0 {
			cfg.Voters = append(cfg.Voters, cfg.Learners[0])
		} else {
			cfg.LearnersNext = []uint64{ids[11]}
		}
	}
	v.Config = cfg.Normalize()
	if c.Intn(10) == 0 {
		v.Leader = ids[c.Intn(len(ids))]
	} else {
		v.Leader = v.Config.Voters[c.Intn(len(v.Config.Voters))]
	}
	for _, id := range ids {
		if c.Intn(12) != 0 {
			m := Member{ID: id, PeerAddr: "10.0.0." + itoa(id) + ":7001", ReadOnly: c.Intn(8) == 0}
			if c.Intn(10) == 0 {
				m.PeerAddr = "10.0.0." + itoa(1+uint64(c.Intn(12))) + ":7001" // maybe a duplicate
			}
			v.Members[id] = m
		}
		if !v.Config.Contains(id) && c.Intn(3) == 0 {
			if v.Removed == nil {
				v.Removed = map[uint64]bool{}
			}
			v.Removed[id] = true
		}
		if c.Intn(10) == 0 {
			continue // no progress
		}
		lag := uint64(0)
		switch c.Intn(4) {
		case 0:
			lag = uint64(c.Intn(int(v.LastIndex)))
		case 1:
			lag = uint64(c.Intn(20))
		}
		pr := Progress{Match: v.LastIndex - lag, Next: v.LastIndex - lag + 1, State: StateReplicate,
			RecentActive: c.Intn(4) != 0}
		switch c.Intn(8) {
		case 0:
			pr.State = StateProbe
		case 1:
			pr.State, pr.PendingSnapshot = StateSnapshot, uint64(c.Intn(1000))
		}
		if c.Intn(6) != 0 {
			pr.LastContact = t0.Add(-time.Duration(c.Intn(120)) * time.Second)
		}
		v.Progress[id] = pr
		if c.Intn(5) != 0 {
			v.ReadySince[id] = t0.Add(-time.Duration(c.Intn(30)) * time.Second)
		}
	}
	v.PendingChange = c.Intn(8) == 0
	return v
}

// genRequest makes a random request, mostly about IDs in the view.
func genRequest(c chooser, v View) Request {
	id := func() uint64 {
		if c.Intn(10) == 0 {
			return uint64(c.Intn(15))
		}
		all := v.Config.IDs()
		return all[c.Intn(len(all))]
	}
	pick := func(from []uint64) uint64 {
		if len(from) == 0 || c.Intn(4) == 0 {
			return id()
		}
		return from[c.Intn(len(from))]
	}
	voter := func() uint64 { return pick(v.Config.Voters) }
	learner := func() uint64 { return pick(v.Config.Learners) }
	ids := func(n int, one func() uint64) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = one()
		}
		return out
	}
	m := Member{ID: uint64(c.Intn(15)), PeerAddr: "10.0.1." + itoa(uint64(c.Intn(15))) + ":7001", ReadOnly: c.Intn(6) == 0}
	switch c.Intn(10) {
	case 0:
		m.PeerAddr = "10.0.0." + itoa(uint64(c.Intn(13))) + ":7001"
	case 1:
		m.PeerAddr = []string{"", "h", ":1", "[::1]:2", "h:0", "x:99999"}[c.Intn(6)]
	case 2:
		m.Metadata = map[string]string{"client_addr": "h:1"}
	}
	var r Request
	switch c.Intn(12) {
	case 0:
		r = AddLearner(m)
	case 1:
		r = AddVoter(m)
	case 2, 3:
		r = Promote(ids(1+c.Intn(3), learner)...)
	case 4:
		r = Demote(ids(1+c.Intn(3), voter)...)
	case 5:
		r = Remove(id())
	case 6:
		r = Replace(voter(), learner())
	case 7:
		r = Swap(voter(), learner())
	case 8:
		m.ID = id()
		r = UpdateMember(m)
	case 9:
		r = LeaveJoint()
	case 10:
		r = TransferLeader(id())
	default:
		r = Request{Op: Op(c.Intn(14)), IDs: ids(c.Intn(4), id)}
	}
	r.ChangeID = uint64(c.Intn(100))
	return r
}

func genSettings(c chooser) Settings {
	return Settings{
		TargetVoters:    []int{0, 1, 3, 5, 7, 9}[c.Intn(6)],
		MaxLearners:     c.Intn(4),
		FailoverAfter:   time.Duration(c.Intn(3)) * 30 * time.Second,
		Stabilization:   time.Duration(c.Intn(3)) * 10 * time.Second,
		MaxLag:          uint64(c.Intn(3)) * 500,
		RemoveDeadAfter: time.Duration(c.Intn(3)) * 45 * time.Second,
	}
}

// TestQuickMajority compares the active-majority count with brute force and
// with etcd's own joint vote counting.
func TestQuickMajority(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		v := genView(randChooser{r})
		voters := v.Config.Voters
		_, got := v.majority(voters, 0)
		want := naiveMajority(voters, func(id uint64) bool { return naiveActive(v, id) })
		if got != want {
			t.Fatalf("majority(%v) = %v, brute force %v\n%s", voters, got, want, v)
		}
		jc := quorum.JointConfig{quorum.MajorityConfig{}, quorum.MajorityConfig{}}
		votes := map[uint64]bool{}
		for _, id := range v.Config.Voters {
			jc[0][id] = struct{}{}
			votes[id] = naiveActive(v, id)
		}
		for _, id := range v.Config.VotersOutgoing {
			jc[1][id] = struct{}{}
			votes[id] = naiveActive(v, id)
		}
		_, in := v.majority(v.Config.Voters, 0)
		_, out := v.majority(v.Config.VotersOutgoing, 0)
		if etcd := jc.VoteResult(votes) == quorum.VoteWon; etcd != (in && (out || !v.Config.Joint())) {
			t.Fatalf("etcd says %v for %s\n%s", etcd, v.Config, v)
		}
	}
}

// TestQuickReadiness compares Readiness with the naive twin.
func TestQuickReadiness(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		c := randChooser{r}
		v, s := genView(c), genSettings(c).WithDefaults()
		for id := range uint64(14) {
			if got, want := Readiness(v, s, id).Ready(), naiveReady(v, s, id); got != want {
				t.Fatalf("Readiness(%d) = %v (%s), naive %v\n%s", id, got, Readiness(v, s, id), want, v)
			}
		}
	}
}

// TestQuickPlanner compares Check and PlanChange with the naive twin on
// random views and requests.
func TestQuickPlanner(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	accepted := map[Op]int{}
	for i := range 20000 {
		c := randChooser{r}
		v := genView(c)
		s := genSettings(c)
		req := genRequest(c, v)
		comparePlanner(t, v, s, req)
		if len(Check(v, s, req)) == 0 {
			accepted[req.Op]++
		}
		_ = i
	}
	for op := OpAddLearner; op <= OpTransferLeader; op++ {
		if accepted[op] < 20 {
			t.Errorf("only %d accepted %s requests: the generator is too harsh", accepted[op], op)
		}
	}
	t.Logf("accepted: %v", accepted)
}

func comparePlanner(t *testing.T, v View, s Settings, req Request) {
	t.Helper()
	got := Check(v, s, req)
	want := naive(v, s, req)
	gotCodes := set2{}
	for _, r := range got {
		gotCodes[r.Code()] = true
	}
	if !equalSet2(gotCodes, want.codes) {
		t.Fatalf("%s\nrequest %s\ngot:\n%s\nnaive: %v", v, req, refusalsString(got), want.codes)
	}
	p, err := PlanChange(v, s, req)
	if (err == nil) != (len(got) == 0) {
		t.Fatalf("PlanChange error %v with refusals %v", err, got)
	}
	if err != nil {
		return
	}
	if !p.After.Equal(want.after) {
		t.Fatalf("%s\nrequest %s\nafter %s, naive %s", v, req, p.After, want.after)
	}
	if !p.Joint.Equal(want.joint) {
		t.Fatalf("%s\nrequest %s\njoint %s, naive %s", v, req, p.Joint, want.joint)
	}
}

func equalSet2(a, b set2) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// checkPlanInvariants asserts what every emitted plan guarantees: an active
// majority in the old, joint and new configurations (a directly added voter
// counted as down), at most MaxVoters voters, and a change etcd accepts.
func checkPlanInvariants(t *testing.T, v View, p Plan) {
	t.Helper()
	if p.Request.Op == OpTransferLeader {
		return // no conf change
	}
	active := func(id uint64) bool {
		if p.Request.Op == OpAddVoter && id == p.Request.Member.ID {
			return false
		}
		return naiveActive(v, id)
	}
	check := func(what string, c Config) {
		if n := len(c.Voters); n > MaxVoters && n > len(p.Before.Voters) {
			t.Fatalf("%s %s has more than %d voters (plan %s)", what, c, MaxVoters, p)
		}
		if !naiveMajority(c.Voters, active) || (c.Joint() && !naiveMajority(c.VotersOutgoing, active)) {
			t.Fatalf("%s configuration %s lacks an active majority (plan %s)\n%s", what, c, p, v)
		}
	}
	check("old", p.Before)
	if p.EntersJoint() {
		check("joint", p.Joint)
	}
	check("new", p.After)
	if p.Change != nil {
		if _, err := p.Before.apply(p.Change); err != nil {
			t.Fatalf("etcd refuses %s: %v", p, err)
		}
	}
}

// TestQuickPlanInvariants: every plan the package emits, for a request or
// from the policy, keeps the invariants; the same input gives the same
// output.
func TestQuickPlanInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	plans, policyPlans := 0, 0
	for range 20000 {
		c := randChooser{r}
		v, s := genView(c), genSettings(c)
		req := genRequest(c, v)
		if p, err := PlanChange(v, s, req); err == nil {
			plans++
			checkPlanInvariants(t, v, p)
			checkDeterministic(t, v, s, req, p)
		}
		if req, ok := (DefaultPolicy{Settings: s}).Next(v); ok {
			policyPlans++
			p, err := PlanChange(v, s, req)
			if err != nil {
				t.Fatalf("policy asked for %s, refused: %v\n%s", req, err, v)
			}
			checkPlanInvariants(t, v, p)
			checkPolicyPlan(t, v, s, p)
		} else {
			checkPolicyIdle(t, v, s)
		}
		req1, ok1 := DefaultPolicy{Settings: s}.Next(v)
		req2, ok2 := DefaultPolicy{Settings: s}.Next(copyView(v))
		if ok1 != ok2 || req1.String() != req2.String() {
			t.Fatalf("policy not deterministic: %s / %s", req1, req2)
		}
	}
	if plans < 1000 || policyPlans < 500 {
		t.Fatalf("too few plans: %d requests, %d from the policy", plans, policyPlans)
	}
}

func checkDeterministic(t *testing.T, v View, s Settings, req Request, p Plan) {
	t.Helper()
	q, err := PlanChange(copyView(v), s, req)
	if err != nil || q.Description != p.Description {
		t.Fatalf("not deterministic: %q vs %q (%v)", p.Description, q.Description, err)
	}
	if p.Change != nil {
		a, _ := p.Change.AsV2(), q.Change.AsV2()
		if !bytes.Equal(a.GetContext(), q.Change.GetContext()) ||
			a.String() != q.Change.String() {
			t.Fatalf("not deterministic: %s vs %s", a, q.Change)
		}
	}
}

// checkPolicyPlan: the policy completes joint first, never grows past the
// target, and never leaves an avoidable even voter count.
func checkPolicyPlan(t *testing.T, v View, s Settings, p Plan) {
	t.Helper()
	d := s.WithDefaults()
	n, after := len(v.Config.Voters), len(p.After.Voters)
	if v.Config.Joint() {
		if p.Request.Op != OpLeaveJoint {
			t.Fatalf("joint config, policy did %s", p.Request)
		}
		return
	}
	if after > max(n, d.TargetVoters) {
		t.Fatalf("policy grew voters %d → %d past target %d", n, after, d.TargetVoters)
	}
	if after%2 == 0 && naivePolicyWantsOdd(v, s) {
		t.Fatalf("policy left an avoidable even count %d → %d: %s\n%s", n, after, p, v)
	}
	if v.PendingChange {
		t.Fatalf("policy acted while a change is pending")
	}
	if p.Request.Op == OpRemove {
		// The policy removes only the dead, and never one of the seats the
		// target needs: the voters and promotable learners left must fill
		// TargetVoters seats (a read-only learner is never a seat).
		seats := 0
		for _, id := range p.After.IDs() {
			if p.After.Role(id) == RoleVoter || !v.Members[id].ReadOnly {
				seats++
			}
		}
		gone := p.Request.IDs[0]
		if !v.Members[gone].ReadOnly && seats < d.TargetVoters {
			t.Fatalf("policy removed %d, leaving %d seats for a target of %d: %s\n%s", gone, seats, d.TargetVoters, p, v)
		}
		if d.RemoveDeadAfter == 0 {
			t.Fatalf("policy removed %d with dead-member cleanup off: %s\n%s", gone, p, v)
		}
	}
}

// checkPolicyIdle: when the policy does nothing, there was no urgent reason:
// a joint config with an active majority would have been left.
func checkPolicyIdle(t *testing.T, v View, s Settings) {
	t.Helper()
	if v.PendingChange || !naiveValid(v.Config.Normalize()) {
		return
	}
	if v.Config.Joint() && len(Check(v, s, LeaveJoint())) == 0 {
		t.Fatalf("policy did not leave a joint config it could leave\n%s", v)
	}
	d := s.WithDefaults()
	n := len(v.Config.Voters)
	if !v.Config.Joint() && n%2 == 0 && n < d.TargetVoters && naivePolicyWantsOdd(v, s) {
		// A ready standby existed; only a refused promotion excuses idling.
		for _, id := range v.Config.Learners {
			if !v.Members[id].ReadOnly && naiveReady(v, d, id) && len(Check(v, s, Promote(id))) == 0 {
				t.Fatalf("policy idle with an even count and ready %d\n%s", id, v)
			}
		}
	}
}

func copyView(v View) View {
	w := v
	w.Config = v.Config.Normalize()
	w.Members, w.Progress, w.ReadySince, w.Removed = map[uint64]Member{}, map[uint64]Progress{}, map[uint64]time.Time{}, nil
	// Insert in reverse order: map iteration must not matter.
	ids := make([]uint64, 0, 16)
	for id := range uint64(16) {
		ids = append(ids, 15-id)
	}
	for _, id := range ids {
		if m, ok := v.Members[id]; ok {
			w.Members[id] = m
		}
		if p, ok := v.Progress[id]; ok {
			w.Progress[id] = p
		}
		if r, ok := v.ReadySince[id]; ok {
			w.ReadySince[id] = r
		}
		if v.Removed[id] {
			if w.Removed == nil {
				w.Removed = map[uint64]bool{}
			}
			w.Removed[id] = true
		}
	}
	return w
}

// FuzzPlanner drives views, settings and requests from the fuzzer's bytes:
// no panic, the twin agrees, and the invariants hold.
func FuzzPlanner(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 20 {
		b := make([]byte, 96)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &byteChooser{b: b}
		v, s := genView(c), genSettings(c)
		req := genRequest(c, v)
		comparePlanner(t, v, s, req)
		if p, err := PlanChange(v, s, req); err == nil {
			checkPlanInvariants(t, v, p)
		}
		if req, ok := (DefaultPolicy{Settings: s}).Next(v); ok {
			p, err := PlanChange(v, s, req)
			if err != nil {
				t.Fatalf("policy asked for %s, refused: %v", req, err)
			}
			checkPlanInvariants(t, v, p)
			checkPolicyPlan(t, v, s, p)
		}
		_ = v.String()
		_ = UpdateReadySince(v, s)
	})
}

// FuzzNoPanic feeds raw, unvalidated input — any IDs, any op, any settings,
// any times — to every entry point.
func FuzzNoPanic(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{1}, []byte{}, []byte{}, uint8(3), uint64(4), uint64(5), int64(0), uint64(1000))
	f.Fuzz(func(t *testing.T, voters, out, learners, next []byte, op uint8, id1, id2 uint64, nowOff int64, last uint64) {
		ids := func(b []byte) []uint64 {
			var out []uint64
			for len(b) >= 1 {
				out = append(out, uint64(b[0]%16))
				b = b[1:]
			}
			return out
		}
		v := View{
			Config: Config{Voters: ids(voters), VotersOutgoing: ids(out), Learners: ids(learners), LearnersNext: ids(next)},
			Leader: id1 % 16, LastIndex: last, Now: t0.Add(time.Duration(nowOff)),
			Progress:   map[uint64]Progress{id1: {Match: id2, RecentActive: true, State: ReplState(op % 4)}, id2: {LastContact: t0}},
			Members:    map[uint64]Member{id2: {ID: id2, PeerAddr: string(voters)}},
			ReadySince: map[uint64]time.Time{id1: t0.Add(time.Duration(-nowOff))},
		}
		s := Settings{TargetVoters: int(int8(op)), MaxLearners: int(int8(op >> 2)), Stabilization: time.Duration(nowOff), MaxLag: id2}
		var idb [8]byte
		binary.LittleEndian.PutUint64(idb[:], id1)
		reqs := []Request{
			{Op: Op(op), IDs: []uint64{id1, id2}}, {Op: Op(op), IDs: []uint64{id1}}, {Op: Op(op)},
			{Op: Op(op % 12), Member: Member{ID: id1, PeerAddr: string(learners) + string(idb[:]), Metadata: map[string]string{string(next): ""}}},
		}
		for _, r := range reqs {
			_ = Check(v, s, r)
			if p, err := PlanChange(v, s, r); err == nil {
				_ = p.String()
			} else {
				_ = Code(err)
			}
			_ = r.String()
		}
		_, _ = DefaultPolicy{Settings: s}.Next(v)
		_ = Readiness(v, s, id1)
		_ = UpdateReadySince(v, s)
		_ = v.String()
		_ = s.Validate()
	})
}
