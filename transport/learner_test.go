package transport

import (
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// appRun returns MsgApps from 1 to 2 carrying entries first..last, one
// entry each, in term 1, with commit index commit+i.
func appRun(first, last uint64, commit uint64) []*raftpb.Message {
	var msgs []*raftpb.Message
	for i := first; i <= last; i++ {
		m := appMsg(1, 2, i, 8)
		m.Commit = u64(commit + i - first)
		msgs = append(msgs, m)
	}
	return msgs
}

func entryIndexes(m *raftpb.Message) []uint64 {
	var idx []uint64
	for _, e := range m.GetEntries() {
		idx = append(idx, e.GetIndex())
	}
	return idx
}

func TestMergeAppends(t *testing.T) {
	t.Run("a contiguous run becomes one append", func(t *testing.T) {
		batch := appRun(5, 9, 3)
		orig := slices.Clone(batch)
		got := mergeAppends(batch, 1<<20)
		if len(got) != 1 {
			t.Fatalf("%d messages, want 1", len(got))
		}
		m := got[0]
		if m.GetIndex() != 4 || m.GetLogTerm() != 1 || m.GetCommit() != 7 || m.GetTerm() != 1 || m.GetFrom() != 1 || m.GetTo() != 2 || m.GetType() != raftpb.MsgApp {
			t.Fatalf("merged: %v", m)
		}
		if idx := entryIndexes(m); !slices.Equal(idx, []uint64{5, 6, 7, 8, 9}) {
			t.Fatalf("entries %v", idx)
		}
		// The originals are raft's: untouched.
		for i, o := range orig {
			if len(o.GetEntries()) != 1 || o.GetIndex() != uint64(4+i) || o.GetCommit() != uint64(3+i) {
				t.Fatalf("original %d modified: %v", i, o)
			}
		}
	})
	t.Run("what does not continue the previous append stays apart", func(t *testing.T) {
		gap := appRun(7, 7, 0)[0] // 5 is followed by 7: not contiguous
		newTerm := appMsg(1, 2, 8, 8)
		newTerm.Term = u64(2)
		empty := appMsg(1, 2, 9, 8)
		empty.Entries = nil
		other := appMsg(3, 2, 9, 8) // another sender
		batch := []*raftpb.Message{appRun(5, 5, 0)[0], gap, newTerm, heartbeat(1, 2), appMsg(1, 2, 9, 8), empty, appMsg(1, 2, 9, 8), other}
		want := slices.Clone(batch)
		got := mergeAppends(batch, 1<<20)
		if len(got) != len(want) {
			t.Fatalf("%d messages, want %d unmerged", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("message %d replaced: %v", i, got[i])
			}
		}
	})
	t.Run("a heartbeat keeps its place between two runs", func(t *testing.T) {
		batch := append(appRun(1, 3, 0), heartbeat(1, 2))
		batch = append(batch, appRun(4, 6, 3)...)
		got := mergeAppends(batch, 1<<20)
		if len(got) != 3 || got[1].GetType() != raftpb.MsgHeartbeat {
			t.Fatalf("got %d messages: %v", len(got), got)
		}
		if a, b := entryIndexes(got[0]), entryIndexes(got[2]); !slices.Equal(a, []uint64{1, 2, 3}) || !slices.Equal(b, []uint64{4, 5, 6}) {
			t.Fatalf("runs %v and %v", a, b)
		}
	})
	t.Run("the size limit splits a run", func(t *testing.T) {
		batch := appRun(1, 10, 0)
		one := entriesSize(batch[0])
		got := mergeAppends(batch, 3*one)
		if len(got) != 4 {
			t.Fatalf("%d messages, want 4 (3+3+3+1)", len(got))
		}
		var all []uint64
		for _, m := range got {
			all = append(all, entryIndexes(m)...)
		}
		if !slices.Equal(all, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
			t.Fatalf("entries %v", all)
		}
	})
}

// A learner's appends are gathered and merged; a read answer, a full
// queue or a promotion ends the gathering at once; a voter's messages are
// never held.
func TestLearnerMessagesGathered(t *testing.T) {
	hb, hc := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, &fakeHandler{}, func(c *Config) { c.LearnerBatchDelay = time.Hour })
	b := newTestTransport(t, 2, hb)
	c := newTestTransport(t, 3, hc)
	connect(a, b, c)
	a.SetLearner(2, true)

	// The first write goes at once (nothing was written for an hour).
	sendUntil(t, a, appRun(1, 1, 0), "the first append", func() bool { return hb.count() > 0 })
	first := hb.count()
	// The next ones are held for an hour...
	a.Send(appRun(2, 4, 1))
	// ...while the voter's are not.
	var toVoter []*raftpb.Message
	for i := uint64(1); i <= 3; i++ {
		toVoter = append(toVoter, appMsg(1, 3, i, 8))
	}
	a.Send(toVoter)
	waitFor(t, "the voter's three appends", func() bool { return hc.count() >= 3 })
	if n := hb.count(); n != first {
		t.Fatalf("the learner got %d messages during the gathering, want %d", n, first)
	}
	// A read answer is written at once, with what was gathered, merged.
	read := &raftpb.Message{Type: raftpb.MsgReadIndexResp.Enum(), From: u64(1), To: u64(2), Term: u64(1), Index: u64(4)}
	a.Send([]*raftpb.Message{read})
	waitFor(t, "the read answer", func() bool {
		ms := hb.received()
		return ms[len(ms)-1].GetType() == raftpb.MsgReadIndexResp
	})
	// sendUntil may have queued the first append more than once: a copy
	// still queued when the others came is held and merged with them (it is
	// contiguous: entries 1 to 4), one written alone is a plain resend.
	var got []*raftpb.Message
	for _, m := range hb.received()[first:] {
		if !slices.Equal(entryIndexes(m), []uint64{1}) {
			got = append(got, m)
		}
	}
	if len(got) != 2 || got[0].GetType() != raftpb.MsgApp || got[1].GetType() != raftpb.MsgReadIndexResp {
		t.Fatalf("the learner got %v, want one merged append then the read answer", got)
	}
	idx := entryIndexes(got[0])
	if len(idx) == 4 && idx[0] == 1 {
		idx = idx[1:] // with a copy of the first append merged in front
	}
	if !slices.Equal(idx, []uint64{2, 3, 4}) || got[0].GetCommit() != 3 {
		t.Fatalf("merged append: entries %v commit %d", entryIndexes(got[0]), got[0].GetCommit())
	}

	// A queue past learnerFlushBytes is written at once.
	before := hb.count()
	var big []*raftpb.Message
	for i := uint64(5); i < 5+40; i++ {
		big = append(big, appMsg(1, 2, i, 32<<10))
	}
	a.Send(big)
	waitFor(t, "a full queue written", func() bool { return hb.count() > before })

	// A promoted learner's held messages leave at once.
	before = hb.count()
	a.Send(appRun(100, 100, 0))
	a.SetLearner(2, false)
	waitFor(t, "the promoted member's append", func() bool { return hb.count() > before })
}
