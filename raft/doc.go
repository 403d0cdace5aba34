// Package raft runs one member of a replicated state machine on etcd's Raft
// (go.etcd.io/raft/v3): the Node.
//
// # Goroutines
//
// One goroutine, the run loop, owns etcd's RawNode: proposals, reads,
// received messages, ticks and status requests reach it through channels.
// The node uses raft's asynchronous storage writes: each Ready's
// MsgStorageAppend goes to the append goroutine, which persists it (merging
// whatever queued up meanwhile into one Storage.Save: group commit) and only
// then releases the acknowledgements; each MsgStorageApply goes to the apply
// goroutine, which hands committed commands to the StateMachine in batches.
// The leader sends its appends to followers before its own fsync finishes;
// raft counts its own vote only once the append goroutine has persisted.
// Applying never blocks persisting; a full apply queue makes the run loop
// wait (back-pressure) rather than grow memory.
//
// # Proposals and reads
//
// Propose works on every member: followers and learners forward to the
// leader, and the proposing member answers its caller when it applies the
// entry, which carries a request ID (member ID and sequence number). Every
// member skips a request ID it applied among the last 8192 commands, so a
// proposal duplicated on the way is applied once. When the term changes
// before a proposal is applied its caller gets ErrLeaderChanged: the outcome
// is unknown (see hashicorp/raft's ErrLeadershipLost for the same contract).
//
// Read is linearizable: concurrent reads share one ReadIndex round (asked of
// the leader by followers and learners), then wait until this member has
// applied that index. StaleRead reads local state at once.
//
// # Snapshots
//
// After Config.SnapshotCount applied entries the node asks the state machine
// for a point-in-time Snapshot, writes it through Storage.CreateSnapshot on
// a separate goroutine while applying continues, and compacts the log,
// keeping Config.SnapshotCatchUpEntries entries for slow followers. A
// snapshot's data starts with the node's header (member records and the
// dedup window), then the state machine's bytes. A member too far behind
// receives the leader's snapshot through the Transport as a stream; its data
// is verified whole before the state machine is restored from it.
//
// # Failure
//
// A failure to persist, a storage read that fails inside raft, a committed
// entry that does not decode or a panic in the state machine stops the node
// with a *FatalError (Node.Err, Node.Done); no entry is ever skipped.
//
// # Use
//
//	store, _ := storage.Open(dir, storage.Options{})
//	node, _ := raft.NewNode(raft.Config{ID: 1, InitialMembers: members}, sm, store)
//	tr, _ := transport.New(transport.Config{ID: 1, ClusterID: cid, ListenAddr: addr,
//		Handler: node.PeerHandler(), Snapshots: store})
//	_ = node.Start(tr)
//	defer node.Stop(ctx)
//	result, err := node.Propose(ctx, cmd)
//	value, err := node.Read(ctx, query)
package raft
