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
// # Membership
//
// Membership changes are checked and planned by package confchange on the
// leader's run loop, then proposed as one ConfChangeV2 whose context carries
// a change ID and the member records (peer address, metadata), so every
// member learns them from the log. AddLearner is the default way to add a
// member: a learner never changes the quorum. Promote, Demote, RemoveMember,
// UpdateMember and ChangeMembership (any confchange.Request: replace, swap,
// …) work from any member: followers and learners forward the request to the
// leader over the member-to-member channel (Transport.Call), and the call
// returns once the change is applied on the member that was asked. An unsafe
// request is refused before anything is proposed with a *confchange.Refusal
// (errors.Is with confchange.ErrLearnerNotReady, ErrQuorumAtRisk, …);
// CheckMembership is the dry run. Raft replaces a conf change it cannot take
// by an empty entry without an error: the loop checks that the next append
// carries the change ID and answers ErrChangeDropped otherwise. A change of
// more than one voter goes through a joint configuration, which the leader
// leaves on its own once the entering change is applied (a new leader does
// the same after applying its log). On every tick the leader refreshes each
// member's readiness (recently heard from, replicating, lag at most
// Settings.MaxLag, for Settings.Stabilization) and asks Config.Policy —
// confchange.DefaultPolicy unless replaced — for a change: promote ready
// learners up to the odd target voter count, fail a lost voter over to a
// ready standby. Membership returns the leader's view with every member's
// progress and readiness. A member that learns it was removed — it applies
// its removal, or a member refuses it as removed — records it in its storage
// (Storage.MarkRemoved) and stops with ErrRemoved; IDs are never reused.
//
// # Snapshots
//
// After Config.SnapshotCount applied entries the node asks the state machine
// for a point-in-time Snapshot, writes it through Storage.CreateSnapshot on
// a separate goroutine while applying continues, and compacts the log,
// keeping Config.SnapshotCatchUpEntries entries for slow followers. A
// snapshot's data starts with the node's header (member records, removed
// IDs and the dedup window), then the state machine's bytes. A member too far behind
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
