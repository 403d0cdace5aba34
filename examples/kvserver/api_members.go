package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
)

// The /members API: the list with each member's progress and relay,
// adding, updating, promoting, demoting and removing members, and
// leadership transfers.

// memberJSON is one member in GET /members.
type memberJSON struct {
	ID         uint64 `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Role       string `json:"role"`
	ReadOnly   bool   `json:"read_only"`
	Outgoing   bool   `json:"outgoing,omitempty"`
	Refused    string `json:"refused,omitempty"`
	// Incarnation is the incarnation the member's data published when
	// it first ran (hex); absent for a member that never started. A wiped
	// member is refused from then on (docs/operations.md, "Replacing a
	// disk").
	Incarnation string        `json:"incarnation,omitempty"`
	Progress    *progressJSON `json:"progress,omitempty"`
	// RelayedBy is the member that hands the leader's appends and
	// heartbeats on to this standby (--relay on the leader); absent when
	// the leader feeds it directly.
	RelayedBy uint64 `json:"relayed_by,omitempty"`
	// Relaying is how many standbys this member hands the leader's
	// messages on to now (absent: none).
	Relaying int `json:"relaying,omitempty"`
}

type progressJSON struct {
	Match          uint64  `json:"match"`
	Lag            uint64  `json:"lag"`
	State          string  `json:"state"`
	Ready          bool    `json:"ready"`
	NotReadyReason string  `json:"not_ready_reason"` // a contract field: "" when ready
	EntriesPerSec  float64 `json:"entries_per_sec"`
	ETA            string  `json:"eta,omitempty"`
	SnapshotSent   int64   `json:"snapshot_sent,omitempty"`
	SnapshotTotal  int64   `json:"snapshot_total,omitempty"`
	// SnapshotBytesPerSec is how fast the snapshot in flight streams
	// (bytes of its file per second; absent when none streams or not
	// measured yet).
	SnapshotBytesPerSec float64 `json:"snapshot_bytes_per_sec,omitempty"`
	StableFor           string  `json:"stable_for,omitempty"`
	Stabilization       string  `json:"stabilization,omitempty"`
	// Contact is where the leader's last contact with the member comes
	// from: "group" (the group's own messages) or "host" (the group is
	// quiesced and the member's host was heard later: its liveness
	// vouches for the member).
	Contact string `json:"contact"`
}

type membersJSON struct {
	Leader    uint64 `json:"leader"`
	Joint     bool   `json:"joint"`
	Index     uint64 `json:"index"`
	LastIndex uint64 `json:"last_index"`
	Waiting   string `json:"waiting,omitempty"`
	// RelaysKnown reports that relayed_by and relaying are set: every
	// member's answer carries the leader's relays (its membership is asked
	// of the leader); false from a release whose followers did not know
	// them (ask the leader's client_addr then).
	RelaysKnown bool         `json:"relays_known"`
	Members     []memberJSON `json:"members"`
}

func toMembersJSON(m raft.Membership) membersJSON {
	out := membersJSON{Leader: m.Leader, Joint: m.Joint(), Index: m.Index, LastIndex: m.LastIndex, Waiting: m.Waiting, Members: []memberJSON{}}
	for _, ms := range m.Members {
		mj := memberJSON{
			ID: ms.ID, PeerAddr: ms.PeerAddr, ClientAddr: ms.Metadata["client_addr"],
			Role: "learner", ReadOnly: ms.ReadOnly, Outgoing: ms.Outgoing, Refused: ms.Refused,
		}
		if ms.Incarnation != 0 {
			mj.Incarnation = fmt.Sprintf("%016x", ms.Incarnation)
		}
		if ms.Role == confchange.RoleVoter {
			mj.Role = "voter"
		}
		if ms.Progress != nil && ms.ID != m.Leader {
			p := &progressJSON{Match: ms.Progress.Match, Lag: ms.Lag, State: ms.Progress.State.String(), Ready: ms.Readiness.Ready(), Contact: "group"}
			if ms.Progress.ViaHost {
				p.Contact = "host"
			}
			if !p.Ready {
				p.NotReadyReason = ms.Readiness.String()
			}
			if ms.Readiness.Code == confchange.ReasonStabilizing || ms.Readiness.Code == confchange.ReasonReady {
				p.StableFor, p.Stabilization = ms.Readiness.For.Round(time.Millisecond).String(), ms.Readiness.Need.String()
			}
			if cu := ms.CatchUp; cu != nil {
				p.EntriesPerSec = cu.EntriesPerSec
				if cu.ETA > 0 {
					p.ETA = cu.ETA.Round(time.Millisecond).String()
				}
				p.SnapshotSent, p.SnapshotTotal = cu.Snapshot.Sent, cu.Snapshot.Total
				p.SnapshotBytesPerSec = cu.SnapshotBytesPerSec
			}
			mj.Progress = p
		}
		out.Members = append(out.Members, mj)
	}
	return out
}

func (s *server) listMembers(w http.ResponseWriter, r *http.Request, _ url.Values) {
	ctx, cancel := s.reqCtx(r)
	defer cancel()
	m, err := s.h.Membership(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := toMembersJSON(m)
	addRelays(&out, m)
	writeJSON(w, http.StatusOK, out)
}

// addRelays sets each member's relay and each relay's count of standbys
// from the membership (the leader's choice: a follower's Membership is
// asked of the leader, so it carries them too).
func addRelays(out *membersJSON, m raft.Membership) {
	fed := map[uint64]int{}
	by := map[uint64]uint64{}
	for _, ms := range m.Members {
		if ms.RelayedBy != 0 {
			fed[ms.RelayedBy]++
			by[ms.ID] = ms.RelayedBy
		}
	}
	for i := range out.Members {
		mj := &out.Members[i]
		mj.RelayedBy = by[mj.ID]
		mj.Relaying = fed[mj.ID]
	}
	out.RelaysKnown = true
}

// changeJSON answers an accepted membership change.
type changeJSON struct {
	ID    uint64 `json:"id,omitempty"`
	Index uint64 `json:"index"`
	Plan  string `json:"plan"`
}

func (s *server) addMember(w http.ResponseWriter, r *http.Request, q url.Values) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		ID         *uint64 `json:"id"`
		PeerAddr   string  `json:"peer_addr"`
		ClientAddr string  `json:"client_addr"`
		ReadOnly   bool    `json:"read_only"`
	}
	if err := decodeObject(body, &req, "id", "peer_addr", "client_addr", "read_only"); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_member", "the body is not a member: "+err.Error())
		return
	}
	if req.ID == nil || *req.ID == 0 {
		s.writeError(w, http.StatusBadRequest, "invalid_member", "id: a positive integer is required")
		return
	}
	if err := checkMemberAddr(req.PeerAddr); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_member", fmt.Sprintf("peer_addr %q: %v", req.PeerAddr, err))
		return
	}
	if req.ClientAddr != "" {
		if err := checkMemberAddr(req.ClientAddr); err != nil {
			s.writeError(w, http.StatusBadRequest, "invalid_member", fmt.Sprintf("client_addr %q: %v", req.ClientAddr, err))
			return
		}
	}
	m := raft.Member{ID: *req.ID, PeerAddr: req.PeerAddr, ReadOnly: req.ReadOnly}
	if req.ClientAddr != "" {
		m.Metadata = map[string]string{"client_addr": req.ClientAddr}
	}
	op := confchange.AddLearner(m)
	switch role := q.Get("role"); role {
	case "", "learner":
	case "voter":
		op = confchange.AddVoter(m)
	default:
		s.writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("role %q: want learner or voter", role))
		return
	}
	ctx, cancel := s.reqCtx(r)
	defer cancel()
	if dry, _ := dryRunParam(q); dry {
		s.dryRun(ctx, w, op)
		return
	}
	res, err := s.h.ChangeMembership(ctx, op)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, changeJSON{ID: m.ID, Index: res.Index, Plan: res.Description})
}

// updateMember serves PUT /members/{id}: a member moved to another machine
// or address. Either address may be omitted (it keeps its value); the
// rest of the record (read-only flag, other metadata) is kept. The client
// address is the record's "client_addr" metadata, which each member
// publishes when it starts: a member restarted with another
// --listen-client publishes its new one itself.
func (s *server) updateMember(w http.ResponseWriter, r *http.Request, q url.Values) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		s.writeError(w, http.StatusBadRequest, "invalid_member", fmt.Sprintf("member ID %q: a positive integer is required", r.PathValue("id")))
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		PeerAddr   *string `json:"peer_addr"`
		ClientAddr *string `json:"client_addr"`
	}
	if err := decodeObject(body, &req, "peer_addr", "client_addr"); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_member", "the body is not a member's addresses: "+err.Error())
		return
	}
	if req.PeerAddr == nil && req.ClientAddr == nil {
		s.writeError(w, http.StatusBadRequest, "invalid_member", "nothing to change: give peer_addr, client_addr or both")
		return
	}
	for _, a := range []struct {
		name string
		v    *string
	}{{"peer_addr", req.PeerAddr}, {"client_addr", req.ClientAddr}} {
		if a.v == nil {
			continue
		}
		if err := checkMemberAddr(*a.v); err != nil {
			s.writeError(w, http.StatusBadRequest, "invalid_member", fmt.Sprintf("%s %q: %v", a.name, *a.v, err))
			return
		}
	}
	ctx, cancel := s.reqCtx(r)
	defer cancel()
	// The record is replaced whole: start from the one the leader has.
	mem, err := s.h.Membership(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	var rec *raft.Member
	for i := range mem.Members {
		if mem.Members[i].ID == id {
			rec = &mem.Members[i].Member
		}
	}
	dry, _ := dryRunParam(q)
	if rec == nil && !dry {
		s.writeError(w, http.StatusNotFound, "unknown_member", fmt.Sprintf("member %d is not in the configuration %s", id, mem.Config))
		return
	}
	m := raft.Member{ID: id}
	if rec != nil { // (a dry run of an unknown member lists the refusal)
		m = raft.Member{ID: id, PeerAddr: rec.PeerAddr, ReadOnly: rec.ReadOnly, Metadata: maps.Clone(rec.Metadata)}
	}
	if req.PeerAddr != nil {
		m.PeerAddr = *req.PeerAddr
	}
	if req.ClientAddr != nil {
		if m.Metadata == nil {
			m.Metadata = map[string]string{}
		}
		m.Metadata["client_addr"] = *req.ClientAddr
	}
	op := confchange.UpdateMember(m)
	if dry {
		s.dryRun(ctx, w, op)
		return
	}
	res, err := s.h.ChangeMembership(ctx, op)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, changeJSON{ID: id, Index: res.Index, Plan: res.Description})
}

// refusalJSON is one reason a dry run would be refused.
type refusalJSON struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

// dryRun answers ?dry_run=true: the plan and every refusal, each with its
// code (none when it would go through); nothing is proposed.
func (s *server) dryRun(ctx context.Context, w http.ResponseWriter, req confchange.Request) {
	res, err := s.h.CheckMembership(ctx, req)
	out := struct {
		Plan     string        `json:"plan"`
		Refusals []refusalJSON `json:"refusals"`
	}{Plan: res.Description, Refusals: []refusalJSON{}}
	var refs confchange.Refusals
	var ref *confchange.Refusal
	switch {
	case errors.As(err, &refs):
	case errors.As(err, &ref):
		refs = confchange.Refusals{ref}
	case err != nil:
		s.fail(w, err) // no leader, a timeout: not an answer about the request
		return
	}
	for _, r := range refs {
		out.Refusals = append(out.Refusals, refusalJSON{Code: r.Code(), Error: r.Error()})
	}
	if out.Plan == "" {
		out.Plan = req.String()
	}
	writeJSON(w, http.StatusOK, out)
}

// memberOp serves promote, demote and remove of /members/{id}.
func (s *server) memberOp(op string) func(http.ResponseWriter, *http.Request, url.Values) {
	return func(w http.ResponseWriter, r *http.Request, q url.Values) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil || id == 0 {
			s.writeError(w, http.StatusBadRequest, "invalid_member", fmt.Sprintf("member ID %q: a positive integer is required", r.PathValue("id")))
			return
		}
		var req confchange.Request
		switch op {
		case "promote":
			req = confchange.Promote(id)
		case "demote":
			req = confchange.Demote(id)
		default:
			req = confchange.Remove(id)
		}
		ctx, cancel := s.reqCtx(r)
		defer cancel()
		if dry, _ := dryRunParam(q); dry {
			s.dryRun(ctx, w, req)
			return
		}
		res, err := s.h.ChangeMembership(ctx, req)
		if err != nil {
			if code := confchange.Code(err); op == "promote" && code != "" {
				s.m.promoteErr.WithLabelValues(code).Inc()
			}
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, changeJSON{ID: id, Index: res.Index, Plan: res.Description})
	}
}

func (s *server) transferLeader(w http.ResponseWriter, r *http.Request, q url.Values) {
	to, err := strconv.ParseUint(q.Get("to"), 10, 64)
	if err != nil || to == 0 {
		s.writeError(w, http.StatusBadRequest, "invalid_request", "to: the member ID to hand leadership to is required (?to=ID)")
		return
	}
	ctx, cancel := s.reqCtx(r)
	defer cancel()
	if err := s.h.TransferLeadership(ctx, to); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]uint64{"leader": to})
}
