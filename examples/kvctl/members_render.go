package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// How "member list" and "member watch" draw the members: one row each,
// readable at 30 members.

// sortedMembers is ms's members, the leader first, then the voters, then
// the learners, each by ID.
func sortedMembers(ms members) []member {
	out := slices.Clone(ms.Members)
	rank := func(m member) int {
		switch {
		case m.ID == ms.Leader:
			return 0
		case m.Role == "voter":
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b member) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// compactCount writes n in at most 5 characters: 950, 4.2k, 310k, 1.3M.
func compactCount(n uint64) string {
	switch {
	case n < 1000:
		return strconv.FormatUint(n, 10)
	case n < 10_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	case n < 1_000_000:
		return strconv.FormatUint(n/1000, 10) + "k"
	case n < 10_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n < 1_000_000_000:
		return strconv.FormatUint(n/1_000_000, 10) + "M"
	}
	return strconv.FormatUint(n/1_000_000_000, 10) + "G"
}

// relayCell is a member's RELAY cell: "via 2" (a standby member 2 hands
// the leader's messages on to), "feeds 12" (a relay, and to how many),
// "-" (fed directly, or the leader).
func relayCell(m member) string {
	switch {
	case m.RelayedBy != 0:
		return "via " + strconv.FormatUint(m.RelayedBy, 10)
	case m.Relaying > 0:
		return "feeds " + strconv.Itoa(m.Relaying)
	}
	return "-"
}

// anyRelay reports whether a member is relayed or relays: the RELAY
// column is shown only then.
func anyRelay(ms members) bool {
	for _, m := range ms.Members {
		if m.RelayedBy != 0 || m.Relaying > 0 {
			return true
		}
	}
	return false
}

// memberReason is a member's REASON cell: why it is not ready, and
// "(via host)" when the leader's contact with it comes from its host's
// liveness (the group is quiesced).
func memberReason(m member) string {
	reason := ""
	if p := m.Progress; p != nil {
		reason = p.NotReadyReason
		if p.Contact == "host" {
			reason = strings.TrimSpace(reason + " (via host)")
		}
	}
	if m.Refused != "" && !strings.HasPrefix(reason, "refused") {
		reason = strings.TrimSpace(reason + " refuses the leader: " + m.Refused)
	}
	return reason
}

// printMembers prints the aligned member table, one line per member: the
// leader (marked) first, then the voters, then the learners. LAG (the
// leader's last index minus the member's match; -w json has both) is
// compact (4.2k), so that a line fits 120 columns at fleet size; RELAY, shown when the leader relays, says each
// standby's relay and how many standbys each relay feeds.
func printMembers(w io.Writer, ms members) {
	tw := newTable(w)
	relays := anyRelay(ms)
	header := "ID\tROLE\tPEER ADDR\tCLIENT ADDR\tLAG\tSTATE\tREADY"
	if relays {
		header += "\tRELAY"
	}
	fmt.Fprintln(tw, header+"\tREASON")
	learners, relayed := 0, 0
	for _, m := range sortedMembers(ms) {
		id := strconv.FormatUint(m.ID, 10)
		role := m.Role
		if m.ID == ms.Leader {
			id += "*"
			role = "leader"
		}
		if m.ReadOnly {
			role += " (read-only)"
		}
		if m.Role == "learner" {
			learners++
			if m.RelayedBy != 0 {
				relayed++
			}
		}
		lag, state, ready := "-", "-", "-"
		if p := m.Progress; p != nil {
			lag, state = compactCount(p.Lag), p.State
			ready = "no"
			if p.Ready {
				ready = "yes"
			}
		}
		row := []string{id, role, m.PeerAddr, m.ClientAddr, lag, state, ready}
		if relays {
			row = append(row, relayCell(m))
		}
		row = append(row, memberReason(m))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	if relays {
		fmt.Fprintf(w, "(%d of %d learners fed through relays)\n", relayed, learners)
	}
	if ms.Joint {
		fmt.Fprintln(w, "(a joint configuration: a change of several voters is in progress)")
	}
	if ms.Waiting != "" {
		fmt.Fprintf(w, "(the policy is waiting: %s)\n", ms.Waiting)
	}
}

// watch prints the members every interval, changes only: the first round
// every member, then under the time of each round the members whose line
// changed (and those gone). It never clears the screen: at thirty members
// a redraw hides what changed.
func (c *client) watch(ctx context.Context, interval time.Duration, count int) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev map[uint64]string
	var prevHead, prevErr string
	for n := 0; count == 0 || n < count; n++ {
		rctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		ms, _, err := c.getMembers(rctx)
		cancel()
		var b strings.Builder
		now := time.Now().Format("15:04:05")
		if prev == nil && prevErr == "" {
			fmt.Fprintf(&b, "members at %s (every %s, changes only; Ctrl-C to stop)\n", now, interval)
		}
		if err != nil {
			if e := err.Error(); e != prevErr {
				fmt.Fprintf(&b, "%s  %v\n", now, err)
				prevErr = e
			}
		} else {
			prevErr = ""
			head, lines := watchLines(ms)
			var changed strings.Builder
			if head != prevHead {
				fmt.Fprintf(&changed, "%s\n", head)
				prevHead = head
			}
			cur := make(map[uint64]string, len(lines))
			for _, l := range lines {
				cur[l.id] = l.text
				if prev[l.id] != l.text {
					fmt.Fprintln(&changed, l.text)
				}
			}
			for id := range prev {
				if _, ok := cur[id]; !ok {
					fmt.Fprintf(&changed, "  %3d removed\n", id)
				}
			}
			if prev != nil && changed.Len() > 0 {
				fmt.Fprintf(&b, "%s\n", now)
			}
			b.WriteString(changed.String())
			prev = cur
		}
		_, _ = io.WriteString(c.out, b.String())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// watchLine is one member's line of member watch.
type watchLine struct {
	id   uint64
	text string
}

// watchLines is member watch's heading and each member's line, in the
// order of member list.
func watchLines(ms members) (string, []watchLine) {
	head := fmt.Sprintf("leader %d%s", ms.Leader, map[bool]string{true: " (joint)", false: ""}[ms.Joint])
	if ms.Waiting != "" {
		head += "; the policy is waiting: " + ms.Waiting
	}
	var out []watchLine
	for _, m := range sortedMembers(ms) {
		out = append(out, watchLine{m.ID, watchLineOf(ms, m)})
	}
	return head, out
}

// watchLineOf draws a member with a lag bar, its catch-up rate while it is
// not ready, the time to ready, the stabilization countdown and its relay.
func watchLineOf(ms members, m member) string {
	relay := ""
	if r := relayCell(m); r != "-" {
		relay = "  " + r
	}
	if m.ID == ms.Leader {
		return fmt.Sprintf("  %3d leader   %s%s", m.ID, m.PeerAddr, relay)
	}
	p := m.Progress
	if p == nil {
		return fmt.Sprintf("  %3d %-8s %s%s", m.ID, m.Role, m.PeerAddr, relay)
	}
	// The bar is the log's progress (match of the last index), or while a
	// snapshot streams the snapshot's (bytes sent of its size): the match
	// does not move until it is installed.
	done, of := 1.0, ""
	switch {
	case p.SnapshotTotal > 0:
		done, of = float64(p.SnapshotSent)/float64(p.SnapshotTotal), " of the snapshot"
	case ms.LastIndex > 0:
		done = float64(p.Match) / float64(ms.LastIndex)
	}
	done = min(max(done, 0), 1)
	const width = 20
	filled := int(done * width)
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	line := fmt.Sprintf("  %3d %-8s [%s] %5.1f%%%s  lag %s", m.ID, m.Role, bar, 100*done, of, compactCount(p.Lag))
	if p.EntriesPerSec > 0 && !p.Ready {
		line += fmt.Sprintf("  %.0f entries/s", p.EntriesPerSec)
	}
	if p.SnapshotTotal > 0 {
		line += fmt.Sprintf("  snapshot %.1f/%.1f MB", float64(p.SnapshotSent)/1e6, float64(p.SnapshotTotal)/1e6)
		if p.SnapshotRate > 0 {
			// The snapshot's bytes streamed per second (the leader's
			// measure): entries/s above counts log entries only.
			line += fmt.Sprintf(" at %.1f snapshot MB/s", p.SnapshotRate/1e6)
		}
	}
	if p.ETA != "" {
		line += "  ready in ~" + p.ETA
	}
	switch {
	case p.Ready:
		line += "  READY"
	case p.StableFor != "" && p.Stabilization != "":
		line += fmt.Sprintf("  stable %s of %s", p.StableFor, p.Stabilization)
	case p.NotReadyReason != "":
		line += "  (" + p.NotReadyReason + ")"
	}
	line += relay
	if p.Contact == "host" {
		line += "  (via host)"
	}
	if m.Refused != "" && !strings.HasPrefix(p.NotReadyReason, "refused") {
		line += "  refuses the leader: " + m.Refused
	}
	return line
}
