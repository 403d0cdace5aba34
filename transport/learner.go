package transport

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// learnerFlushBytes is how many queued bytes end a learner's gathering
// early (or a quarter of MaxLearnerQueueBytes, if smaller): a learner far
// behind is sent what it needs without waiting.
const learnerFlushBytes = 1 << 20

// maxMergedBytes bounds the size of an append merged for a learner (or
// half MaxFrameSize, if smaller).
const maxMergedBytes = 8 << 20

// urgentForLearner reports whether a message to a learner is written at
// once rather than gathered: a read answer (a read on the learner waits
// for it).
func urgentForLearner(m *raftpb.Message) bool {
	return m.GetType() == raftpb.MsgReadIndexResp
}

// mergeAppends merges, in place, each run of MsgApps in batch that extend
// one another (same sender, recipient and term, each starting where the
// previous one ends) into one MsgApp carrying all their entries and the
// highest commit index. The learner then appends, syncs and acknowledges
// once; the leader frees every merged message's in-flight slot with that
// one acknowledgement. Messages are shared with raft: a merged message is
// a new one, the originals are left as they are. Other messages keep their
// place.
func mergeAppends(batch []*raftpb.Message, limit int) []*raftpb.Message {
	out := batch[:0]
	var (
		merged bool // out's last message is one of ours
		size   int  // its entries' bytes
	)
	for _, m := range batch {
		if len(out) > 0 {
			prev := out[len(out)-1]
			if extends(prev, m) && size+entriesSize(m) <= limit {
				if !merged {
					prev = cloneAppend(prev)
					out[len(out)-1] = prev
					merged = true
				}
				prev.Entries = append(prev.Entries, m.GetEntries()...)
				if c := m.GetCommit(); c > prev.GetCommit() {
					prev.Commit = &c
				}
				size += entriesSize(m)
				continue
			}
		}
		out = append(out, m)
		merged, size = false, entriesSize(m)
	}
	clear(batch[len(out):])
	return out
}

// extends reports whether MsgApp next continues MsgApp prev.
func extends(prev, next *raftpb.Message) bool {
	if prev.GetType() != raftpb.MsgApp || next.GetType() != raftpb.MsgApp ||
		prev.GetTerm() != next.GetTerm() || prev.GetFrom() != next.GetFrom() || prev.GetTo() != next.GetTo() {
		return false
	}
	ents := prev.GetEntries()
	if len(ents) == 0 {
		return false
	}
	last := ents[len(ents)-1]
	return next.GetIndex() == last.GetIndex() && next.GetLogTerm() == last.GetTerm()
}

// cloneAppend copies the fields a MsgApp carries, with its own entries slice.
func cloneAppend(m *raftpb.Message) *raftpb.Message {
	typ, to, from, term := m.GetType(), m.GetTo(), m.GetFrom(), m.GetTerm()
	logTerm, index, commit := m.GetLogTerm(), m.GetIndex(), m.GetCommit()
	c := &raftpb.Message{
		Type: &typ, To: &to, From: &from, Term: &term,
		LogTerm: &logTerm, Index: &index, Commit: &commit,
	}
	c.Entries = append(make([]*raftpb.Entry, 0, 2*len(m.GetEntries())), m.GetEntries()...)
	return c
}

func entriesSize(m *raftpb.Message) int {
	if m.GetType() != raftpb.MsgApp {
		return 0
	}
	return wire.MessageSize(m)
}
