package raft

import (
	"log/slog"

	"go.etcd.io/raft/v3/raftpb"
)

// What a member does with a relay envelope it receives: steps the
// messages for it, hands on the leader's messages for its standbys, and
// the answers of its standbys for their leader (relay_answers.go).

// ProcessRelay takes an envelope from member from: the messages to this
// member are queued for the run loop as Process does; when from is the
// leader that built them, the others are handed on, each as it is, to
// its standby. Nothing but appends and heartbeats is taken, and a
// message is never handed on twice (one relayed by a relay is only
// stepped by its addressee). Answers (relay_answers.go): a standby's own
// answers (from == their sender) are handed on to the member they are
// for; answers to this member that a relay handed on are queued for the
// loop as one carrier, which steps each only if from relays its sender.
func (h peerHandler) ProcessRelay(from uint64, env *RelayEnvelope) {
	n := h.n
	self := n.cfg.ID
	var own, answers, handOn []*raftpb.Message
	takes, asked := false, false
	for i := range env.Msgs {
		if a := env.Msgs[i]; a != nil && i < len(env.Counts) && env.Counts[i] == 0 && isAnswer(a) &&
			len(a.Entries) == 0 && a.Snapshot == nil && len(a.Responses) == 0 {
			// An answer is its header, used as it is: the envelope is
			// this member's own copy.
			switch sender, to := a.GetFrom(), a.GetTo(); {
			case sender == self || sender == 0 || to == 0:
			case to == self && from != sender:
				answers = append(answers, a)
			case to != self && from == sender:
				handOn = append(handOn, a)
			}
			continue
		}
		m, err := env.Message(i)
		if err != nil {
			n.log.Debug("dropping a relayed message", slog.Uint64("from", from), slog.Any("err", err))
			continue
		}
		sender, to := m.GetFrom(), m.GetTo()
		if sender == self || sender == 0 || to == 0 || !relayable(m) {
			continue
		}
		switch {
		case to == self:
			own = append(own, m)
			n.noteLeaderMessage(from, sender, env.TakesAnswers)
		case from == sender && to != from:
			if !asked {
				takes, asked = n.carriesAnswers(sender), true
			}
			n.handOn(to, env, i, m, takes)
		}
	}
	if len(handOn) > 0 {
		n.handOnAnswers(handOn)
	}
	if len(answers) > 0 {
		c := &raftpb.Message{From: &from, Responses: answers}
		if len(own) == 0 {
			h.enqueue1(c)
			return
		}
		own = append(own, c)
	}
	if len(own) > 0 {
		h.enqueue(own)
	}
}

// handOn sends message i of env (m, reassembled) to standby to, in an
// envelope of its own; takes: this member takes the standby's answers.
func (n *Node) handOn(to uint64, env *RelayEnvelope, i int, m *raftpb.Message, takes bool) {
	if !n.running.Load() || n.stopped() {
		return
	}
	rt, ok := n.tr.(RelayTransport)
	if !ok {
		return
	}
	n.answers.answerBox().relayedOn.Add(1)
	rt.SendRelay(to, &RelayEnvelope{Entries: m.Entries, Msgs: env.Msgs[i : i+1 : i+1], Counts: env.Counts[i : i+1 : i+1], TakesAnswers: takes})
}
