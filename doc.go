// Package understudy is a library for replicated state machines on etcd's Raft
// whose membership is learner-aware: every new member joins as a non-voting
// learner, the leader tracks its catch-up, and it becomes a voter only when
// that is safe — by a policy the host can replace — while learners beyond the
// target voter count stay standbys that serve reads and take over a lost
// voter's seat.
//
// # A host in five lines
//
// Start opens a member's storage, builds its transport and node, and
// bootstraps, joins or restarts as the data dir says; Close stops them in
// order. The Group it returns has every raft.Node method:
//
//	h, err := understudy.Start(ctx, understudy.Config{
//		ID: 1, DataDir: "data/1", ListenPeer: "10.0.0.1:7001",
//		InitialMembers: []raft.Member{{ID: 1, PeerAddr: "10.0.0.1:7001"}, {ID: 2, PeerAddr: "10.0.0.2:7001"}, {ID: 3, PeerAddr: "10.0.0.3:7001"}},
//	}, kv.New())
//	defer h.Close(ctx)
//	_, err = h.Propose(ctx, kv.Put("k", "v")) // from any member
//	v, err := h.Read(ctx, []byte("k"))         // linearizable, on any member
//
// # A member's lifecycle
//
//  1. Added: any member calls AddLearner with the new member's ID and peer
//     address. A learner never changes the quorum, so a wrong address is
//     undone by RemoveMember.
//  2. Joined: the new process starts with an empty data dir and Join set to
//     any member's address; it learns the cluster ID and every member's
//     address there, records its identity, and the leader sends it a
//     snapshot that lists it, then the log.
//  3. Ready: the leader measures its catch-up (Membership: lag, rate, time to
//     ready); it is ready once caught up and stable for a while.
//  4. Voter or standby: the default policy promotes ready learners up to the
//     odd target voter count (through joint consensus when two change at
//     once); the others stay standbys and replace a voter that is lost.
//  5. Removed: RemoveMember; the member stops, its data dir refuses to start
//     again, and its ID is never reused.
//
// A restart uses the same Config: once the data dir holds a member,
// InitialMembers and Join are ignored, and a data dir of another member or
// cluster is refused (ErrIdentityMismatch). A data dir that lost the member
// (a replaced disk) is not a restart: started with the same Config, it is
// refused (raft.ErrAlreadyBootstrapped, or raft.ErrReplicaWiped once its
// peers see it) — remove the member and add a new one under a new ID. ForceNewCluster recovers a
// member's data dir as a one-member cluster after the permanent loss of a
// quorum; Node.Backup and RestoreBackup copy a running member's state into a
// new one.
//
// # Many groups in one process
//
// Start is a Host with one group. A service that shards its data over many
// raft groups opens one Host per process (NewHost: one data dir, one storage
// engine whose commits carry every group's queued appends with one sync, one
// peer port) and starts each replica with Host.StartGroup; a message for a
// group the host does not run never creates one. docs/architecture.md
// describes hosts, groups, the engine and the peer protocol.
//
// The packages, for hosts that need the parts:
//
//   - raft: the Node, which owns etcd's RawNode, persists, replicates and applies
//     commands to the host's StateMachine.
//   - confchange: pure membership planning, learner readiness and the promotion policy.
//   - storage: the durable raft log, hard state and snapshots, on Pebble (what
//     NewHost and Start open a new data dir with) or bbolt.
//   - transport: the TCP (+mutual TLS) peer transport with snapshot streaming.
//   - kv: the example state machine (put, delete, compare-and-swap) a host starts from.
package understudy
