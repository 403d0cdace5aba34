package confchange

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// t0 is "now" in every test view.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// parseConfig parses Config.String's output.
func parseConfig(s string) (Config, error) {
	// Keep "(1 2 3)" in one field.
	var fixed strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ' ' && depth > 0:
			r = ','
		}
		fixed.WriteRune(r)
	}
	var c Config
	for _, f := range strings.Fields(fixed.String()) {
		k, val, _ := strings.Cut(f, "=")
		ids := func(v string) ([]uint64, error) {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "("), ")")
			var out []uint64
			for _, x := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' }) {
				id, err := strconv.ParseUint(x, 10, 64)
				if err != nil {
					return nil, err
				}
				out = append(out, id)
			}
			return out, nil
		}
		var err error
		switch k {
		case "voters":
			in, out, joint := strings.Cut(val, "&&")
			if c.Voters, err = ids(in); err == nil && joint {
				c.VotersOutgoing, err = ids(out)
			}
		case "learners":
			c.Learners, err = ids(val)
		case "learners_next":
			c.LearnersNext, err = ids(val)
		case "autoleave":
			c.AutoLeave = true
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return Config{}, fmt.Errorf("config %q: %w", s, err)
		}
	}
	return c.Normalize(), nil
}

// parseView builds a view from text. The first line is the configuration
// (Config.String's syntax, a space inside parens allowed as ','); then one
// line per member to change from the defaults:
//
//	<id> [down] [lag=N] [probe] [snapshot=IDX] [contact=D] [ready=D]
//	     [addr=HOST:PORT] [readonly] [meta=K:V] [no-progress] [no-record]
//
// Defaults: leader 1, last index 1000, every member active, replicating,
// caught up, heard from now, ready for an hour, with record
// 10.0.0.<id>:7001. contact=D and ready=D are "D ago". A down member has no
// known contact unless contact= is given.
func parseView(text string, opts ...func(*View)) (View, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	cfg, err := parseConfig(lines[0])
	if err != nil {
		return View{}, err
	}
	v := View{
		Config: cfg, Leader: 1, LastIndex: 1000, Now: t0,
		Members: map[uint64]Member{}, Progress: map[uint64]Progress{}, ReadySince: map[uint64]time.Time{},
	}
	for _, id := range cfg.IDs() {
		v.Members[id] = Member{ID: id, PeerAddr: "10.0.0." + strconv.FormatUint(id, 10) + ":7001"}
		v.Progress[id] = Progress{Match: 1000, Next: 1001, State: StateReplicate, RecentActive: true, LastContact: t0}
		v.ReadySince[id] = t0.Add(-time.Hour)
	}
	for _, o := range opts {
		o(&v)
	}
	for _, line := range lines[1:] {
		if err := setMember(&v, line); err != nil {
			return View{}, err
		}
	}
	v.ReadySince = UpdateReadySince(v, Settings{})
	return v, nil
}

// setMember applies one member line to v.
func setMember(v *View, line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	id, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return fmt.Errorf("line %q: %w", line, err)
	}
	pr, m := v.Progress[id], v.Members[id]
	if _, ok := v.Progress[id]; !ok {
		pr = Progress{Match: v.LastIndex, Next: v.LastIndex + 1, State: StateReplicate, RecentActive: true, LastContact: v.Now}
	}
	m.ID = id
	drop, dropRecord := false, false
	for _, tok := range f[1:] {
		k, val, _ := strings.Cut(tok, "=")
		dur := func() time.Duration {
			d, e := time.ParseDuration(val)
			if e != nil {
				err = e
			}
			return d
		}
		num := func() uint64 {
			n, e := strconv.ParseUint(val, 10, 64)
			if e != nil {
				err = e
			}
			return n
		}
		switch k {
		case "down":
			pr.RecentActive, pr.LastContact = false, time.Time{}
		case "up":
			pr.RecentActive, pr.LastContact = true, v.Now
		case "unheard":
			pr.RecentActive, pr.Unheard = false, true
		case "refused":
			pr.RecentActive, pr.Refused = false, val
		case "lag":
			n := num()
			pr.Match = v.LastIndex - min(n, v.LastIndex)
			pr.Next = pr.Match + 1
		case "probe":
			pr.State = StateProbe
		case "replicate":
			pr.State, pr.PendingSnapshot = StateReplicate, 0
		case "snapshot":
			pr.State, pr.PendingSnapshot = StateSnapshot, num()
		case "contact":
			pr.LastContact = v.Now.Add(-dur())
		case "ready":
			v.ReadySince[id] = v.Now.Add(-dur())
		case "not-ready-yet":
			delete(v.ReadySince, id)
		case "addr":
			m.PeerAddr = val
		case "readonly":
			m.ReadOnly = true
		case "meta":
			mk, mv, _ := strings.Cut(val, ":")
			if m.Metadata == nil {
				m.Metadata = map[string]string{}
			}
			m.Metadata[mk] = mv
		case "no-progress":
			drop = true
		case "no-record":
			dropRecord = true
		default:
			return fmt.Errorf("line %q: unknown token %q", line, tok)
		}
	}
	if err != nil {
		return fmt.Errorf("line %q: %w", line, err)
	}
	v.Progress[id], v.Members[id] = pr, m
	if drop {
		delete(v.Progress, id)
	}
	if dropRecord {
		delete(v.Members, id)
	}
	return nil
}

func mustView(t testing.TB, text string, opts ...func(*View)) View {
	t.Helper()
	v, err := parseView(text, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// parseRequest parses "promote 4 5", "swap 3 4", "add-learner id=6
// addr=h:1 readonly meta=k:v", "leave-joint", "transfer-leader 2" and
// "change-id=7" anywhere.
func parseRequest(words []string) (Request, error) {
	if len(words) == 0 {
		return Request{}, fmt.Errorf("no request")
	}
	var r Request
	for op := OpAddLearner; op <= OpTransferLeader; op++ {
		if op.String() == words[0] {
			r.Op = op
		}
	}
	if r.Op == opInvalid {
		r.Op = Op(99)
	}
	for _, w := range words[1:] {
		k, val, _ := strings.Cut(w, "=")
		switch k {
		case "id":
			id, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return r, err
			}
			r.Member.ID = id
		case "addr":
			r.Member.PeerAddr = val
		case "readonly":
			r.Member.ReadOnly = true
		case "meta":
			mk, mv, _ := strings.Cut(val, ":")
			if r.Member.Metadata == nil {
				r.Member.Metadata = map[string]string{}
			}
			r.Member.Metadata[mk] = mv
		case "change-id":
			id, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return r, err
			}
			r.ChangeID = id
		default:
			id, err := strconv.ParseUint(w, 10, 64)
			if err != nil {
				return r, fmt.Errorf("request word %q: %w", w, err)
			}
			r.IDs = append(r.IDs, id)
		}
	}
	return r, nil
}

// refusalsString prints one "code: message" line per refusal, or "ok".
func refusalsString(rs []*Refusal) string {
	if len(rs) == 0 {
		return "ok"
	}
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r.Code() + ": " + r.Error())
	}
	return b.String()
}

// changeString prints a ConfChangeV2 as etcd's test syntax plus the
// transition and decoded context.
func changeString(cc *raftpb.ConfChangeV2) string {
	if cc == nil {
		return "no conf change"
	}
	s := "changes=[" + raftpb.ConfChangesToString(cc.GetChanges()) + "]"
	if cc.Transition != nil {
		s += " transition=" + cc.GetTransition().String()
	}
	if cc.LeaveJoint() {
		s += " (leave-joint)"
	}
	ctx, err := DecodeContext(cc.GetContext())
	if err != nil {
		return s + " context=" + err.Error()
	}
	s += " change-id=" + strconv.FormatUint(ctx.ChangeID, 10)
	for _, m := range ctx.Members {
		s += " record=" + strings.ReplaceAll(m.String(), " ", ",")
	}
	return s
}

func sortedCodes(rs []*Refusal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Code())
	}
	slices.Sort(out)
	return slices.Compact(out)
}
