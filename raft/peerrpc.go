package raft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/understudy-raft/understudy/raft/raftio"

	"github.com/understudy-raft/understudy/confchange"
)

// The member-to-member requests the node serves (through
// Transport.Call / PeerHandler.ServeRequest): a follower or learner forwards
// a membership change, its dry run, a leadership transfer or a Membership
// query to the leader.
// They are rare and small, so they travel as versioned JSON: easy to
// evolve and to decode defensively.

const peerRPCVersion = 1

// Request ops.
const (
	rpcChange     = "change"
	rpcCheck      = "check"
	rpcMembership = "membership"
	rpcDiscover   = "discover" // a joiner asks any member about the cluster
	// rpcTransfer asks the leader to start a leadership transfer to
	// Req.IDs[0] (Req is confchange.TransferLeader); the asker waits for it.
	rpcTransfer = "transfer"
)

type rpcRequest struct {
	V   int                `json:"v"`
	Op  string             `json:"op"`
	Req confchange.Request `json:"req,omitzero"`
}

type rpcResponse struct {
	V          int           `json:"v"`
	Result     *ChangeResult `json:"result,omitempty"`
	Membership *Membership   `json:"membership,omitempty"`
	Cluster    *ClusterInfo  `json:"cluster,omitempty"`
	Err        *rpcError     `json:"error,omitempty"`
}

// rpcError carries an error across members so that errors.Is still works on
// the caller's side: the refusals with their numbers, or a node error's code.
type rpcError struct {
	Code     string       `json:"code"`
	Message  string       `json:"message"`
	Leader   uint64       `json:"leader,omitempty"` // for not_leader
	Refusals []rpcRefusal `json:"refusals,omitempty"`
}

type rpcRefusal struct {
	Code      string            `json:"code"`
	ID        uint64            `json:"id,omitempty"`
	Detail    string            `json:"detail"`
	Readiness confchange.Reason `json:"readiness,omitzero"`
	Quorum    confchange.Quorum `json:"quorum,omitzero"`
}

// nodeErrors are the node's errors that cross the wire by code, matched in
// this order.
var nodeErrors = []struct {
	code string
	err  error
}{
	{"leader_changed", ErrLeaderChanged},
	{"timeout", ErrTimeout},
	{"change_dropped", ErrChangeDropped},
	{"proposal_dropped", ErrProposalDropped},
	{"removed", ErrRemoved},
	{"stopped", ErrStopped},
	{"no_leader", ErrNoLeader},
	{"deadline", context.DeadlineExceeded},
	{"canceled", context.Canceled},
}

// refusalErrors are confchange's sentinels by code.
var refusalErrors = func() map[string]error {
	m := make(map[string]error)
	for _, err := range []error{
		confchange.ErrLearnerNotReady, confchange.ErrQuorumAtRisk, confchange.ErrLearnerCannotLead,
		confchange.ErrChangeInProgress, confchange.ErrTooManyLearners, confchange.ErrMemberExists,
		confchange.ErrUnknownMember, confchange.ErrInvalidMember, confchange.ErrTooManyVoters,
		confchange.ErrMemberReadOnly, confchange.ErrInvalidRequest, confchange.ErrInvalidSettings,
		confchange.ErrBadContext, confchange.ErrPolicyWouldUndo,
	} {
		m[confchange.Code(err)] = err
	}
	return m
}()

func toRPCError(err error) *rpcError {
	if err == nil {
		return nil
	}
	e := &rpcError{Message: err.Error()}
	var nl errNotLeader
	if errors.As(err, &nl) {
		e.Code, e.Leader = "not_leader", nl.leader
		return e
	}
	if errors.Is(err, ErrNotProposed) && errors.Is(err, ErrStopped) {
		// This member stopped (it may have just removed itself) before the
		// request reached raft: the caller asks the next leader.
		e.Code = "not_leader"
		return e
	}
	var refs confchange.Refusals
	var ref *confchange.Refusal
	switch {
	case errors.As(err, &refs):
	case errors.As(err, &ref):
		refs = confchange.Refusals{ref}
	}
	if len(refs) > 0 {
		e.Code = refs[0].Code()
		for _, r := range refs {
			e.Refusals = append(e.Refusals, rpcRefusal{Code: r.Code(), ID: r.ID, Detail: r.Detail, Readiness: r.Readiness, Quorum: r.Quorum})
		}
		return e
	}
	for _, ne := range nodeErrors {
		if errors.Is(err, ne.err) {
			e.Code = ne.code
			return e
		}
	}
	e.Code = "internal"
	return e
}

// remoteError is an error the leader returned: it reads as the leader's
// message and unwraps to the sentinel it matched there.
type remoteError struct {
	from uint64
	msg  string
	err  error
}

func (e *remoteError) Error() string { return fmt.Sprintf("%s (at member %d)", e.msg, e.from) }
func (e *remoteError) Unwrap() error { return e.err }

func (e *rpcError) toError(from uint64) error {
	if len(e.Refusals) > 0 {
		refs := make(confchange.Refusals, 0, len(e.Refusals))
		for _, r := range e.Refusals {
			sentinel, ok := refusalErrors[r.Code]
			if !ok {
				sentinel = confchange.ErrInvalidRequest
			}
			refs = append(refs, &confchange.Refusal{Err: sentinel, ID: r.ID, Detail: r.Detail, Readiness: r.Readiness, Quorum: r.Quorum})
		}
		if len(refs) == 1 {
			return refs[0]
		}
		return refs
	}
	if e.Code == "not_leader" {
		return errNotLeader{leader: e.Leader}
	}
	re := &remoteError{from: from, msg: e.Message}
	for _, ne := range nodeErrors {
		if ne.code == e.Code {
			re.err = ne.err
		}
	}
	return re
}

// serveRequest answers a member-to-member request. Failures to decode are
// returned as errors (the caller gets them as text); everything the node
// decides travels in the response.
func (n *Node) serveRequest(ctx context.Context, from uint64, b []byte) ([]byte, error) {
	var req rpcRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("raft: member %d: malformed request from %d: %w", n.cfg.ID, from, err)
	}
	if req.V != peerRPCVersion {
		return nil, fmt.Errorf("raft: member %d: request version %d from %d, this member speaks %d", n.cfg.ID, req.V, from, peerRPCVersion)
	}
	resp := rpcResponse{V: peerRPCVersion}
	switch req.Op {
	case rpcChange, rpcCheck:
		var res ChangeResult
		err := n.checkIncarnation(req.Req, from)
		if err == nil {
			res, err = n.changeLocally(ctx, req.Req, req.Op == rpcCheck)
		}
		resp.Result, resp.Err = &res, toRPCError(err)
	case rpcMembership:
		// What f writes is read only once n.do returned nil (f ran): after
		// an early return the loop may still run f.
		var (
			m       Membership
			loopErr error
		)
		err := n.doQuiet(ctx, func() { m, loopErr = n.membershipOnLoop() })
		if err != nil {
			err = notProposed(err) // a query: nothing was done
		} else {
			err = loopErr
		}
		if err == nil {
			resp.Membership = &m
		}
		resp.Err = toRPCError(err)
	case rpcTransfer:
		if req.Req.Op != confchange.OpTransferLeader || len(req.Req.IDs) != 1 {
			return nil, fmt.Errorf("raft: member %d: malformed transfer request from %d: %v", n.cfg.ID, from, req.Req)
		}
		var loopErr error
		err := n.do(ctx, func() { loopErr = n.transferOnLeader(req.Req.IDs[0]) })
		if err != nil {
			err = notProposed(err) // (f may still run: loopErr is not read)
		} else {
			err = loopErr
		}
		resp.Err = toRPCError(err)
	case rpcDiscover:
		if n.members.Load() == nil {
			// Made, not started: a host hands the replica's transport its
			// handler before Start installs the member table, and a
			// joiner's CheckBootstrap asks every listed member at once.
			return nil, fmt.Errorf("raft: member %d: %w", n.cfg.ID, ErrNotStarted)
		}
		ci := n.clusterInfo()
		resp.Cluster = &ci
	default:
		return nil, fmt.Errorf("raft: member %d: unknown request op %q from %d", n.cfg.ID, req.Op, from)
	}
	return json.Marshal(resp)
}

// forwardError is a failure to reach the leader with a forwarded request
// (the transport's error, not the leader's answer).
type forwardError struct {
	leader uint64
	err    error
}

func (e *forwardError) Error() string {
	return fmt.Sprintf("raft: forwarding to leader %d: %v", e.leader, e.err)
}
func (e *forwardError) Unwrap() error { return e.err }

// retryForward reports whether a forwarded request that failed with err
// should be sent again once a leader is known (again): always when it
// changes nothing (a query, a dry run), else only when the transport says
// it never reached the leader — a removed or stopped leader, a dial
// failure — so a change is never applied twice.
func retryForward(err error, readOnly bool) bool {
	var fe *forwardError
	if !errors.As(err, &fe) {
		return false
	}
	return readOnly || errors.Is(err, raftio.ErrNotSent)
}

// maxForwardHops bounds how often a forwarded request follows a
// "not the leader" answer to the next leader.
const maxForwardHops = 3

// call sends a request to the leader, following a leader change.
func (n *Node) call(ctx context.Context, leader uint64, req rpcRequest) (rpcResponse, error) {
	req.V = peerRPCVersion
	b, err := json.Marshal(req)
	if err != nil {
		return rpcResponse{}, err
	}
	for hop := 0; ; hop++ {
		out, err := n.tr.Call(ctx, leader, b)
		if err != nil {
			return rpcResponse{}, &forwardError{leader: leader, err: err}
		}
		var resp rpcResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			return rpcResponse{}, fmt.Errorf("raft: malformed answer from leader %d: %w", leader, err)
		}
		if resp.V != peerRPCVersion {
			return rpcResponse{}, fmt.Errorf("raft: answer version %d from leader %d, this member speaks %d", resp.V, leader, peerRPCVersion)
		}
		if resp.Err != nil && resp.Err.Code == "not_leader" && hop < maxForwardHops && resp.Err.Leader != n.cfg.ID && resp.Err.Leader != 0 {
			leader = resp.Err.Leader
			continue
		}
		return resp, nil
	}
}

func (n *Node) forwardChange(ctx context.Context, leader uint64, req confchange.Request, dryRun bool) (ChangeResult, error) {
	op := rpcChange
	if dryRun {
		op = rpcCheck
	}
	resp, err := n.call(ctx, leader, rpcRequest{Op: op, Req: req})
	if err != nil {
		return ChangeResult{}, err
	}
	var res ChangeResult
	if resp.Result != nil {
		res = *resp.Result
	}
	if resp.Err != nil {
		return res, resp.Err.toError(leader)
	}
	return res, nil
}

func (n *Node) forwardMembership(ctx context.Context, leader uint64) (Membership, error) {
	resp, err := n.call(ctx, leader, rpcRequest{Op: rpcMembership})
	if err != nil {
		return Membership{}, err
	}
	if resp.Err != nil {
		return Membership{}, resp.Err.toError(leader)
	}
	if resp.Membership == nil {
		return Membership{}, fmt.Errorf("raft: leader %d answered without the membership", leader)
	}
	return *resp.Membership, nil
}

// forwardTransfer asks leader to start a leadership transfer to member to.
func (n *Node) forwardTransfer(ctx context.Context, leader, to uint64) error {
	resp, err := n.call(ctx, leader, rpcRequest{Op: rpcTransfer, Req: confchange.TransferLeader(to)})
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err.toError(leader)
	}
	return nil
}
