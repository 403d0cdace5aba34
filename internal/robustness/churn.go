package robustness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/understudy-raft/understudy/confchange"
)

// churn injects a membership change.
func (n *nemesis) churn(kind string) string {
	l := n.leader()
	if l == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := l.Node.Status(ctx)
	if err != nil {
		return ""
	}
	outcome := func(what string, err error) string {
		if err != nil {
			return fmt.Sprintf("%s refused (%s)", what, reason(err))
		}
		n.changes++
		return what
	}
	switch kind {
	case AddLearner:
		id := n.nextID
		err := l.Node.AddLearner(ctx, n.c.Record(id))
		if err == nil {
			n.nextID++
			n.c.Join(id)
		}
		return outcome(fmt.Sprintf("add learner %d", id), err)
	case RemoveLearner:
		ls := slices.DeleteFunc(slices.Clone(st.Learners), func(id uint64) bool { return id == n.down })
		if len(ls) == 0 {
			return ""
		}
		id := ls[n.rng.Intn(len(ls))]
		err := l.Node.RemoveMember(ctx, id)
		if err == nil {
			n.removed[id] = true
			n.c.Crash(id) // it stops itself on applying its removal; make sure
		}
		return outcome(fmt.Sprintf("remove learner %d", id), err)
	case Promote:
		if len(st.Learners) == 0 {
			return ""
		}
		id := st.Learners[n.rng.Intn(len(st.Learners))]
		_, err := l.Node.ChangeMembership(ctx, confchange.Promote(id))
		return outcome(fmt.Sprintf("promote %d", id), err)
	case Demote, RemoveVoter:
		vs := slices.DeleteFunc(slices.Clone(st.Voters), func(id uint64) bool { return id == l.ID })
		if len(vs) == 0 {
			return ""
		}
		id := vs[n.rng.Intn(len(vs))]
		if kind == Demote {
			_, err := l.Node.ChangeMembership(ctx, confchange.Demote(id))
			return outcome(fmt.Sprintf("demote %d", id), err)
		}
		err := l.Node.RemoveMember(ctx, id)
		if err == nil && id != n.down {
			n.removed[id] = true
			n.c.Crash(id)
		} else if err == nil {
			n.removed[id], n.down = true, 0
		}
		return outcome(fmt.Sprintf("remove voter %d", id), err)
	case Replace:
		vs := slices.DeleteFunc(slices.Clone(st.Voters), func(id uint64) bool { return id == l.ID })
		if len(vs) == 0 || len(st.Learners) == 0 {
			return ""
		}
		req := confchange.Swap(vs[n.rng.Intn(len(vs))], st.Learners[n.rng.Intn(len(st.Learners))])
		if n.down == 0 && n.rng.Intn(2) == 0 {
			// The leader crashes once it entered the joint configuration:
			// the next leader must leave it.
			go func() { _, _ = l.Node.ChangeMembership(ctx, req) }()
			for range 100 {
				if st, err := l.Node.Status(ctx); err != nil || st.Joint() {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			n.markDown(l.ID)
			n.c.Crash(l.ID)
			n.changes++
			return fmt.Sprintf("%s, crash leader %d mid-change", req, l.ID)
		}
		_, err := l.Node.ChangeMembership(ctx, req)
		return outcome(req.String(), err)
	case Transfer:
		vs := slices.DeleteFunc(slices.Clone(st.Voters), func(id uint64) bool { return id == l.ID })
		if len(vs) == 0 {
			return ""
		}
		id := vs[n.rng.Intn(len(vs))]
		return outcome(fmt.Sprintf("transfer leadership %d → %d", l.ID, id), l.Node.TransferLeadership(ctx, id))
	case Target:
		cs := l.Node.Settings()
		choices := slices.DeleteFunc([]int{1, 3, 5}, func(v int) bool {
			return v == cs.TargetVoters || v > len(st.Voters)+len(st.Learners)
		})
		if len(choices) == 0 {
			return ""
		}
		target := choices[n.rng.Intn(len(choices))]
		cs.TargetVoters = target
		err := l.Node.UpdateSettings(ctx, cs)
		what := outcome(fmt.Sprintf("target voters %d", target), err)
		if err == nil && n.down == 0 && n.rng.Intn(3) == 0 {
			// The leader crashes in the middle of the step.
			time.Sleep(time.Duration(n.rng.Intn(30)) * time.Millisecond)
			n.markDown(l.ID)
			n.c.Crash(l.ID)
			what += fmt.Sprintf(", crash leader %d mid-step", l.ID)
		}
		return what
	}
	return ""
}

// reason is a refusal's stable code, or the error.
func reason(err error) string {
	if c := confchange.Code(err); c != "" {
		return c
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return err.Error()
}
