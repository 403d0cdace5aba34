package confchange

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs testdata/*.txt, one file per rule family. Run with
// -rewrite to regenerate the expected output after an intended change.
//
// Commands:
//
//	view [last=N] [leader=ID] [pending] [removed=(ID, …)]
//	<config line>
//	<member lines>          (see parseView)
//	settings [target-voters=N] [max-learners=N] [failover-after=D]
//	         [stabilization=D] [snapshot-count=N] [max-lag=N] [remove-dead-after=D]
//	set                     (input: member lines, as in view)
//	tick D                  (advance now by D, update ReadySince)
//	ready                   (readiness of every member)
//	check <request>         (every refusal)
//	plan <request>          (the plan or the refusals)
//	policy                  (the default policy's next request and its plan)
//	apply                   (apply the last plan's change to the view)
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var (
			v    View
			s    Settings
			last *Plan
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := make([]string, 0, len(d.CmdArgs))
			for _, a := range d.CmdArgs {
				args = append(args, a.String())
			}
			switch d.Cmd {
			case "view":
				var err error
				v, err = parseView(d.Input, func(v *View) {
					for _, a := range d.CmdArgs {
						switch a.Key {
						case "last":
							n, _ := strconv.ParseUint(a.Vals[0], 10, 64)
							v.LastIndex = n
							for id, pr := range v.Progress {
								pr.Match, pr.Next = n, n+1
								v.Progress[id] = pr
							}
						case "leader":
							n, _ := strconv.ParseUint(a.Vals[0], 10, 64)
							v.Leader = n
						case "pending":
							v.PendingChange = true
						case "removed":
							v.Removed = map[uint64]bool{}
							for _, x := range a.Vals {
								n, _ := strconv.ParseUint(strings.TrimSpace(x), 10, 64)
								v.Removed[n] = true
							}
						}
					}
				})
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				v.ReadySince = UpdateReadySince(v, s)
				last = nil
				return v.String() + "\n"
			case "settings":
				s = Settings{}
				for _, a := range d.CmdArgs {
					val := a.Vals[0]
					n, _ := strconv.Atoi(val)
					dur, _ := time.ParseDuration(val)
					switch a.Key {
					case "target-voters":
						s.TargetVoters = n
					case "max-learners":
						s.MaxLearners = n
					case "failover-after":
						s.FailoverAfter = dur
					case "stabilization":
						s.Stabilization = dur
					case "snapshot-count":
						s.SnapshotCount = uint64(n)
					case "max-lag":
						s.MaxLag = uint64(n)
					case "remove-dead-after":
						s.RemoveDeadAfter = dur
					default:
						d.Fatalf(t, "unknown setting %s", a.Key)
					}
				}
				out := "given:     " + s.String() + "\neffective: " + s.WithDefaults().String()
				if err := s.Validate(); err != nil {
					out += "\n" + strings.ReplaceAll(err.Error(), "\n", "\n") + "\n(code " + Code(err) + ")"
				}
				return out + "\n"
			case "set":
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					if err := setMember(&v, line); err != nil {
						return "error: " + err.Error() + "\n"
					}
				}
				v.ReadySince = UpdateReadySince(v, s)
				return v.String() + "\n"
			case "tick":
				dur, err := time.ParseDuration(d.CmdArgs[0].Key)
				if err != nil {
					d.Fatalf(t, "tick: %v", err)
				}
				v.Now = v.Now.Add(dur)
				for id, pr := range v.Progress {
					if pr.RecentActive {
						pr.LastContact = v.Now
						v.Progress[id] = pr
					}
				}
				v.ReadySince = UpdateReadySince(v, s)
				return readyString(v, s)
			case "ready":
				return readyString(v, s)
			case "check":
				r, err := parseRequest(args)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				return refusalsString(Check(v, s, r)) + "\n"
			case "plan":
				r, err := parseRequest(args)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				return planString(v, s, r, &last)
			case "policy":
				r, ok := DefaultPolicy{Settings: s}.Next(v)
				if !ok {
					last = nil
					return "no change\n"
				}
				return "request: " + r.String() + "\n" + planString(v, s, r, &last)
			case "apply":
				if last == nil || last.Change == nil {
					return "nothing to apply\n"
				}
				if last.EntersJoint() {
					v.Config = last.Joint
				} else {
					v.Config = last.After
				}
				for _, m := range last.Members {
					v.Members[m.ID] = m
				}
				for _, id := range last.Before.IDs() {
					if !v.Config.Contains(id) {
						if v.Removed == nil {
							v.Removed = map[uint64]bool{}
						}
						v.Removed[id] = true
						delete(v.Progress, id)
						delete(v.Members, id)
					}
				}
				v.PendingChange = false
				v.ReadySince = UpdateReadySince(v, s)
				last = nil
				return v.String() + "\n"
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func planString(v View, s Settings, r Request, last **Plan) string {
	p, err := PlanChange(v, s, r)
	if err != nil {
		*last = nil
		var b strings.Builder
		b.WriteString("refused (" + Code(err) + "):\n")
		b.WriteString(refusalsString(Check(v, s, r)))
		return b.String() + "\n"
	}
	*last = &p
	return p.Description + "\n" + changeString(p.Change) + "\n"
}

func readyString(v View, s Settings) string {
	var b strings.Builder
	for _, id := range v.Config.IDs() {
		r := Readiness(v, s, id)
		word := "not ready"
		if r.Ready() {
			word = "ready"
		}
		fmt.Fprintf(&b, "%d %s: %s: %s\n", id, v.Config.Role(id), word, r)
	}
	return b.String()
}
