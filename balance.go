package understudy

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/understudy-raft/understudy/internal/placement"
	"github.com/understudy-raft/understudy/raft"
)

// LeaderBalance tunes how a host spreads its groups' leadership over the
// hosts they span (see "Leaders spread over hosts" in
// docs/architecture.md). Every Interval, a host that leads more of its
// groups than its share rounded up hands some of them — at most MaxMoves a
// round — to a voter on a host that leads fewer than its share, and only
// to a voter that is caught up and answering, with no membership change
// in motion (raft.Node.TryTransferLeadership: the target wins at once,
// with no election timeout in between). Only a host's own leaderships
// move, so hosts balancing at once never move the same group.
//
// It is on by default: without it, the host that starts its groups first
// (or the only one up while the others restart) ends up leading most of
// them — 5,081 of 10,000 on one of three hosts in groupload — so that its
// loss leaves half the groups without a leader at once, and its CPU and
// disk carry most of the writes. A move costs a wake of a quiesced group
// and one message; rounds are bounded. CockroachDB rebalances its leases
// likewise; dragonboat leaves leadership where elections put it.
// While a voter of one of its groups is on a host that is not live, a
// host moves nothing: the dead host's groups elected leaders elsewhere,
// and moves would wake quiesced groups the dead host does not touch (and
// be undone when it returns). Disable it where the application places
// leaders itself.
type LeaderBalance struct {
	// Disabled turns balancing off.
	Disabled bool
	// Interval is the time between rounds. Default 1s.
	Interval time.Duration
	// MaxMoves bounds the leaderships a host hands over in a round.
	// Default 64.
	MaxMoves int
}

func (b LeaderBalance) withDefaults() LeaderBalance {
	if b.Interval <= 0 {
		b.Interval = time.Second
	}
	if b.MaxMoves <= 0 {
		b.MaxMoves = 64
	}
	return b
}

// balanceRefusedRounds is for how many rounds a group whose move was
// refused (its target not caught up, a membership change in motion) is
// left out of the plans.
const balanceRefusedRounds = 5

// balancer is a host's leader balancing: a goroutine that runs a round
// every Interval until the host closes.
type balancer struct {
	h       *Host
	cfg     LeaderBalance
	stop    context.CancelFunc
	done    chan struct{}
	refused map[uint64]time.Time // group ID: left out of the plans until then
	vb      viewBufs
	// last is the fingerprint of the last round that planned nothing, and
	// quiet the rounds since: a round with the same fingerprint skips the
	// view, up to balanceRescanRounds.
	last  uint64
	quiet int
}

// balanceRescanRounds is how many rounds with nothing changed (the same
// fingerprint) a host skips before it reads its whole view again.
const balanceRescanRounds = 300

// startBalancer starts h's balancing unless it is disabled.
func (h *Host) startBalancer() {
	cfg := h.cfg.LeaderBalance.withDefaults()
	if cfg.Disabled {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &balancer{h: h, cfg: cfg, stop: cancel, done: make(chan struct{}), refused: map[uint64]time.Time{}}
	h.balance = b
	go b.run(ctx)
}

// stopBalancer stops h's balancing and waits for its round to end.
func (h *Host) stopBalancer() {
	if b := h.balance; b != nil {
		b.stop()
		<-b.done
	}
}

func (b *balancer) run(ctx context.Context) {
	defer close(b.done)
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.round(ctx)
	}
}

// round plans this host's moves over its groups as it sees them now
// (placement.LeaderMoves) and carries them out, one at a time.
func (b *balancer) round(ctx context.Context) {
	now := time.Now()
	for id, until := range b.refused {
		if now.After(until) {
			delete(b.refused, id)
		}
	}
	// An idle host costs next to nothing: unless a group's leader, term or
	// role, the groups run, its peers' liveness or the refusals changed
	// since a round that planned nothing, the round reads no view (a few
	// counters, whatever the number of groups).
	fp := b.h.leaderFingerprint() ^ uint64(len(b.refused))
	if fp == b.last && b.quiet < balanceRescanRounds {
		if b.quiet == 0 {
			b.vb = viewBufs{} // a quiet host keeps no view's buffers
		}
		b.quiet++
		return
	}
	if leaderless, total := b.h.leaderless(); leaderless > max(total/16, 1) {
		// An election storm (a peer host died, or the groups start): the
		// loads move by themselves; plan once they have settled.
		return
	}
	self, view, byID := b.h.leaderView(b.refused, &b.vb)
	defer b.vb.release()
	if placement.HostDown(view) {
		// Balancing pauses while a peer host is out of reach
		// (placement.LeaderMoves): remember the fingerprint, which its
		// liveness changes when it is back.
		b.last, b.quiet = fp, 0
		return
	}
	moves := placement.LeaderMoves(self, view, b.cfg.MaxMoves)
	if len(moves) == 0 {
		b.last, b.quiet = fp, 0
		return
	}
	b.last = 0
	started := 0
	for _, m := range moves {
		g := byID[m.Group]
		mctx, cancel := context.WithTimeout(ctx, b.cfg.Interval)
		err := g.TryTransferLeadership(mctx, m.To.Member)
		cancel()
		switch {
		case err == nil:
			started++
		case ctx.Err() != nil:
			return
		case errors.Is(err, raft.ErrTransferNotNow), errors.Is(err, raft.ErrLearnerCannotLead), errors.Is(err, raft.ErrUnknownMember):
			b.refused[m.Group] = time.Now().Add(balanceRefusedRounds * b.cfg.Interval)
			b.h.log.Debug("leader balance: move refused", slog.Uint64("group", m.Group), slog.Uint64("to", m.To.Member), slog.Any("err", err))
		default:
			b.h.log.Debug("leader balance: move failed", slog.Uint64("group", m.Group), slog.Uint64("to", m.To.Member), slog.Any("err", err))
		}
	}
	if started > 0 {
		b.h.log.Info("leader balance: moved leaderships to hosts leading fewer than their share",
			slog.Int("moved", started), slog.Int("planned", len(moves)), slog.Int("leading", b.h.leaderCount(view, self)-started))
	}
}

// leaderView is the host's view of its groups for placement: its own key
// (the address its groups record for it), each running group's leader's
// host and voters' hosts with their liveness (a host is keyed by the
// address the group records for its replica there), the groups in skip
// pinned (counted, not moved), and the groups by ID. Nothing here goes through a group's loop or
// wakes it.
func (h *Host) leaderView(skip map[uint64]time.Time, vb *viewBufs) (self string, view []placement.Group, byID map[uint64]*Group) {
	h.mu.Lock()
	gs := vb.gs[:0]
	for _, g := range h.groups {
		if g != nil {
			gs = append(gs, g)
		}
	}
	h.mu.Unlock()
	if vb.byID == nil {
		vb.byID, vb.counts = map[uint64]*Group{}, map[string]int{}
	}
	byID, counts := vb.byID, vb.counts
	clear(byID)
	clear(counts)
	view, reps := vb.view[:0], vb.reps[:0]
	for _, g := range gs {
		voters, joint := g.AppendAppliedVoters(vb.voters[:0])
		vb.voters = voters
		leader := g.Leader()
		if joint || len(voters) < 2 {
			continue
		}
		pg := placement.Group{ID: g.gid}
		start := len(reps)
		for _, m := range voters {
			r := placement.Replica{Host: m.PeerAddr, Member: m.ID, Live: true}
			if m.ID == g.ID() {
				r.Host = g.advert
				counts[r.Host]++
			} else if at, live := g.tr.HostContact(m.ID); !live && !at.IsZero() {
				r.Live = false
			}
			if m.ID == leader {
				pg.Leader = r.Host
			}
			reps = append(reps, r)
		}
		// (A later append that moves reps leaves this slice on the old
		// array, which holds what was written: the view stays right.)
		pg.Voters = reps[start:len(reps):len(reps)]
		_, pg.Pinned = skip[g.gid] // counted, not moved: its leadership stays put for now
		view = append(view, pg)
		byID[g.gid] = g
	}
	clear(gs) // the round holds the groups through byID, not here
	clear(vb.voters)
	vb.gs, vb.view, vb.reps = gs[:0], view, reps
	// The host's key: the address most of its replicas are recorded at.
	for host, n := range counts {
		if n > counts[self] || (n == counts[self] && host < self) {
			self = host
		}
	}
	return self, view, byID
}

// viewBufs are the buffers a balancer's rounds build their view in,
// reused round after round while it plans (only the balancer's goroutine
// uses them; its first quiet round lets them go): a
// view of 10,000 groups made anew each round allocated about 13 MB, a
// third of what a host allocated while 48 of its groups took writes and
// the balancer was still spreading the others' leadership.
type viewBufs struct {
	gs     []*Group
	view   []placement.Group
	reps   []placement.Replica
	voters []raft.Member
	byID   map[uint64]*Group
	counts map[string]int
}

// release lets go of what the view refers to once a round is over (the
// groups, their addresses), keeping the buffers.
func (vb *viewBufs) release() {
	clear(vb.view)
	clear(vb.reps)
	vb.view, vb.reps = vb.view[:0], vb.reps[:0]
	clear(vb.byID)
}

// leaderFingerprint changes when a leadership or a peer host's liveness
// does: the leader, term and role changes the host's groups published
// (raft.Scheduler.StateChanges), the groups it runs and its host links'
// liveness changes. O(peer hosts), not O(groups).
func (h *Host) leaderFingerprint() uint64 {
	h.mu.Lock()
	fp := uint64(len(h.groups))*0x9e3779b97f4a7c15 + h.sched.StateChanges()
	h.mu.Unlock()
	for _, hl := range h.mux.Stats().Hosts {
		fp += hl.Transitions * 0xbf58476d1ce4e5b9
	}
	return fp
}

// leaderless counts the host's groups running and those without a known
// leader.
func (h *Host) leaderless() (leaderless, total int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range h.groups {
		if g == nil {
			continue
		}
		total++
		if g.Leader() == 0 {
			leaderless++
		}
	}
	return leaderless, total
}

// leaderCount is how many groups of view host leads.
func (h *Host) leaderCount(view []placement.Group, host string) int {
	n := 0
	for _, g := range view {
		if g.Leader == host {
			n++
		}
	}
	return n
}
