package robustness

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/raft"
)

// Fault kinds. A scenario draws from a list of them (a kind listed twice
// is drawn twice as often).
const (
	// Network (in effect until "heal").
	Partition     = "partition"      // two random groups, both ways
	OneWay        = "one-way"        // a one-way cut between two members (often the leader)
	IsolateLeader = "isolate-leader" // the leader cut off, both ways
	Isolate       = "isolate"        // a random member cut off
	Drop          = "drop"           // every message dropped with some probability
	Reorder       = "reorder"        // every message delayed at random (which reorders them)
	Duplicate     = "duplicate"      // messages delivered twice
	Heal          = "heal"           // the network and disks back to normal
	// IsolateLeaderChange: the leader, cut off, appends a conf change it
	// cannot commit; the others elect a leader and overwrite it; then the
	// old leader is made to lead again.
	IsolateLeaderChange = "isolate-leader-change"
	// Processes.
	Crash       = "crash"        // kill a member of a random role (no flush, no hand-off)
	Stop        = "stop"         // a clean stop (a leader hands off first)
	Restart     = "restart"      // the member down comes back (sometimes onto a slow disk)
	IdleCrash   = "idle-crash"   // clients idle (only the commit index moves), crash, restart at once with reads waiting
	Pause       = "pause"        // a member frozen (messages and fsync held), then resumed
	SlowFsync   = "slow-fsync"   // every fsync slower
	StallFsync  = "stall-fsync"  // one member's fsync held for a while
	FailFsync   = "fail-fsync"   // one member's next fsync fails: it stops on the fatal error
	CrashWrite  = "crash-write"  // a member crashes in the middle of a log write
	DiskFull    = "disk-full"    // a member's disk fills up part-way through a write
	SnapshotNow = "snapshot-now" // a member takes a snapshot (and compacts) now
	// Membership churn.
	AddLearner    = "add-learner"    // a new member joins as a learner (it catches up by snapshot)
	RemoveLearner = "remove-learner" // a learner is removed
	Promote       = "promote"        // a learner promoted (manual)
	Demote        = "demote"         // a voter demoted (manual)
	RemoveVoter   = "remove-voter"   // a voter removed (manual)
	Replace       = "replace"        // a voter swapped for a standby in one joint change (sometimes the leader crashes mid-change)
	Transfer      = "transfer"       // leadership transferred to a random voter
	Target        = "target"         // the replicated target voter count changed (the policy scales)
	// Relays (Scenario.Relay; see fleet.go).
	CrashRelay   = "crash-relay"   // a member the leader relays through crashed
	IsolateRelay = "isolate-relay" // a relay cut off, both ways
	StallRelay   = "stall-relay"   // a relay's fsync held: it hands on appends it has not written
	// Scripted scenarios only.
	CrashInJoint = "crash-in-joint" // the leader crashed inside a joint configuration it cannot leave; the next leader completes it
)

// membershipKinds are the faults that change the membership.
var membershipKinds = []string{AddLearner, RemoveLearner, Promote, Demote, RemoveVoter, Replace, Transfer, Target}

// nemesis injects faults into one run.
type nemesis struct {
	sc    Scenario
	c     *cluster.Cluster
	rng   *rand.Rand
	h     *History
	disks *disks

	down    uint64 // crashed or stopped, not restarted yet
	downAt  time.Time
	removed map[uint64]bool
	nextID  uint64
	quiet   atomic.Bool
	healing bool           // the faults have ended: restarts inject nothing more
	timers  sync.WaitGroup // pauses and stalls still to release

	kinds   map[string]int // faults injected, by kind
	changes int            // membership changes that took effect
}

// inject draws a fault and injects it.
func (n *nemesis) inject() {
	kind := n.sc.Faults[n.rng.Intn(len(n.sc.Faults))]
	if n.down != 0 && time.Since(n.downAt) > 1500*time.Millisecond {
		kind = Restart // no member stays down for long: the cluster must make progress
	}
	what := n.do(kind)
	if what == "" {
		return // not applicable now
	}
	n.kinds[kind]++
	n.h.Fault(kind, what)
}

func (n *nemesis) do(kind string) string {
	switch kind {
	case Partition:
		ids := n.members()
		n.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		k := 1 + n.rng.Intn(len(ids)-1+boolInt(len(ids) == 1))
		n.c.Net.Partition(ids[:k], ids[k:])
		return fmt.Sprintf("partition %v | %v", ids[:k], ids[k:])
	case OneWay:
		ids := n.members()
		if len(ids) < 2 {
			return ""
		}
		a, b := ids[n.rng.Intn(len(ids))], ids[n.rng.Intn(len(ids))]
		if l := n.leader(); l != nil && n.rng.Intn(2) == 0 {
			a = l.ID
		}
		if a == b {
			return ""
		}
		if n.rng.Intn(2) == 0 {
			a, b = b, a
		}
		n.c.Net.Block(a, b)
		return fmt.Sprintf("one-way cut %d → %d", a, b)
	case IsolateLeader:
		l := n.leader()
		if l == nil {
			return ""
		}
		n.c.Net.Isolate(l.ID)
		return fmt.Sprintf("isolate leader %d", l.ID)
	case IsolateLeaderChange:
		l := n.leader()
		if l == nil || len(n.running()) < 3 {
			return ""
		}
		n.c.Net.Isolate(l.ID)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = l.Node.UpdateMember(ctx, n.c.Record(l.ID))
		cancel()
		time.Sleep(300 * time.Millisecond) // an election among the others
		n.c.Net.Heal()
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		what := fmt.Sprintf("isolate leader %d with a conf change it cannot commit, heal", l.ID)
		if nl, err := n.c.Leader(ctx); err == nil && nl.ID != l.ID && l.IsRunning() {
			if err := nl.Node.TransferLeadership(ctx, l.ID); err == nil {
				what += ", it leads again"
			}
		}
		return what
	case Isolate:
		ids := n.members()
		a := ids[n.rng.Intn(len(ids))]
		n.c.Net.Isolate(a)
		return fmt.Sprintf("isolate %d", a)
	case Drop:
		p := 0.05 + 0.25*n.rng.Float64()
		n.c.Net.SetDropRate(0, 0, p)
		return fmt.Sprintf("drop %.0f%%", 100*p)
	case Reorder:
		d := time.Duration(2+n.rng.Intn(30)) * time.Millisecond
		n.c.Net.SetDelay(d)
		return fmt.Sprintf("reorder: delay up to %s", d)
	case Duplicate:
		p := 0.1 + 0.2*n.rng.Float64()
		n.c.Net.SetDuplicateRate(p)
		return fmt.Sprintf("duplicate %.0f%%", 100*p)
	case Heal:
		n.c.Net.Heal()
		n.disks.setDelay(0)
		return "heal"
	case Crash, Stop:
		if n.down != 0 {
			return n.do(Restart)
		}
		id, role := n.victim()
		if id == 0 {
			return ""
		}
		n.markDown(id)
		if kind == Crash {
			n.c.Crash(id)
		} else {
			n.c.Stop(id)
		}
		return fmt.Sprintf("%s %s %d", kind, role, id)
	case Restart:
		return n.restart()
	case IdleCrash:
		if n.down != 0 {
			return n.do(Restart)
		}
		id, role := n.victim()
		if id == 0 {
			return ""
		}
		// The last writes are acknowledged and only the commit index moves:
		// the state a restart must not lose track of.
		n.quiet.Store(true)
		time.Sleep(30 * time.Millisecond)
		n.markDown(id)
		n.c.Crash(id)
		what := fmt.Sprintf("idle, crash %s %d, ", role, id) + n.restart()
		return what
	case Pause:
		ids := n.running()
		if len(ids) == 0 {
			return ""
		}
		id := ids[n.rng.Intn(len(ids))]
		f := n.disks.of(id)
		d := time.Duration(100+n.rng.Intn(500)) * time.Millisecond
		n.c.Net.Pause(id)
		release := f.HoldSaves()
		n.timers.Add(1)
		time.AfterFunc(d, func() {
			defer n.timers.Done()
			release()
			n.c.Net.Resume(id)
		})
		return fmt.Sprintf("pause %d for %s", id, d)
	case SlowFsync:
		d := time.Duration(2+n.rng.Intn(40)) * time.Millisecond
		n.disks.setDelay(d)
		return fmt.Sprintf("slow fsync: +%s", d)
	case StallFsync:
		ids := n.running()
		if len(ids) == 0 {
			return ""
		}
		id := ids[n.rng.Intn(len(ids))]
		d := time.Duration(50+n.rng.Intn(300)) * time.Millisecond
		release := n.disks.of(id).HoldSaves()
		n.timers.Add(1)
		time.AfterFunc(d, func() { defer n.timers.Done(); release() })
		return fmt.Sprintf("stall fsync on %d for %s", id, d)
	case FailFsync, DiskFull, CrashWrite:
		if n.down != 0 {
			return n.do(Restart)
		}
		return n.diskFault(kind)
	case CrashRelay, IsolateRelay, StallRelay:
		return n.relayFault(kind)
	case SnapshotNow:
		ids := n.running()
		if len(ids) == 0 {
			return ""
		}
		id := ids[n.rng.Intn(len(ids))]
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		idx, err := n.c.Member(id).Node.Snapshot(ctx)
		if err != nil {
			return fmt.Sprintf("snapshot on %d failed (%v)", id, err)
		}
		return fmt.Sprintf("snapshot on %d at %d", id, idx)
	default:
		return n.churn(kind)
	}
}

// diskFault makes a member's storage fail one of three ways, waits (up to
// a second) for the member to stop on it, and counts it down.
func (n *nemesis) diskFault(kind string) string {
	ids := n.running()
	if len(ids) == 0 {
		return ""
	}
	id := ids[n.rng.Intn(len(ids))]
	m := n.c.Member(id)
	f := n.disks.of(id)
	var what string
	switch kind {
	case FailFsync:
		f.FailSaves(1)
		what = fmt.Sprintf("fail the next fsync on %d", id)
	case DiskFull:
		b := n.rng.Int63n(64 << 10)
		f.FailAfterBytes(b)
		what = fmt.Sprintf("disk full on %d after %d bytes", id, b)
	case CrashWrite:
		// The member crashes while a write is under way: the write never
		// completes (bbolt commits a transaction whole or not at all).
		writing := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		f.BeforeSave(func(_ *raftpb.HardState, ents []*raftpb.Entry, _ *raftpb.Snapshot) error {
			if len(ents) == 0 {
				return nil
			}
			once.Do(func() { close(writing) })
			<-release
			return fmt.Errorf("%w: crashed in the middle of this write", faultstore.ErrInjected)
		})
		select {
		case <-writing:
			n.markDown(id)
			go func() { time.Sleep(time.Millisecond); close(release) }()
			n.c.Crash(id)
			return fmt.Sprintf("crash %d in the middle of a log write", id)
		case <-time.After(time.Second):
			f.BeforeSave(nil)
			close(release)
			return fmt.Sprintf("crash-write on %d: no write within 1s", id)
		}
	}
	select {
	case <-m.Node.Done():
		n.markDown(id)
		n.c.Crash(id) // the harness's bookkeeping; the node has stopped already
		return what + fmt.Sprintf(": it stopped (%v)", m.Node.Err())
	case <-time.After(time.Second):
		f.Reset()
		return what + ": no write within 1s"
	}
}

func (n *nemesis) markDown(id uint64) {
	n.down, n.downAt = id, time.Now()
}

// restart brings the member down back, sometimes onto a slow disk.
func (n *nemesis) restart() string {
	if n.down == 0 {
		return ""
	}
	id := n.down
	what := fmt.Sprintf("restart %d", id)
	if !n.healing && (n.sc.SlowRestarts || n.rng.Intn(3) == 0) {
		d := time.Duration(5+n.rng.Intn(30)) * time.Millisecond
		n.disks.setDelay(d)
		what += fmt.Sprintf(" onto a slow disk (+%s)", d)
	}
	n.c.Restart(id)
	if !n.healing && n.rng.Intn(4) == 0 {
		// Its first writes after the restart wait on a stalled fsync.
		d := time.Duration(50+n.rng.Intn(250)) * time.Millisecond
		release := n.disks.of(id).HoldSaves()
		n.timers.Add(1)
		time.AfterFunc(d, func() { defer n.timers.Done(); release() })
		what += fmt.Sprintf(", its fsync stalled for %s", d)
	}
	n.down = 0
	n.quiet.Store(false)
	return what
}

// members returns every member not removed (running or not).
func (n *nemesis) members() []uint64 {
	return slices.DeleteFunc(n.c.Members(), func(id uint64) bool { return n.removed[id] })
}

// running returns the running members' IDs.
func (n *nemesis) running() []uint64 {
	var ids []uint64
	for _, m := range n.c.Running() {
		ids = append(ids, m.ID)
	}
	return ids
}

// leader returns a running member that believes it leads (possibly one cut
// off), or nil.
func (n *nemesis) leader() *cluster.Member {
	for _, m := range n.c.Running() {
		if m.Node.IsLeader() {
			return m
		}
	}
	return nil
}

// victim picks a running member of a random role: the leader, a follower
// or a learner.
func (n *nemesis) victim() (uint64, string) {
	var leader, followers, learners []uint64
	for _, m := range n.c.Running() {
		switch {
		case m.Node.IsLeader():
			leader = append(leader, m.ID)
		case isLearner(m.Node):
			learners = append(learners, m.ID)
		default:
			followers = append(followers, m.ID)
		}
	}
	roles := [][]uint64{leader, followers, learners}
	names := []string{"leader", "follower", "learner"}
	for range 6 {
		i := n.rng.Intn(3)
		if len(roles[i]) > 0 {
			return roles[i][n.rng.Intn(len(roles[i]))], names[i]
		}
	}
	return 0, ""
}

func isLearner(node *raft.Node) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err := node.Status(ctx)
	return err == nil && st.Role == raft.RoleLearner
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
