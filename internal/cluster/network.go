package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/raft/raftio"
	"github.com/understudy-raft/understudy/transport"
)

// Network is an in-process, fault-injecting message network between the
// members of a Cluster. Every random decision comes from one seeded source,
// so a failing run can be replayed with its seed (delivery timing still
// depends on the scheduler). Messages are cloned on the way, as a real
// transport would serialize them.
type Network struct {
	mu        sync.Mutex
	rng       *rand.Rand
	endpoints map[uint64]*endpoint
	blocked   map[link]bool    // one-way: from -> to
	dropRate  map[link]float64 // per link; link{0,0} is every link
	delayMax  time.Duration
	dupRate   float64
	filter    func(from uint64, m *raftpb.Message) bool
	stats     NetStats
	sentBy    map[uint64]*Traffic // what each member sent (relay.go)
	recvBy    map[uint64]*Traffic // what was delivered to each member
	authored  map[authored]uint64 // messages by author, addressee and type
	// authoredBytes: their bytes (AuthoredBytes)
	authoredBytes map[authored]uint64
	noAnswers     atomic.Bool       // SetRelayedAnswers(false)
	direct        map[link]uint64   // messages sent directly (not in an envelope), by link
	linkSent      map[link]*Traffic // what was sent, by link (LinkTraffic)
	snapsTo       map[uint64]uint64 // snapshot sends attempted, by receiver
	paused        map[uint64]bool   // members whose messages are held (Pause)
	held          []heldMsg         // messages to or from a paused member, in order
	closed        bool
	wg            sync.WaitGroup

	// hosts are the members' hosts' liveness (SetHostLive).
	hosts map[uint64]hostState
}

type link struct{ from, to uint64 }

// heldMsg is a message (or a relay envelope to to) held while its sender
// or receiver is paused.
type heldMsg struct {
	from uint64
	m    *raftpb.Message
	to   uint64
	env  *raftio.RelayEnvelope
}

// hostState is a member's host's liveness as SetHostLive set it: at is
// when it was last live.
type hostState struct {
	live bool
	at   time.Time
}

// NetStats counts what the network did.
type NetStats struct {
	Sent, Delivered, Dropped, Duplicated, Snapshots uint64
	// Envelopes counts the relay envelopes sent (in Sent too).
	Envelopes uint64
}

// NewNetwork returns a network whose random decisions come from seed.
func NewNetwork(seed int64) *Network {
	return &Network{
		rng:           rand.New(rand.NewSource(seed)),
		endpoints:     make(map[uint64]*endpoint),
		blocked:       make(map[link]bool),
		dropRate:      make(map[link]float64),
		snapsTo:       make(map[uint64]uint64),
		paused:        make(map[uint64]bool),
		hosts:         make(map[uint64]hostState),
		sentBy:        make(map[uint64]*Traffic),
		recvBy:        make(map[uint64]*Traffic),
		authored:      make(map[authored]uint64),
		authoredBytes: make(map[authored]uint64),
		direct:        make(map[link]uint64),
		linkSent:      make(map[link]*Traffic),
	}
}

// SetHostLive sets whether the host member id runs on is live, as a host
// link's pings would say it to every other member, and tells the other
// members of a change (PeerHandler.HostLiveness), as transport.Transport
// does. Until it is set, nothing is known of it (HostContact: the zero
// time, false). It touches no message: the network's partitions and
// pauses are the groups' traffic, this the hosts'.
func (nw *Network) SetHostLive(id uint64, live bool) {
	now := time.Now()
	nw.mu.Lock()
	prev, known := nw.hosts[id]
	st := hostState{live: live, at: now}
	if !live && known && !prev.live {
		st.at = prev.at // still its last moment live
	}
	nw.hosts[id] = st
	var tell []*endpoint
	if !known || prev.live != live {
		for oid, ep := range nw.endpoints {
			if oid != id {
				tell = append(tell, ep)
			}
		}
	}
	nw.mu.Unlock()
	for _, ep := range tell {
		ep.handler.HostLiveness(id, live, st.at)
	}
}

// HostContact is raft.LivenessTransport's: (now, true) while member id's
// host is live, else when it was last live and false.
func (ep *endpoint) HostContact(id uint64) (time.Time, bool) {
	ep.net.mu.Lock()
	st, ok := ep.net.hosts[id]
	ep.net.mu.Unlock()
	switch {
	case !ok:
		return time.Time{}, false
	case st.live:
		return time.Now(), true
	}
	return st.at, false
}

// SnapshotsTo returns how many snapshot sends to member id were attempted
// (dropped ones included).
func (nw *Network) SnapshotsTo(id uint64) uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.snapsTo[id]
}

// endpoint is one member's attachment: a Transport for its node, and the
// handler and storage messages to it are delivered to.
type endpoint struct {
	net     *Network
	id      uint64
	handler raft.PeerHandler
	store   raft.Storage
	queue   chan delivery
	done    chan struct{}

	mu       sync.Mutex
	removed  map[uint64]bool // members this one removed: it refuses them, as the TCP transport does
	learners map[uint64]bool // what the node told it with SetLearner
}

// attach connects member id; messages to it go to h, snapshots into store.
// A previous attachment of id is detached first.
func (nw *Network) attach(id uint64, h raft.PeerHandler, store raft.Storage) *endpoint {
	nw.detach(id)
	ep := &endpoint{net: nw, id: id, handler: h, store: store, queue: make(chan delivery, 8192), done: make(chan struct{})}
	nw.mu.Lock()
	nw.endpoints[id] = ep
	nw.mu.Unlock()
	nw.wg.Add(1)
	go ep.deliverLoop()
	return ep
}

// detach disconnects member id (a crashed or stopped member): messages to it
// are dropped.
func (nw *Network) detach(id uint64) {
	nw.mu.Lock()
	ep := nw.endpoints[id]
	delete(nw.endpoints, id)
	nw.mu.Unlock()
	if ep != nil {
		close(ep.done)
	}
}

func (ep *endpoint) deliverLoop() {
	defer ep.net.wg.Done()
	for {
		select {
		case d := <-ep.queue:
			ep.deliver(d)
		case <-ep.done:
			return
		}
	}
}

// Partition splits the members into groups that cannot talk to each other
// (both directions). Members in no group are cut off from everyone.
func (nw *Network) Partition(groups ...[]uint64) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.blocked = make(map[link]bool)
	group := make(map[uint64]int)
	for i, g := range groups {
		for _, id := range g {
			group[id] = i + 1
		}
	}
	ids := nw.knownIDsLocked(groups)
	for _, a := range ids {
		for _, b := range ids {
			if a != b && (group[a] == 0 || group[a] != group[b]) {
				nw.blocked[link{a, b}] = true
			}
		}
	}
}

func (nw *Network) knownIDsLocked(groups [][]uint64) []uint64 {
	seen := make(map[uint64]bool)
	var ids []uint64
	add := func(id uint64) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for id := range nw.endpoints {
		add(id)
	}
	for _, g := range groups {
		for _, id := range g {
			add(id)
		}
	}
	return ids
}

// Isolate cuts member id off from everyone, both ways.
func (nw *Network) Isolate(id uint64) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, other := range nw.knownIDsLocked([][]uint64{{id}}) {
		if other != id {
			nw.blocked[link{id, other}] = true
			nw.blocked[link{other, id}] = true
		}
	}
}

// Block cuts the one-way link from -> to.
func (nw *Network) Block(from, to uint64) {
	nw.mu.Lock()
	nw.blocked[link{from, to}] = true
	nw.mu.Unlock()
}

// Unblock restores the one-way link from -> to.
func (nw *Network) Unblock(from, to uint64) {
	nw.mu.Lock()
	delete(nw.blocked, link{from, to})
	nw.mu.Unlock()
}

// Pause freezes member id's traffic, as a stopped (SIGSTOP) process would
// see it: messages to and from it are held, in order, and delivered when
// it resumes — by then they are old, and arrive in a burst. Snapshot
// streams to or from it fail.
func (nw *Network) Pause(id uint64) {
	nw.mu.Lock()
	nw.paused[id] = true
	nw.mu.Unlock()
}

// Resume delivers what Pause held for member id (except messages whose
// other end is still paused) and lets its traffic flow again.
func (nw *Network) Resume(id uint64) {
	nw.mu.Lock()
	delete(nw.paused, id)
	var release []heldMsg
	kept := nw.held[:0]
	for _, h := range nw.held {
		if nw.paused[h.from] || nw.paused[h.m.GetTo()] {
			kept = append(kept, h)
		} else {
			release = append(release, h)
		}
	}
	nw.held = kept
	nw.mu.Unlock()
	for _, h := range release {
		if h.env != nil {
			nw.sendRelay(h.from, h.to, h.env)
			continue
		}
		nw.send(h.from, h.m)
	}
}

// SetFilter drops every message for which drop returns true (nil: none),
// e.g. one kind of entry from one member. drop must not call the Network.
func (nw *Network) SetFilter(drop func(from uint64, m *raftpb.Message) bool) {
	nw.mu.Lock()
	nw.filter = drop
	nw.mu.Unlock()
}

// Heal removes every partition and block, filter, drop rate, delay and
// duplication, and resumes paused members.
func (nw *Network) Heal() {
	nw.mu.Lock()
	paused := slices.Collect(maps.Keys(nw.paused))
	nw.mu.Unlock()
	for _, id := range paused {
		nw.Resume(id)
	}
	nw.mu.Lock()
	nw.blocked = make(map[link]bool)
	nw.filter = nil
	nw.dropRate = make(map[link]float64)
	nw.delayMax = 0
	nw.dupRate = 0
	nw.mu.Unlock()
}

// SetDropRate drops each message from -> to with probability p (0 for from
// and to: every link).
func (nw *Network) SetDropRate(from, to uint64, p float64) {
	nw.mu.Lock()
	nw.dropRate[link{from, to}] = p
	nw.mu.Unlock()
}

// SetDelay delays each message by a random duration up to max, which also
// reorders them.
func (nw *Network) SetDelay(max time.Duration) {
	nw.mu.Lock()
	nw.delayMax = max
	nw.mu.Unlock()
}

// SetDuplicateRate delivers each message twice with probability p.
func (nw *Network) SetDuplicateRate(p float64) {
	nw.mu.Lock()
	nw.dupRate = p
	nw.mu.Unlock()
}

// Stats returns the network's counters.
func (nw *Network) Stats() NetStats {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.stats
}

// Close stops every delivery goroutine.
func (nw *Network) Close() {
	nw.mu.Lock()
	nw.closed = true
	eps := nw.endpoints
	nw.endpoints = make(map[uint64]*endpoint)
	nw.mu.Unlock()
	for _, ep := range eps {
		close(ep.done)
	}
	nw.wg.Wait()
}

// send routes one message from ep's member.
func (nw *Network) send(from uint64, m *raftpb.Message) {
	to := m.GetTo()
	nw.mu.Lock()
	if (nw.paused[from] || nw.paused[to]) && !nw.closed && m.GetType() != raftpb.MsgSnap {
		nw.held = append(nw.held, heldMsg{from: from, m: proto.Clone(m).(*raftpb.Message)})
		nw.mu.Unlock()
		return
	}
	nw.stats.Sent++
	size := proto.Size(m)
	nw.countLocked(from, len(m.Entries), size, 1)
	nw.countLinkLocked(from, to, len(m.Entries), size, 1, false)
	nw.authored[authored{from, to, m.GetType()}]++
	nw.authoredBytes[authored{from, to, m.GetType()}] += uint64(size)
	nw.direct[link{from, to}]++
	dst := nw.endpoints[to]
	src := nw.endpoints[from]
	l := link{from, to}
	p := nw.dropRate[l]
	if all := nw.dropRate[link{}]; all > p {
		p = all
	}
	// As the TCP transport does, a message whose sender is not the member
	// sending it is refused (the transport also drops the stream).
	drop := nw.closed || dst == nil || m.GetFrom() != from || nw.blocked[l] || nw.paused[from] || nw.paused[to] || (p > 0 && nw.rng.Float64() < p) ||
		(nw.filter != nil && nw.filter(from, m))
	copies := 1
	if !drop && nw.dupRate > 0 && nw.rng.Float64() < nw.dupRate {
		copies = 2
		nw.stats.Duplicated++
	}
	var delays [2]time.Duration
	if nw.delayMax > 0 {
		for i := range copies {
			delays[i] = time.Duration(nw.rng.Int63n(int64(nw.delayMax)))
		}
	}
	refused := false
	if !drop && dst.refuses(from) {
		drop, refused = true, true
	}
	if drop {
		nw.stats.Dropped++
	} else {
		nw.stats.Delivered += uint64(copies)
		nw.countReceivedLocked(to, copies, len(m.Entries), size, 1, false)
	}
	nw.mu.Unlock()

	if refused && src != nil {
		// The receiver knows the sender as removed and says so, as the TCP
		// transport's handshake does; the sender learns it is removed.
		nw.wg.Add(1)
		go func() {
			defer nw.wg.Done()
			src.handler.ReportRefused(to, fmt.Errorf("cluster: %w", transport.ErrRemoved))
		}()
		return
	}
	if m.GetType() == raftpb.MsgSnap {
		nw.sendSnapshot(src, dst, m, drop)
		return
	}
	if drop {
		return
	}
	for i := range copies {
		c := proto.Clone(m).(*raftpb.Message)
		if delays[i] == 0 {
			dst.enqueue(delivery{m: c})
			continue
		}
		time.AfterFunc(delays[i], func() { dst.enqueue(delivery{m: c}) })
	}
}

func (ep *endpoint) enqueue(d delivery) {
	select {
	case ep.queue <- d:
	case <-ep.done:
	default: // full: dropped, as a real transport's bounded queue would
	}
}

// sendSnapshot streams the snapshot's data from the sender's storage into
// the receiver's, then delivers the MsgSnap, and reports the outcome to the
// sender, as the TCP transport does.
func (nw *Network) sendSnapshot(src, dst *endpoint, m *raftpb.Message, drop bool) {
	if src == nil {
		return
	}
	to := m.GetTo()
	nw.mu.Lock()
	nw.snapsTo[to]++
	nw.mu.Unlock()
	if drop {
		src.handler.ReportSnapshot(to, etcdraft.SnapshotFailure)
		return
	}
	nw.mu.Lock()
	nw.stats.Snapshots++
	nw.mu.Unlock()
	c := proto.Clone(m).(*raftpb.Message)
	nw.wg.Add(1)
	go func() {
		defer nw.wg.Done()
		err := func() error {
			rc, _, err := src.store.OpenSnapshot(c.GetSnapshot())
			if err != nil {
				return err
			}
			defer rc.Close()
			return dst.store.ReceiveSnapshot(c.GetSnapshot(), io.Reader(rc))
		}()
		if err != nil {
			src.handler.ReportSnapshot(to, etcdraft.SnapshotFailure)
			return
		}
		dst.enqueue(delivery{m: c})
		src.handler.ReportSnapshot(to, etcdraft.SnapshotFinish)
	}()
}

// Send implements raft.Transport.
func (ep *endpoint) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		ep.net.send(ep.id, m)
	}
}

// AddPeer implements raft.Transport; the network routes by ID.
func (ep *endpoint) AddPeer(uint64, string) {}

// UpdatePeer implements raft.Transport.
func (ep *endpoint) UpdatePeer(uint64, string) {}

// RemovePeer implements raft.Transport: messages from id are refused from
// now on, and id is told it was removed.
func (ep *endpoint) RemovePeer(id uint64) {
	ep.mu.Lock()
	if ep.removed == nil {
		ep.removed = make(map[uint64]bool)
	}
	ep.removed[id] = true
	ep.mu.Unlock()
}

// SetLearner implements raft.Transport: the flag is recorded for
// Network.PeerIsLearner.
func (ep *endpoint) SetLearner(id uint64, learner bool) {
	ep.mu.Lock()
	if ep.learners == nil {
		ep.learners = make(map[uint64]bool)
	}
	ep.learners[id] = learner
	ep.mu.Unlock()
}

// PeerIsLearner reports what member at's node last told its transport
// about peer (SetLearner): learner, and whether it said anything at all.
func (nw *Network) PeerIsLearner(at, peer uint64) (learner, told bool) {
	nw.mu.Lock()
	ep := nw.endpoints[at]
	nw.mu.Unlock()
	if ep == nil {
		return false, false
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	learner, told = ep.learners[peer]
	return learner, told
}

func (ep *endpoint) refuses(id uint64) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.removed[id]
}

// ErrUnreachable is what Call returns when the network does not deliver.
var ErrUnreachable = errors.New("cluster: member unreachable")

// Call implements raft.Transport: the request reaches member to's handler
// unless the link is down in either direction, dropped, or to is detached.
func (ep *endpoint) Call(ctx context.Context, to uint64, req []byte) ([]byte, error) {
	nw := ep.net
	nw.mu.Lock()
	dst := nw.endpoints[to]
	p := max(nw.dropRate[link{ep.id, to}], nw.dropRate[link{}])
	down := nw.closed || dst == nil || nw.blocked[link{ep.id, to}] || nw.blocked[link{to, ep.id}] ||
		nw.paused[ep.id] || nw.paused[to] || (p > 0 && nw.rng.Float64() < p)
	nw.mu.Unlock()
	if down {
		return nil, fmt.Errorf("%w: %d (%w)", ErrUnreachable, to, transport.ErrNotSent)
	}
	if dst.refuses(ep.id) {
		return nil, fmt.Errorf("cluster: member %d: %w (%w)", to, transport.ErrRemoved, transport.ErrNotSent)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return dst.handler.ServeRequest(ctx, ep.id, bytes.Clone(req))
}
