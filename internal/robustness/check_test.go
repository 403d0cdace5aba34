package robustness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// The checks themselves can fail: a checker that cannot see a violation
// would let the suite pass whatever the library does.

func TestModelFindsViolations(t *testing.T) {
	op := func(client int, in Input, out Output, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
	}
	for _, tc := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"a read after a put sees it", []porcupine.Operation{
			op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{OK: true}, 0, 10),
			op(1, Input{Op: "get", Key: "k"}, Output{Value: "1"}, 20, 30),
		}, true},
		{"a stale read after a put", []porcupine.Operation{
			op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{OK: true}, 0, 10),
			op(1, Input{Op: "get", Key: "k"}, Output{Value: ""}, 20, 30),
		}, false},
		{"a deleted key read back", []porcupine.Operation{
			op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{OK: true}, 0, 10),
			op(0, Input{Op: "delete", Key: "k"}, Output{OK: true}, 20, 30),
			op(1, Input{Op: "get", Key: "k"}, Output{Value: "1"}, 40, 50),
		}, false},
		{"a cas that swapped against the wrong value", []porcupine.Operation{
			op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{OK: true}, 0, 10),
			op(1, Input{Op: "cas", Key: "k", Prev: "2", Value: "3"}, Output{OK: true}, 20, 30),
		}, false},
		{"a write of unknown outcome may take effect late", []porcupine.Operation{
			op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{Unknown: true}, 0, 1<<62),
			op(1, Input{Op: "get", Key: "k"}, Output{Value: ""}, 20, 30),
			op(1, Input{Op: "get", Key: "k"}, Output{Value: "1"}, 40, 50),
		}, true},
		{"a lost acknowledged write", []porcupine.Operation{
			op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{OK: true}, 0, 10),
			op(0, Input{Op: "put", Key: "k", Value: "2"}, Output{OK: true}, 20, 30),
			op(1, Input{Op: "get", Key: "k"}, Output{Value: "1"}, 40, 50),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model, tc.ops); got != tc.legal {
				t.Fatalf("linearizable = %v, want %v", got, tc.legal)
			}
		})
	}
}

func TestHistoryCheckWritesVisualization(t *testing.T) {
	h := NewHistory()
	now := time.Now()
	h.Op(0, Input{Op: "put", Key: "k", Value: "1"}, Output{OK: true}, now, now.Add(time.Millisecond))
	h.Fault(Crash, "crash leader 1")
	h.Op(1, Input{Op: "get", Key: "k"}, Output{Value: "0"}, now.Add(2*time.Millisecond), now.Add(3*time.Millisecond))
	_, err := h.Check("check-test", t.TempDir(), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "visualization: ") {
		t.Fatalf("want a violation naming the visualization, got %v", err)
	}
}

// counterEndpoint answers stale reads of the counter from a list.
type counterEndpoint struct{ name string }

func (e *counterEndpoint) Do(context.Context, [2]uint64, Input) (Output, Result) {
	return Output{}, NoEffect
}
func (e *counterEndpoint) StaleGet(string) (string, bool) { return "", false }
func (e *counterEndpoint) Name() string                   { return e.name }

func TestStaleCheck(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type read struct {
		call, ret int
		v         string
	}
	for _, tc := range []struct {
		name  string
		reads []read
		bad   bool
	}{
		{"increasing", []read{{0, 1, "1"}, {2, 3, "2"}, {4, 5, "2"}}, false},
		{"backwards after an answer", []read{{0, 1, "5"}, {2, 3, "4"}}, true},
		{"overlapping reads answer in either order", []read{{0, 10, "5"}, {1, 11, "4"}}, false},
		{"backwards to a missing key", []read{{0, 1, "5"}, {2, 3, ""}}, true},
		{"backwards long after (folded into the floor)", []read{{0, 1, "9"}, {6000, 6001, "10"}, {6002, 6003, "8"}}, true},
		{"garbage", []read{{0, 1, "x"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &staleCheck{counter: map[Endpoint]*counterReads{}, written: map[string]bool{}}
			e := &counterEndpoint{name: "m"}
			for _, r := range tc.reads {
				sc.sawCounter(e, r.v, ms(r.call), ms(r.ret))
			}
			if got := len(sc.problems) > 0; got != tc.bad {
				t.Fatalf("problems %v, want a violation: %v", sc.problems, tc.bad)
			}
		})
	}
	// Another endpoint (another run of the member) is compared apart.
	sc := &staleCheck{counter: map[Endpoint]*counterReads{}, written: map[string]bool{"1-1": true}}
	sc.sawCounter(&counterEndpoint{name: "run 1"}, "7", ms(0), ms(1))
	sc.sawCounter(&counterEndpoint{name: "run 2"}, "3", ms(2), ms(3))
	sc.sawValue(&counterEndpoint{name: "run 2"}, "a", "1-1", ms(4))
	if len(sc.problems) > 0 {
		t.Fatalf("separate runs and a written value: %v", sc.problems)
	}
	sc.sawValue(&counterEndpoint{name: "run 2"}, "a", "9-9", ms(5))
	if len(sc.problems) != 1 {
		t.Fatalf("a value never written: %v", sc.problems)
	}
}

// TestOddWatchSeesEvenConfiguration: a manual demote from three voters to
// two is seen by the odd-count watch, on the members that apply it.
func TestOddWatchSeesEvenConfiguration(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, ManualMembership: true})
	l := c.WaitLeader()
	w := startOddWatch(c, NewHistory())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for { // until the watch has subscribed to every member
		w.mu.Lock()
		n := len(w.subbed)
		w.mu.Unlock()
		if n == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the watch did not subscribe")
		}
		time.Sleep(time.Millisecond)
	}
	// Right after the start the leader may not have heard from every
	// member yet (the demote is then refused: quorum at risk): retry.
	for {
		_, err := l.Node.ChangeMembership(ctx, confchange.Demote(otherThan(l.ID, 3)))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := l.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(ctx, st.Commit); err != nil {
		t.Fatal(err)
	}
	if even := w.stop(); len(even) == 0 {
		t.Fatal("the watch saw no even configuration")
	}
}

// TestLeaveHold: the filter that keeps a leader inside a joint
// configuration drops exactly the appends that carry a leave-joint entry —
// were raft to encode it differently, the scripted crashes would no longer
// land inside joint configurations by construction (crashInJoint then
// fails: no append was held back).
func TestLeaveHold(t *testing.T) {
	entry := func(cc *raftpb.ConfChangeV2) *raftpb.Entry {
		b, err := proto.Marshal(cc)
		if err != nil {
			t.Fatal(err)
		}
		return &raftpb.Entry{Type: raftpb.EntryConfChangeV2.Enum(), Data: b}
	}
	leave := entry(confchange.LeaveJointChange(7))
	enter := entry(&raftpb.ConfChangeV2{Transition: raftpb.ConfChangeTransitionJointExplicit.Enum(),
		Changes: []*raftpb.ConfChangeSingle{
			{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(4)},
			{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(5)},
		}})
	normal := &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Data: []byte("put")}
	msg := func(typ raftpb.MessageType, ents ...*raftpb.Entry) *raftpb.Message {
		return &raftpb.Message{Type: typ.Enum(), Entries: ents}
	}
	var lh leaveHold
	for _, tc := range []struct {
		name string
		m    *raftpb.Message
		drop bool
	}{
		{"an append with the leave", msg(raftpb.MsgApp, normal, leave, normal), true},
		{"an append with the enter", msg(raftpb.MsgApp, enter, normal), false},
		{"an append of writes", msg(raftpb.MsgApp, normal), false},
		{"a heartbeat", msg(raftpb.MsgHeartbeat), false},
		{"a proposal with the leave (not an append)", msg(raftpb.MsgProp, leave), false},
	} {
		if got := lh.drop(3, tc.m); got != tc.drop {
			t.Errorf("%s: dropped %v, want %v", tc.name, got, tc.drop)
		}
	}
	if n := lh.held(3); n != 1 {
		t.Errorf("held %d appends from 3, want 1", n)
	}
}

// TestElectable: whether the members left can elect a leader in a joint
// configuration without the one down.
func TestElectable(t *testing.T) {
	running := []uint64{1, 2, 3}
	for _, tc := range []struct {
		incoming, outgoing []uint64
		down               uint64
		want               bool
	}{
		{[]uint64{1, 2, 3}, []uint64{1}, 1, false},             // scale 1 → 3: the outgoing half is the one down
		{[]uint64{3}, []uint64{1, 2, 3}, 3, false},             // scale 3 → 1: the incoming half is the one down
		{[]uint64{1, 2, 3, 4, 5}, []uint64{1, 2, 3}, 1, false}, // 4 and 5 are not running
		{[]uint64{1, 2, 3}, []uint64{1, 2, 3}, 1, true},
		{[]uint64{1, 2, 3}, []uint64{1, 2, 3}, 4, true},
		{[]uint64{1, 2}, []uint64{2, 3}, 2, false},
	} {
		st := raft.Status{Voters: tc.incoming, VotersOutgoing: tc.outgoing}
		if got := electable(st, running, tc.down); got != tc.want {
			t.Errorf("%s without %d: electable %v, want %v", configOf(st), tc.down, got, tc.want)
		}
	}
}
