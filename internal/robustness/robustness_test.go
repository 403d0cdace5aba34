package robustness

import (
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// soak runs random seeds of every scenario (and of the fleet's, see
// fleet_test.go) until the time is up:
//
//	go test ./internal/robustness -run TestRobustness -soak 30m -timeout 40m
var soak = flag.Duration("soak", 0, "run random seeds of every scenario for this long and print a summary")

var (
	network    = []string{Partition, OneWay, IsolateLeader, IsolateLeaderChange, Isolate, Drop, Reorder, Duplicate, Heal, Heal}
	processes  = []string{Crash, Stop, Restart, Pause, SlowFsync, StallFsync}
	diskFaults = []string{FailFsync, CrashWrite, DiskFull, SnapshotNow, Restart, Restart, StallFsync, SlowFsync}
)

// scenarios are the fixed suite; the soak draws random seeds of each.
var scenarios = []Scenario{
	{Name: "3voters-network-processes", Voters: 3, Standbys: 1,
		Faults: concat(network, processes), Seeds: []int64{1, 2}},
	{Name: "3voters-disks", Voters: 3, Standbys: 1,
		Faults: concat(diskFaults, []string{Partition, Drop, Heal}), Seeds: []int64{3}},
	{Name: "1voter-restarts", Voters: 1, Standbys: 1, SlowRestarts: true, Every: 120 * time.Millisecond,
		Faults: []string{Crash, Stop, Restart, IdleCrash, IdleCrash, Pause, StallFsync}, Seeds: []int64{4}},
	{Name: "2voters", Voters: 3, TwoVoters: true,
		Faults: concat(network, processes, []string{Transfer, CrashWrite}), Seeds: []int64{5}},
	{Name: "manual-churn", Voters: 3, Standbys: 1, MaxLearners: 3,
		Faults: concat(network, []string{Crash, Restart, Pause}, membershipKinds, membershipKinds), Seeds: []int64{6, 7}},
	{Name: "policy-churn", Voters: 3, Standbys: 2, Policy: true, MaxLearners: 4,
		Faults: concat(network, []string{Crash, Stop, Restart, Pause, SnapshotNow},
			[]string{AddLearner, RemoveLearner, Replace, Replace, Transfer, Target, Target}), Seeds: []int64{8, 9}},
	// The scripted scenarios: every step asserted to take effect, the
	// leader crashed inside joint configurations (see script.go, walks.go).
	{Name: "scale-walk", Voters: 1, Standbys: 4, Policy: true, MaxLearners: 4, Script: scaleWalk(3, 5, 3, 1, 3),
		Every: 400 * time.Millisecond, Faults: scriptNoise, Seeds: []int64{10, 12}},
	{Name: "membership-walk", Voters: 3, MaxLearners: 3, OddVoters: true, Script: membershipWalk(2),
		Every: 300 * time.Millisecond, Faults: scriptNoise, Seeds: []int64{11, 13}},
}

// scriptNoise are the faults a script draws between its steps. Reordering
// keeps sending a learner's replication back to probing for a round trip;
// readiness keeps its stabilization clock through that (UpdateReadySince),
// so promotions still happen under it.
var scriptNoise = []string{Drop, Reorder, Duplicate, SlowFsync, Heal, Heal}

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// TestRobustness runs every scenario with its fixed seeds (the nemesis's
// choices; timing still varies), or only ROBUSTNESS_SEED if set; with
// -soak, random seeds until the time is up.
func TestRobustness(t *testing.T) {
	if *soak > 0 {
		runSoak(t, *soak)
		return
	}
	for _, sc := range scenarios {
		seeds := sc.Seeds
		if s := os.Getenv("ROBUSTNESS_SEED"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("ROBUSTNESS_SEED: %v", err)
			}
			seeds = []int64{v}
		}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", sc.Name, seed), func(t *testing.T) { Run(t, sc, seed) })
		}
	}
}

// runSoak runs the scenarios in turn with random seeds until d has passed
// and prints what it checked.
func runSoak(t *testing.T, d time.Duration) {
	deadline := time.Now().Add(d)
	var (
		runs    int
		ops     int
		changes int
		kinds   = map[string]int{}
		failed  []string
	)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	all := append(slices.Clone(scenarios), fleetScenario)
	for i := 0; time.Now().Before(deadline); i++ {
		sc := all[i%len(all)]
		seed := rng.Int63()
		name := fmt.Sprintf("%s/seed=%d", sc.Name, seed)
		var st Stats
		if !t.Run(name, func(t *testing.T) { st = Run(t, sc, seed) }) {
			failed = append(failed, name)
		}
		runs++
		ops += st.Ops
		changes += st.Changes
		for k, n := range st.Faults {
			kinds[k] += n
		}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		fmt.Fprintf(&b, " %s=%d", k, kinds[k])
	}
	t.Logf("soak of %s: %d scenarios, %d operations checked; faults by kind:%s; membership changes %d; failures %d %v",
		d, runs, ops, b.String(), changes, len(failed), failed)
}
