package robustness

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// fleetScenario is issue 36's fleet under the nemesis: 3 voters and 24
// standbys, the leader feeding them through relays (8 standbys a relay:
// the two follower voters feed 16, caught-up standbys the others), the
// clients writing through standbys and reading linearizably from them;
// partitions, crashes (relays among them), slow disks, and a voter
// swapped for a standby in one joint change (sometimes with the leader
// crashed inside it).
var fleetScenario = Scenario{Name: "fleet-3+24", Voters: 3, Standbys: 24, MaxLearners: 24,
	Relay: true, RelayFanout: 8, Fleet: true, Clients: 8, Duration: 5 * time.Second, Every: 250 * time.Millisecond,
	Faults: []string{Partition, OneWay, IsolateLeader, Isolate, Heal, Heal,
		Crash, Restart, CrashRelay, CrashRelay, IsolateRelay, StallRelay,
		SlowFsync, StallFsync, Drop, Replace},
	Seeds: []int64{36, 37}}

// TestFleetUnderFaults runs the fleet scenario (see fleetScenario) with its
// fixed seed, or ROBUSTNESS_SEED. The CI run is short; set
// ROBUSTNESS_FLEET_DURATION (e.g. 2m) for a longer run of faults, or use
// -soak, which draws random seeds of it among the other scenarios.
func TestFleetUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("27 members")
	}
	sc := fleetScenario
	if s := os.Getenv("ROBUSTNESS_FLEET_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("ROBUSTNESS_FLEET_DURATION: %v", err)
		}
		sc.Duration = d
	}
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
