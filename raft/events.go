package raft

import (
	"sync"
	"sync/atomic"
)

// Role is a member's role as this member sees itself.
type Role int

// Roles.
const (
	RoleFollower Role = iota
	RoleCandidate
	RoleLeader
	RoleLearner
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleCandidate:
		return "candidate"
	case RoleLeader:
		return "leader"
	case RoleLearner:
		return "learner"
	}
	return "unknown"
}

// EventType says what an Event reports.
type EventType int

// Event types.
const (
	// EventLeaderChanged: Leader and Term hold the new leader (0: none known).
	EventLeaderChanged EventType = iota + 1
	// EventRoleChanged: Role holds this member's new role.
	EventRoleChanged
	// EventSnapshotCreated: Index holds the index of a local snapshot just written.
	EventSnapshotCreated
	// EventSnapshotRestored: Index holds the index of a snapshot the state
	// machine was just restored from (from the leader, or at start).
	EventSnapshotRestored
	// EventMembershipChanged: Index holds the index of a configuration
	// change just applied (see Node.Membership for the new membership).
	EventMembershipChanged
	// EventRemoved: this member was removed from the cluster at Index.
	EventRemoved
	// EventCatchUp (on the leader, about once a second per member): Member
	// is behind the readiness threshold or receiving a snapshot; CatchUp
	// says how far it has come.
	EventCatchUp
	// EventSettingsChanged: Index holds the index of a change of the
	// replicated cluster settings just applied (see Node.Settings).
	EventSettingsChanged
	// EventPolicyWaiting (on the leader): what the default policy waits for
	// changed; Detail says it ("" once it waits for nothing), as
	// Membership.Waiting does.
	EventPolicyWaiting
)

func (t EventType) String() string {
	switch t {
	case EventLeaderChanged:
		return "leader-changed"
	case EventRoleChanged:
		return "role-changed"
	case EventSnapshotCreated:
		return "snapshot-created"
	case EventSnapshotRestored:
		return "snapshot-restored"
	case EventMembershipChanged:
		return "membership-changed"
	case EventRemoved:
		return "removed"
	case EventCatchUp:
		return "catch-up"
	case EventSettingsChanged:
		return "settings-changed"
	case EventPolicyWaiting:
		return "policy-waiting"
	}
	return "unknown"
}

// Event is something that happened to the node. Which fields are set
// depends on Type.
type Event struct {
	Type   EventType
	Term   uint64
	Leader uint64
	Role   Role
	Index  uint64
	// Member is the member an EventCatchUp is about.
	Member uint64
	// CatchUp is set on EventCatchUp.
	CatchUp *CatchUp
	// Detail is set on EventPolicyWaiting.
	Detail string
}

// Subscribe returns a channel of events with room for buf of them, and a
// function that ends the subscription. Events are sent without blocking: a
// subscriber that does not keep up misses events (see Status.EventsDropped),
// it never slows the node down. The channel is closed when the subscription
// ends and once the node has stopped (a Subscribe after that returns a
// closed channel), so a range over it ends.
func (n *Node) Subscribe(buf int) (<-chan Event, func()) {
	if buf < 1 {
		buf = 1
	}
	ch := make(chan Event, buf)
	h := n.events.get()
	h.mu.Lock()
	if h.closed {
		close(ch)
		h.mu.Unlock()
		return ch, func() {}
	}
	if h.subs == nil {
		h.subs = make(map[chan Event]struct{})
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// eventHub is a node's subscribers, made with the first (most of a host's
// many nodes have none: an emit then only loads a nil pointer).
type eventHub struct {
	p atomic.Pointer[eventSubs]
}

// eventSubs are the subscribers of a node that has had any, or
// closedEventSubs for a node that stopped with none.
type eventSubs struct {
	mu      sync.Mutex
	subs    map[chan Event]struct{}
	closed  bool
	dropped atomic.Uint64
}

// closedEventSubs are the subscribers of every node that stopped before
// anyone subscribed: none, closed (never written but by Subscribe's reads).
var closedEventSubs = &eventSubs{closed: true}

// get returns the subscribers, made with the first.
func (h *eventHub) get() *eventSubs {
	if s := h.p.Load(); s != nil {
		return s
	}
	h.p.CompareAndSwap(nil, new(eventSubs))
	return h.p.Load()
}

// droppedCount returns the events subscribers missed (Status.EventsDropped).
func (h *eventHub) droppedCount() uint64 {
	if s := h.p.Load(); s != nil {
		return s.dropped.Load()
	}
	return 0
}

func (h *eventHub) emit(e Event) {
	s := h.p.Load()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- e:
		default:
			s.dropped.Add(1)
		}
	}
}

// closeAll closes every subscriber's channel (the node stopped).
func (h *eventHub) closeAll() {
	if h.p.CompareAndSwap(nil, closedEventSubs) {
		return
	}
	s := h.p.Load()
	if s == closedEventSubs {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ch := range s.subs {
		delete(s.subs, ch)
		close(ch)
	}
}

// nodeState is what the run loop publishes about leadership.
type nodeState struct {
	leader, term uint64
	role         Role
}
