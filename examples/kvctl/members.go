package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
