package raft

import (
	"fmt"
	"log/slog"
	"slices"

	etcdcc "go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/confchange"
)

// ForceNewCluster rewrites a stopped member's storage so that it starts as
// the only voter of its cluster: the last resort after the permanent loss of
// a quorum (every other voter is gone for good), as etcd's
// --force-new-cluster. It keeps every entry of the log — those beyond the
// persisted commit index too, since they may have been acknowledged (a
// commit index is not persisted with every commit) — and appends, committed,
// the configuration changes that leave a joint configuration, make self a
// voter and remove every other member. The node applies them when it starts
// (Start, with no InitialMembers); the removed members are refused from then
// on and must be added again as new members (with new IDs).
//
// self is this member's record (its ID, and its peer address and metadata:
// an empty PeerAddr keeps the recorded one; its Incarnation is ignored: the
// recorded one stays). Call it with the node stopped
// and the storage open. It returns the index of the last entry it appended.
// Data written by the lost members and not replicated to self is lost: that
// is what "last resort" means.
//
// Errors: ErrInvalidConfig (no member ID, or the storage holds no member);
// the storage's errors (nothing changed unless the final write succeeded:
// it is one storage write).
func ForceNewCluster(store Storage, self Member, log *slog.Logger) (uint64, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if self.ID == 0 {
		return 0, fmt.Errorf("%w: ForceNewCluster: member ID must be non-zero", ErrInvalidConfig)
	}
	hs, cs, err := store.InitialState()
	if err != nil {
		return 0, fmt.Errorf("raft: reading initial state: %w", err)
	}
	first, err := store.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("raft: reading first index: %w", err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("raft: reading last index: %w", err)
	}
	if last == 0 && len(cs.GetVoters()) == 0 {
		return 0, fmt.Errorf("%w: ForceNewCluster: the storage holds no member", ErrInvalidConfig)
	}
	// The configuration as of the last entry: the snapshot's, then every
	// conf change of the log (raft checked each when it was proposed).
	chg := etcdcc.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: last}
	cfg, trk, err := etcdcc.Restore(chg, cs)
	if err != nil {
		return 0, fmt.Errorf("raft: ForceNewCluster: the stored configuration: %w", err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	var recorded *Member
	for lo := first; lo <= last; {
		ents, err := store.Entries(lo, last+1, 4<<20)
		if err != nil {
			return 0, fmt.Errorf("raft: reading the log: %w", err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if !isConfChange(e) {
				continue
			}
			cci, err := decodeConfChange(e)
			if err != nil {
				return 0, err
			}
			if ctx, err := changeContext(cci); err == nil {
				for _, m := range ctx.Members {
					if m.ID == self.ID {
						recorded = &m
					}
				}
			}
			if err := stepConfig(&chg, cci.AsV2()); err != nil {
				return 0, fmt.Errorf("raft: ForceNewCluster: the conf change at %d: %w", e.GetIndex(), err)
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	before := confchange.ConfigFromConfState(chg.Tracker.ConfState())

	rec := self
	// The incarnation recorded for self stays (this is its data); one
	// given here, e.g. copied from another member's record, is not
	// recorded: the member would stop itself as wiped.
	rec.Incarnation = 0
	if rec.PeerAddr == "" && recorded != nil {
		rec.PeerAddr = recorded.PeerAddr
	}
	if rec.Metadata == nil && recorded != nil {
		rec.Metadata = recorded.Metadata
	}
	var changes []*raftpb.ConfChangeV2
	if before.Joint() {
		changes = append(changes, &raftpb.ConfChangeV2{}) // leave the joint configuration
	}
	ctx, err := confchange.Context{Members: []Member{rec}}.Encode()
	if err != nil {
		return 0, err
	}
	// Make self a voter (it may be a learner, or not listed at all), then
	// remove every other member, one per entry: each a simple change.
	changes = append(changes, &raftpb.ConfChangeV2{
		Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(self.ID)}},
		Context: ctx,
	})
	for _, id := range before.IDs() {
		if id == self.ID {
			continue
		}
		changes = append(changes, &raftpb.ConfChangeV2{
			Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(id)}},
		})
	}
	term := hs.GetTerm()
	ents := make([]*raftpb.Entry, 0, len(changes))
	for i, cc := range changes {
		data, err := proto.Marshal(cc)
		if err != nil {
			return 0, err
		}
		if err := stepConfig(&chg, cc); err != nil {
			return 0, fmt.Errorf("raft: ForceNewCluster: planning %v: %w", cc, err)
		}
		ents = append(ents, &raftpb.Entry{
			Type:  raftpb.EntryConfChangeV2.Enum(),
			Term:  proto.Uint64(term),
			Index: proto.Uint64(last + 1 + uint64(i)),
			Data:  data,
		})
	}
	newLast := last + uint64(len(ents))
	nhs := &raftpb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(hs.GetVote()), Commit: proto.Uint64(newLast)}
	if err := store.Save(nhs, ents, nil); err != nil {
		return 0, fmt.Errorf("raft: ForceNewCluster: writing the new configuration: %w", err)
	}
	after := confchange.ConfigFromConfState(chg.Tracker.ConfState())
	removed := slices.DeleteFunc(before.IDs(), func(id uint64) bool { return id == self.ID })
	log.Warn("FORCED A NEW CLUSTER: this member is now the only voter; the other members are removed and must rejoin as new members",
		slog.Uint64("member", self.ID), slog.String("before", before.String()), slog.String("after", after.String()),
		slog.Any("removed", removed), slog.Uint64("last_index", newLast), slog.Uint64("previous_commit", hs.GetCommit()))
	return newLast, nil
}

// stepConfig applies one conf change to chg's tracker, as raft does.
func stepConfig(chg *etcdcc.Changer, cc *raftpb.ConfChangeV2) error {
	var (
		cfg tracker.Config
		trk tracker.ProgressMap
		err error
	)
	if cc.LeaveJoint() {
		cfg, trk, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		cfg, trk, err = chg.EnterJoint(autoLeave, cc.GetChanges()...)
	} else {
		cfg, trk, err = chg.Simple(cc.GetChanges()...)
	}
	if err != nil {
		return err
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, trk
	return nil
}
