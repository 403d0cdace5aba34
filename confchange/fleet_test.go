package confchange

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// fleetView is 3 voters (1-3) and 24 standbys (4-27), every standby 40
// entries behind, with the member lines in extra.
func fleetView(t *testing.T, voters string, extra ...string) View {
	t.Helper()
	var learners []string
	lines := []string{""}
	for id := 4; id <= 27; id++ {
		learners = append(learners, fmt.Sprint(id))
		lines = append(lines, fmt.Sprintf("%d lag=40", id))
	}
	lines[0] = "voters=(" + voters + ") learners=(" + strings.Join(learners, " ") + ")"
	return mustView(t, strings.Join(append(lines, extra...), "\n"))
}

// TestDefaultPolicyAtFleetSize: with 24 standbys, failover takes the most
// caught-up ready standby (lowest ID among equals), never a read-only one,
// one still catching up or probing, one not yet stable; promotions keep
// the voter count odd.
func TestDefaultPolicyAtFleetSize(t *testing.T) {
	tests := []struct {
		name   string
		voters string
		extra  []string
		s      Settings
		want   string
	}{
		{name: "failover: the least lag", voters: "1 2 3", extra: []string{"3 down contact=1m", "19 lag=3", "11 lag=5"}, want: "swap 3 for 19"},
		{name: "failover: equal lag, lowest ID", voters: "1 2 3", extra: []string{"3 down contact=1m", "19 lag=3", "12 lag=3"}, want: "swap 3 for 12"},
		{name: "failover: never a read-only standby, however caught up", voters: "1 2 3",
			extra: []string{"3 down contact=1m", "7 lag=0 readonly", "8 lag=0 readonly", "20 lag=6"}, want: "swap 3 for 20"},
		{name: "failover: not one that probes", voters: "1 2 3", extra: []string{"3 down contact=1m", "9 lag=0 probe", "21 lag=6"}, want: "swap 3 for 21"},
		{name: "failover: not one too far behind", voters: "1 2 3", extra: []string{"3 down contact=1m", "9 lag=5000", "10 lag=5000 snapshot=10"}, want: "swap 3 for 4"},
		{name: "failover: not one that is not stable yet", voters: "1 2 3", extra: []string{"3 down contact=1m", "9 lag=0 ready=2s", "22 lag=1"}, want: "swap 3 for 22"},
		{name: "failover: not one out of contact", voters: "1 2 3", extra: []string{"3 down contact=1m", "9 lag=0 down contact=1m", "23 lag=1"}, want: "swap 3 for 23"},
		{name: "every standby read-only: no failover", voters: "1 2 3", extra: append(readOnly(4, 27), "3 down contact=1m"), want: ""},
		{name: "target 5: the two least behind at once", voters: "1 2 3", extra: []string{"26 lag=1", "5 lag=2", "4 lag=2 readonly"}, s: Settings{TargetVoters: 5}, want: "promote 26 5"},
		{name: "a voter removed: one promoted, the count odd again", voters: "1 2", extra: []string{"15 lag=0"}, want: "promote 15"},
		{name: "target reached: 24 standbys stay", voters: "1 2 3", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := fleetView(t, tt.voters, tt.extra...)
			v.ReadySince = UpdateReadySince(v, tt.s)
			for _, line := range tt.extra { // a stabilization under way outlives UpdateReadySince
				if f := strings.Fields(line); slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "ready=") }) {
					if err := setMember(&v, line); err != nil {
						t.Fatal(err)
					}
				}
			}
			r, ok := DefaultPolicy{Settings: tt.s}.Next(v)
			got := ""
			if ok {
				got = r.String()
				if rs := Check(v, tt.s, r); len(rs) != 0 {
					t.Fatalf("the policy asked for %s, which Check refuses: %s", got, refusalsString(rs))
				}
			}
			if got != tt.want {
				t.Fatalf("Next = %q, want %q", got, tt.want)
			}
		})
	}
}

func readOnly(from, to uint64) []string {
	var out []string
	for id := from; id <= to; id++ {
		out = append(out, fmt.Sprintf("%d readonly", id))
	}
	return out
}

// TestDefaultPolicyFleetWalk: from 3 voters and 24 standbys, raising the
// target to 9 and then losing voters one after another, every step the
// policy takes leaves an odd voter count, never seats a read-only
// standby, and fails each lost voter over to the least behind ready one.
func TestDefaultPolicyFleetWalk(t *testing.T) {
	extra := []string{"4 readonly lag=0", "5 readonly lag=0"}
	for id := 6; id <= 27; id++ {
		extra = append(extra, fmt.Sprintf("%d lag=%d", id, 100-id)) // the higher the ID, the less behind
	}
	v := fleetView(t, "1 2 3", extra...)
	s := Settings{TargetVoters: 9, MaxLearners: 64}
	apply := func(r Request) {
		cfg := v.Config
		switch r.Op {
		case OpPromote:
			for _, id := range r.IDs {
				cfg.Learners = slices.DeleteFunc(slices.Clone(cfg.Learners), func(x uint64) bool { return x == id })
				cfg.Voters = append(slices.Clone(cfg.Voters), id)
			}
		case OpSwap:
			lost, sb := r.IDs[0], r.IDs[1]
			cfg.Voters = slices.DeleteFunc(slices.Clone(cfg.Voters), func(x uint64) bool { return x == lost })
			cfg.Learners = slices.DeleteFunc(slices.Clone(cfg.Learners), func(x uint64) bool { return x == sb })
			cfg.Voters, cfg.Learners = append(cfg.Voters, sb), append(cfg.Learners, lost)
		default:
			t.Fatalf("unexpected request %s", r)
		}
		v.Config = cfg.Normalize()
	}
	step := func() (Request, bool) {
		v.ReadySince = UpdateReadySince(v, s)
		for id := range v.ReadySince {
			v.ReadySince[id] = v.Now.Add(-time.Hour) // stable
		}
		r, ok := DefaultPolicy{Settings: s}.Next(v)
		if ok {
			if rs := Check(v, s, r); len(rs) != 0 {
				t.Fatalf("%s refused: %s", r, refusalsString(rs))
			}
			apply(r)
			if n := len(v.Config.Voters); n%2 == 0 {
				t.Fatalf("after %s: %d voters", r, n)
			}
			for _, id := range v.Config.Voters {
				if v.Members[id].ReadOnly {
					t.Fatalf("after %s: read-only %d is a voter", r, id)
				}
			}
		}
		return r, ok
	}
	var steps []string
	for {
		r, ok := step()
		if !ok {
			break
		}
		steps = append(steps, r.String())
	}
	if want := []string{"promote 27 26", "promote 25 24", "promote 23 22"}; !slices.Equal(steps, want) {
		t.Fatalf("scaling to 9: %q, want %q", steps, want)
	}
	// Voters lost one after another: each is swapped for the least behind
	// ready standby left.
	for i, lost := range []uint64{27, 2, 24} {
		if err := setMember(&v, fmt.Sprintf("%d down contact=1m", lost)); err != nil {
			t.Fatal(err)
		}
		r, ok := step()
		if want := fmt.Sprintf("swap %d for %d", lost, 21-i); !ok || r.String() != want {
			t.Fatalf("voter %d lost: %s (%t), want %s", lost, r, ok, want)
		}
	}
	if r, ok := step(); ok {
		t.Fatalf("after the failovers: %s, want nothing", r)
	}
}

// Settings that Validate accepts seed cluster settings that are valid: a
// MaxLearners above the replicated setting's limit was accepted locally,
// and the cluster settings it seeded were refused by every member's
// decoder, so no settings were ever replicated (the policy never acted).
func TestSettingsMaxLearnersWithinTheReplicatedLimit(t *testing.T) {
	for _, n := range []int{1, 2, 48, 64, 65, 1000} {
		s := Settings{MaxLearners: n}
		err := s.Validate()
		seeded := SeedClusterSettings(s, true)
		_, decodeErr := DecodeClusterSettings(seeded.Encode())
		if (err == nil) != (decodeErr == nil) {
			t.Fatalf("MaxLearners %d: Validate says %v, the seeded cluster settings decode with %v", n, err, decodeErr)
		}
		if n > 64 && !errors.Is(err, ErrInvalidSettings) {
			t.Fatalf("MaxLearners %d: Validate = %v, want ErrInvalidSettings", n, err)
		}
	}
}
