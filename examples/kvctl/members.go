package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// members is GET /members.
type members struct {
	Leader    uint64 `json:"leader"`
	Joint     bool   `json:"joint"`
	Index     uint64 `json:"index"`
	LastIndex uint64 `json:"last_index"`
	Waiting   string `json:"waiting"`
	// RelaysKnown: the answer came from the leader, which alone knows
	// each standby's relay (RelayedBy, Relaying).
	RelaysKnown bool     `json:"relays_known"`
	Members     []member `json:"members"`
}

type member struct {
	ID         uint64    `json:"id"`
	PeerAddr   string    `json:"peer_addr"`
	ClientAddr string    `json:"client_addr"`
	Role       string    `json:"role"`
	ReadOnly   bool      `json:"read_only"`
	Outgoing   bool      `json:"outgoing"`
	Refused    string    `json:"refused"`
	Progress   *progress `json:"progress"`
	RelayedBy  uint64    `json:"relayed_by"`
	Relaying   int       `json:"relaying"`
}

type progress struct {
	Match          uint64  `json:"match"`
	Lag            uint64  `json:"lag"`
	State          string  `json:"state"`
	Ready          bool    `json:"ready"`
	NotReadyReason string  `json:"not_ready_reason"`
	EntriesPerSec  float64 `json:"entries_per_sec"`
	ETA            string  `json:"eta"`
	SnapshotSent   int64   `json:"snapshot_sent"`
	SnapshotTotal  int64   `json:"snapshot_total"`
	SnapshotRate   float64 `json:"snapshot_bytes_per_sec"`
	StableFor      string  `json:"stable_for"`
	Stabilization  string  `json:"stabilization"`
	// Contact is "group" or "host": the leader's contact with the member
	// comes from its host's liveness (the group is quiesced).
	Contact string `json:"contact"`
}

func (c *client) member(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"member list|add|promote|demote|remove|update|watch"}
	}
	switch args[0] {
	case "list":
		if _, err := noFlags(args[1:], 0, "member list takes no arguments"); err != nil {
			return err
		}
		ms, raw, err := c.getMembers(ctx)
		if err != nil {
			return err
		}
		if c.format == "json" {
			_, err := c.out.Write(raw)
			return err
		}
		printMembers(c.out, ms)
	case "add":
		fs := flag.NewFlagSet("member add", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		clientAddr := fs.String("client-addr", "", "the new member's client address")
		voter := fs.Bool("voter", false, "add it directly as a voter (checked; a learner is the safe default)")
		readOnly := fs.Bool("read-only", false, "never promoted, never a failover seat")
		dry := fs.Bool("dry-run", false, "show the plan and every refusal; change nothing")
		if err := parseInterspersed(fs, args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() != 2 {
			return usageError{"member add ID PEER_ADDR [--client-addr A] [--voter] [--read-only]"}
		}
		id, err := strconv.ParseUint(fs.Arg(0), 10, 64)
		if err != nil || id == 0 {
			return usageError{fmt.Sprintf("member ID %q: a positive integer", fs.Arg(0))}
		}
		body, _ := json.Marshal(map[string]any{"id": id, "peer_addr": fs.Arg(1), "client_addr": *clientAddr, "read_only": *readOnly})
		q := url.Values{}
		if *voter {
			q.Set("role", "voter")
		}
		if *dry {
			q.Set("dry_run", "true")
		}
		path := "/members"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		raw, err := c.call(ctx, http.MethodPost, path, strings.NewReader(string(body)))
		if err != nil {
			return err
		}
		if *dry {
			return c.printDryRun(raw)
		}
		if err := c.printChange(raw, fmt.Sprintf("member %d added", id)); err != nil || c.format == "json" {
			return err
		}
		c.printStartCommand(ctx, id, fs.Arg(1), *clientAddr)
		return nil
	case "promote", "demote", "remove":
		fs := flag.NewFlagSet("member "+args[0], flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		dryRun := fs.Bool("dry-run", false, "show the plan and every refusal; change nothing")
		if err := parseInterspersed(fs, args[1:]); err != nil || fs.NArg() != 1 {
			return usageError{fmt.Sprintf("member %s ID [--dry-run]", args[0])}
		}
		dry, id := *dryRun, fs.Arg(0)
		method, path := http.MethodPost, "/members/"+url.PathEscape(id)+"/"+args[0]
		if args[0] == "remove" {
			method, path = http.MethodDelete, "/members/"+url.PathEscape(id)
		}
		if dry {
			path += "?dry_run=true"
		}
		raw, err := c.call(ctx, method, path, nil)
		if err != nil {
			return err
		}
		if dry {
			return c.printDryRun(raw)
		}
		past := map[string]string{"promote": "promoted", "demote": "demoted", "remove": "removed"}[args[0]]
		return c.printChange(raw, fmt.Sprintf("member %s %s", id, past))
	case "watch":
		fs := flag.NewFlagSet("member watch", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		interval := fs.Duration("interval", time.Second, "how often to ask")
		count := fs.Int("count", 0, "stop after this many rounds (0: until interrupted)")
		if err := parseInterspersed(fs, args[1:]); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() != 0 {
			return usageError{"member watch [--interval D] [--count N]: no arguments"}
		}
		if *interval <= 0 || *count < 0 {
			return usageError{"member watch: --interval must be positive and --count not negative"}
		}
		return c.watch(ctx, *interval, *count)
	case "update":
		return c.memberUpdate(ctx, args[1:])
	default:
		return usageError{fmt.Sprintf("unknown member command %q", args[0])}
	}
	return nil
}

// printDryRun prints a dry run's plan and every refusal, one per line; an
// errWouldBeRefused when there is any (exit code 3).
func (c *client) printDryRun(raw []byte) error {
	var d struct {
		Plan     string `json:"plan"`
		Refusals []struct {
			Code  string `json:"code"`
			Error string `json:"error"`
		} `json:"refusals"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("malformed answer: %v", err)
	}
	if c.format == "json" {
		if _, err := c.out.Write(raw); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.out, "plan: %s\n", d.Plan)
		if len(d.Refusals) == 0 {
			fmt.Fprintln(c.out, "it would go through (nothing was changed)")
		}
		for _, r := range d.Refusals {
			fmt.Fprintf(c.out, "refused: %s: %s\n", r.Code, r.Error)
		}
	}
	if len(d.Refusals) > 0 {
		return errWouldBeRefused{n: len(d.Refusals)}
	}
	return nil
}

// memberUpdate is "member update ID [--peer-addr A] [--client-addr A]
// [--dry-run]": PUT /members/{id}, the member's recorded addresses.
func (c *client) memberUpdate(ctx context.Context, args []string) error {
	const synopsis = "member update ID [--peer-addr A] [--client-addr A] [--dry-run]"
	fs := flag.NewFlagSet("member update", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	peerAddr := fs.String("peer-addr", "", "the member's new peer address (host:port)")
	clientAddr := fs.String("client-addr", "", "the member's new client address (host:port)")
	dry := fs.Bool("dry-run", false, "show the plan and every refusal; change nothing")
	if err := parseInterspersed(fs, args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() != 1 {
		return usageError{synopsis}
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 64)
	if err != nil || id == 0 {
		return usageError{fmt.Sprintf("member ID %q: a positive integer", fs.Arg(0))}
	}
	body := map[string]string{}
	if isSet(fs, "peer-addr") {
		body["peer_addr"] = *peerAddr
	}
	if isSet(fs, "client-addr") {
		body["client_addr"] = *clientAddr
	}
	if len(body) == 0 {
		return usageError{synopsis + ": give --peer-addr, --client-addr or both"}
	}
	b, _ := json.Marshal(body)
	path := "/members/" + strconv.FormatUint(id, 10)
	if *dry {
		path += "?dry_run=true"
	}
	raw, err := c.call(ctx, http.MethodPut, path, strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	if *dry {
		return c.printDryRun(raw)
	}
	return c.printChange(raw, fmt.Sprintf("member %d updated", id))
}

func (c *client) printChange(raw []byte, what string) error {
	if c.format == "json" {
		_, err := c.out.Write(raw)
		return err
	}
	var ch struct {
		Index uint64 `json:"index"`
		Plan  string `json:"plan"`
	}
	_ = json.Unmarshal(raw, &ch)
	fmt.Fprintf(c.out, "%s at index %d: %s\n", what, ch.Index, ch.Plan)
	return nil
}

// printStartCommand prints the command that starts a member just added, as
// etcdctl's member add prints the new member's settings: its ID, --join
// with the other members' peer addresses, and the addresses it was added
// with. It adds no flag the cluster's members may run with (timers, TLS).
func (c *client) printStartCommand(ctx context.Context, id uint64, peerAddr, clientAddr string) {
	peers := "PEER_ADDR_OF_ANY_MEMBER"
	if raw, err := c.call(ctx, http.MethodGet, "/members", nil); err == nil {
		var ms members
		if json.Unmarshal(raw, &ms) == nil {
			var addrs []string
			for _, m := range ms.Members {
				if m.ID != id && m.PeerAddr != "" {
					addrs = append(addrs, m.PeerAddr)
				}
			}
			if len(addrs) > 0 {
				peers = strings.Join(addrs, ",")
			}
		}
	}
	cmd := fmt.Sprintf("kvserver --id %d --join --peers %s --listen-peer %s", id, peers, peerAddr)
	if clientAddr != "" {
		cmd += " --listen-client " + clientAddr
	}
	fmt.Fprintf(c.out, "start it with an empty data dir:\n  %s\n", cmd)
}

// getMembers is GET /members, asked again of the leader's client address
// when the member that answered is not the leader: only the leader knows
// its relays. If the leader cannot be asked, the first answer is kept
// (without relays).
func (c *client) getMembers(ctx context.Context) (members, []byte, error) {
	raw, err := c.call(ctx, http.MethodGet, "/members", nil)
	if err != nil {
		return members{}, nil, err
	}
	var ms members
	if err := json.Unmarshal(raw, &ms); err != nil {
		return members{}, nil, fmt.Errorf("malformed answer: %v", err)
	}
	if ms.RelaysKnown {
		return ms, raw, nil
	}
	for _, m := range ms.Members {
		if m.ID != ms.Leader || m.ClientAddr == "" {
			continue
		}
		status, lraw, _, err := c.do(ctx, m.ClientAddr, http.MethodGet, "/members", nil)
		var lms members
		if err == nil && status == http.StatusOK && json.Unmarshal(lraw, &lms) == nil && lms.RelaysKnown {
			return lms, lraw, nil
		}
	}
	return ms, raw, nil
}

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

// status prints every endpoint's GET /status.
func (c *client) status(ctx context.Context) error {
	type st struct {
		ID            uint64 `json:"id"`
		Role          string `json:"role"`
		Term          uint64 `json:"term"`
		Leader        uint64 `json:"leader"`
		CommitIndex   uint64 `json:"commit_index"`
		AppliedIndex  uint64 `json:"applied_index"`
		ClusterID     string `json:"cluster_id"`
		Quiesced      bool   `json:"quiesced"`
		QuiescedSince string `json:"quiesced_since"`
		LastWake      string `json:"last_wake"`
	}
	var rows []map[string]any
	var table [][]string
	failed := 0
	for _, ep := range c.endpoints {
		status, raw, _, err := c.do(ctx, ep, http.MethodGet, "/status", nil)
		var s st
		if err == nil && status == http.StatusOK {
			err = json.Unmarshal(raw, &s)
		} else if err == nil {
			err = fmt.Errorf("HTTP %d", status)
		}
		if err != nil {
			failed++
			// The reason goes in a last column: the others keep their width.
			table = append(table, []string{ep, "-", "-", "-", "-", "-", "-", "-", "-", "unreachable: " + err.Error()})
			rows = append(rows, map[string]any{"endpoint": ep, "error": err.Error()})
			continue
		}
		cluster := s.ClusterID
		if cluster == "" {
			cluster = "-"
		}
		table = append(table, []string{ep, fmt.Sprint(s.ID), cluster, s.Role, fmt.Sprint(s.Term), fmt.Sprint(s.Leader),
			fmt.Sprint(s.CommitIndex), fmt.Sprint(s.AppliedIndex), quietColumn(s.Quiesced, s.QuiescedSince, s.LastWake)})
		rows = append(rows, map[string]any{"endpoint": ep, "status": s})
	}
	if c.format == "json" {
		_ = json.NewEncoder(c.out).Encode(rows)
	} else {
		tw := newTable(c.out)
		header := "ENDPOINT\tID\tCLUSTER\tROLE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tQUIESCED"
		if failed > 0 {
			header += "\tERROR"
		}
		fmt.Fprintln(tw, header)
		for _, row := range table {
			if failed > 0 && len(row) == 9 {
				row = append(row, "") // in the ERROR column's block
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		_ = tw.Flush()
	}
	if failed == len(c.endpoints) {
		return fmt.Errorf("no endpoint answered")
	}
	return nil
}

// quietColumn is kvctl status's QUIESCED column: "since 12s" while the
// group is quiesced on that member, else "no" (with the cause of its
// latest wake, when an older server says it).
func quietColumn(quiesced bool, since, lastWake string) string {
	if quiesced {
		if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
			return "since " + time.Since(t).Round(time.Second).String()
		}
		return "yes"
	}
	if lastWake != "" {
		return "no (woken: " + lastWake + ")"
	}
	return "no"
}
