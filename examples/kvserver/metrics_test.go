package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
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

// TestQuiesceVisible: by default (--quiesce is on) an idle cluster's
// leader reads understudy_group_quiesced 1, GET /members says its
// followers' contact comes from their hosts ("contact": "host", still
// ready), and a write wakes the group: a wake-up by proposal is counted.
func TestQuiesceVisible(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	m, _ := ps[0].members(t)
	leader := ps[m.Leader-1]
	contacts := func() (map[uint64]string, string) {
		code, body := leader.req("GET", "/members", "")
		var resp struct {
			Members []struct {
				ID       uint64 `json:"id"`
				Progress *struct {
					Ready   bool   `json:"ready"`
					Contact string `json:"contact"`
				} `json:"progress"`
			} `json:"members"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &resp) != nil {
			return nil, fmt.Sprintf("GET /members: %d %s", code, body)
		}
		out := map[uint64]string{}
		for _, x := range resp.Members {
			if x.Progress != nil {
				if x.Progress.Contact != "group" && x.Progress.Contact != "host" {
					return nil, fmt.Sprintf("member %d: contact %q: %s", x.ID, x.Progress.Contact, body)
				}
				out[x.ID] = fmt.Sprintf("%s ready=%t", x.Progress.Contact, x.Progress.Ready)
			}
		}
		return out, body
	}
	eventually(t, 20*time.Second, func() string {
		c, body := contacts()
		if len(c) != 2 {
			return "members: " + body
		}
		for id, v := range c {
			if v != "host ready=true" {
				return fmt.Sprintf("member %d: %s: %s", id, v, body)
			}
		}
		return ""
	})
	// GET /status says so too, on the leader and on a follower.
	for _, p := range ps {
		eventually(t, 10*time.Second, func() string {
			code, body := p.req("GET", "/status", "")
			var st struct {
				Quiesced      bool   `json:"quiesced"`
				QuiescedSince string `json:"quiesced_since"`
			}
			if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
				return fmt.Sprintf("GET /status: %d %s", code, body)
			}
			if since, err := time.Parse(time.RFC3339Nano, st.QuiescedSince); !st.Quiesced || err != nil || since.After(time.Now()) {
				return "GET /status: " + body
			}
			return ""
		})
	}
	text := scrapeMetrics(t, leader, "understudy_group_quiesced 1", `understudy_group_wakes_total{cause="proposal"}`,
		`understudy_peer_host_live{peer="`)
	before := metricValue(t, text, `understudy_group_wakes_total{cause="proposal"}`)

	if code, _ := leader.req("PUT", "/kv/q", "1"); code != 204 {
		t.Fatal("PUT")
	}
	eventually(t, 10*time.Second, func() string {
		code, body := leader.req("GET", "/metrics", "")
		if code != 200 {
			return fmt.Sprintf("GET /metrics: %d", code)
		}
		if after := metricValue(t, body, `understudy_group_wakes_total{cause="proposal"}`); after <= before {
			return fmt.Sprintf("wakes by proposal %v, before the write %v", after, before)
		}
		return ""
	})
	// The wake's cause is in GET /status until the group quiesces again
	// (it may have by now: then the cause stays the last one). Another
	// wake may have come since (a follower refusing a quiesce message, on
	// a loaded machine): then the cause shown is one whose count rose.
	code, body := leader.req("GET", "/status", "")
	var st struct {
		LastWake string `json:"last_wake"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.LastWake == "" {
		t.Fatalf("GET /status after a write woke the group: %d %s", code, body)
	}
	if st.LastWake != "proposal" {
		name := fmt.Sprintf("understudy_group_wakes_total{cause=%q}", st.LastWake)
		was := 0.0
		if strings.Contains(text, "\n"+name+" ") {
			was = metricValue(t, text, name)
		}
		_, now := leader.req("GET", "/metrics", "")
		if metricValue(t, now, name) <= was {
			t.Fatalf("GET /status names the last wake %q, whose count did not rise since the write: %s", st.LastWake, body)
		}
		t.Logf("the last wake since the write: %s", st.LastWake)
	}
}

// TestQuiesceOff: --quiesce=false keeps a member ticking: it refuses its
// leader's quiesce message, so the group of two default members and one
// with --quiesce=false never quiesces. The leader counts the refusals
// (understudy_group_wakes_total{cause="refused"}: it tried, so the others
// run quiescence by default), and the member with the flag never quiesced.
func TestQuiesceOff(t *testing.T) {
	root := t.TempDir()
	var ps []*proc
	var parts []string
	for id := uint64(1); id <= 3; id++ {
		p := newProc(t, root, id)
		ps = append(ps, p)
		parts = append(parts, fmt.Sprintf("%d=%s", id, p.peer))
	}
	for _, p := range ps {
		args := []string{"--initial-cluster", strings.Join(parts, ",")}
		if p.id == 3 {
			args = append(args, "--quiesce=false")
		}
		p.start(args...)
	}
	for _, p := range ps {
		p.waitHealthy(t)
	}
	eventually(t, 30*time.Second, func() string {
		m, _ := ps[0].members(t)
		if m.Leader == 3 {
			// Member 3 must not lead: a leader of its own would never
			// try. A transfer to a member not caught up yet times out:
			// asked again.
			code, out := ps[2].req("POST", "/leader/transfer?to=1", "")
			return fmt.Sprintf("leader 3; transfer to 1: %d %s", code, out)
		}
		if m.Leader == 0 {
			return "no leader"
		}
		code, body := ps[m.Leader-1].req("GET", "/metrics", "")
		if code != 200 {
			return fmt.Sprintf("GET /metrics: %d", code)
		}
		if v := metricValue(t, body, `understudy_group_wakes_total{cause="refused"}`); v < 1 {
			return fmt.Sprintf("leader %d: wakes by refusal %v", m.Leader, v)
		}
		return ""
	})
	text := scrapeMetrics(t, ps[2], "understudy_group_quiesced 0")
	for _, cause := range []string{"proposal", "read", "call", "message", "refused", "nudge", "leaderDead", "hostDown", "leaderGone"} {
		if v := metricValue(t, text, fmt.Sprintf(`understudy_group_wakes_total{cause=%q}`, cause)); v != 0 {
			t.Errorf("member 3 (--quiesce=false): woken by %s %v times: it quiesced", cause, v)
		}
	}
}
