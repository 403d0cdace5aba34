package main

import (
	"fmt"
	"testing"
)

// TestMemberStabilizingMetric: a member caught up and in contact but not
// yet stable for --stabilization reads understudy_member_ready 0 and
// understudy_member_stabilizing 1 — not known to be ready yet, as opposed
// to lagging or out of contact (ready 0, stabilizing 0). After a leader
// change every member's clock starts again under the new leader: the
// previous leader's own row reads so too, on every member.
func TestMemberStabilizingMetric(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3, "--stabilization", "1h")
	m, _ := ps[0].members(t)
	old := ps[m.Leader-1]
	var next *proc
	for _, p := range ps {
		if p != old {
			next = p
			break
		}
	}
	var want []string
	for _, p := range ps {
		if p != old {
			want = append(want, fmt.Sprintf(`understudy_member_ready{member="%d",role="voter"} 0`, p.id),
				fmt.Sprintf(`understudy_member_stabilizing{member="%d",role="voter"} 1`, p.id))
		}
	}
	want = append(want, fmt.Sprintf(`understudy_member_stabilizing{member="%d",role="voter"} 0`, old.id))
	scrapeMetrics(t, old, want...)

	if code, out := next.req("POST", fmt.Sprintf("/leader/transfer?to=%d", next.id), ""); code != 200 {
		t.Fatalf("transfer to %d: %d %s", next.id, code, out)
	}
	// The previous leader, now a voter, is stabilizing under the new one:
	// its own scrape says so.
	scrapeMetrics(t, old, fmt.Sprintf(`understudy_member_ready{member="%d",role="voter"} 0`, old.id),
		fmt.Sprintf(`understudy_member_stabilizing{member="%d",role="voter"} 1`, old.id),
		fmt.Sprintf(`understudy_member_ready{member="%d",role="voter"} 1`, next.id))
}
