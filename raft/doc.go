// Package raft runs one member of a replicated state machine on etcd's Raft
// (go.etcd.io/raft/v3): the Node.
//
// # Goroutines
//
// A node is three tasks run by a Scheduler (shared by the nodes of a host,
// or the node's own): each task runs on one goroutine at a time, so one
// goroutine at a time owns etcd's RawNode. The run loop takes proposals,
// reads, received messages, ticks and calls from queues that wake it. The
// node uses raft's asynchronous storage writes: each Ready's
// MsgStorageAppend goes to the append task, which persists it (merging
// whatever queued up meanwhile into one Storage.Save: group commit) and
// only then releases the acknowledgements; each MsgStorageApply goes to
// the apply task, which hands committed commands to the StateMachine in
// batches. The leader sends its appends to followers before its own fsync
// finishes; raft counts its own vote only once the append task has
// persisted. Applying never blocks persisting, and the run loop never
// waits for either: raft's flow control bounds what is in flight.
//
// # Proposals and reads
//
// Propose works on every member: followers and learners forward to the
// leader, and the proposing member answers its caller when it applies the
// entry, which carries a request ID (member ID and a sequence number that
// starts at a random point every run: no clock is trusted). Every member
// skips a request ID it applied among the last 8192 commands, so a proposal
// duplicated on the way is applied once. When the term changes before a
// proposal is applied its caller gets ErrLeaderChanged, and ErrTimeout when
// it has no outcome within Config.RequestTimeout (raft drops some forwarded
// messages silently): in both, the outcome is unknown (see hashicorp/raft's
// ErrLeadershipLost for the same contract).
//
// # Retries: client sessions
//
// ProposeWithID lets a client retry such a command, through any member,
// across leader changes, snapshots and restarts, and have it applied once
// (the Raft dissertation's client sessions, §6.3). The client registers
// once (RegisterClient: its ID is the index of the registration entry, so
// never reused) and numbers its requests 1, 2, 3, … (RequestID.Seq,
// increasing; a retry reuses its own). Every member keeps per session the
// results of the client's latest 16 requests above the one it acknowledged
// (RequestID.Acked, optional): a retry of one of them is answered with its
// first answer — the value, and the error as a message that errors.Is
// matches against a sentinel of the same message — and not applied again,
// however many other commands were applied in between. A request the
// session cannot tell about is never applied: at or below what it forgot
// (acknowledged, or more than 16 newer requests applied), or of a session
// that expired, it gets ErrSessionExpired (outcome of earlier attempts
// unknown: register anew); a retry whose result was larger than
// Config.MaxSessionResultSize (1 KiB) gets ErrDuplicateRequest. Sessions
// expire only when a registration finds Config.MaxClientSessions (4096) of
// them: the least recently used goes, by log position — never by a clock,
// so every member holds the same sessions (snapshots carry them). Memory is
// bounded by MaxClientSessions × 16 results of at most MaxSessionResultSize
// bytes, far less for clients that acknowledge.
//
// Read is linearizable: concurrent reads share one ReadIndex round (asked of
// the leader by followers and learners, whose requests share the leader's
// rounds in turn), then wait until this member has applied that index. A new leader answers no ReadIndex — its own or a
// forwarded one — before its commit index reaches the first entry of its
// term (etcd raft answers a single voter at once, from a commit index that
// can trail acknowledged writes after a restart), and read rounds carry a
// random per-run ID, so an answer meant for an earlier run of a member is
// ignored. At most 4096 reads wait in the loop (ReadBarrier then waits
// within its context); reads whose callers gave up are dropped. StaleRead
// reads local state at once.
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
// returns once the change is applied on the member that was asked. So does
// TransferLeadership, which returns once the member asked sees the new
// leader (raft's own forwarding of a transfer names the transferee as its
// sender, which the transport refuses as spoofed). An unsafe
// request is refused before anything is proposed with a *confchange.Refusal
// (errors.Is with confchange.ErrLearnerNotReady, ErrQuorumAtRisk, …);
// CheckMembership is the dry run. The checks read the configuration raft
// has taken on the loop (a committed change turns it joint as the loop hands
// the entry to the apply task) with the member records of the applied
// table; while the two differ a change is pending and every change is
// refused as in progress. Raft replaces a conf change it cannot take
// by an empty entry without an error: the loop checks that the next append
// carries the change ID and answers ErrChangeDropped otherwise. A change of
// more than one voter goes through a joint configuration, which the leader
// leaves on its own once the entering change is applied (a new leader does
// the same after applying its log) — unless leaving would demote or remove
// the leader itself: it then hands leadership to the most caught-up voter of
// the incoming configuration, which leaves it (a leader steps down on
// applying its own demotion, maybe before the others learned that the leave
// committed, and they could then elect nobody while an outgoing voter is
// down). On every tick the leader refreshes each
// member's readiness (recently heard from, replicating, lag at most
// Settings.MaxLag, for Settings.Stabilization) and asks Config.Policy —
// confchange.DefaultPolicy unless replaced — for a change: promote ready
// learners up to the odd target voter count (two at once), demote the
// voters beyond it (after the target was lowered), fail a lost voter over to
// a ready standby. Membership returns the leader's view with every member's
// progress and readiness, and what the policy waits for.
//
// The target voter count, the maximum of learners, automatic promotion and
// the failover and dead-member delays are cluster settings
// (confchange.ClusterSettings) carried through the log in entries of the
// node's own, never handed to the state machine, and in snapshots: the same
// on every member (Settings), changed at run time with UpdateSettings.
// Config.Membership and ManualMembership only seed them: the first leader
// replicates them, and the policy acts on replicated settings only;
// CheckSettings is their dry run (every invalid field, and the policy's
// next step under the new values). The leader also records each learner's
// readiness transitions in the log, so a new leader does not restart a
// ready learner's stabilization clock.
//
// A learner added read-only (Member.ReadOnly) serves reads and forwards
// writes like any learner but is never promoted, by the policy or by hand
// (ErrMemberReadOnly), and never takes a lost voter's seat; UpdateMember
// clearing the flag makes it promotable (a voter cannot be made read-only).
// With RemoveDeadAfter set (0, off, by default; otherwise at least
// FailoverAfter), the policy removes a learner silent that long — a lost
// voter is first failed over, then removed the same way — but never one
// that the target needs: the voters and promotable learners left must fill
// TargetVoters seats. A member that learns it was removed — it applies its
// removal, or a member refuses it as removed — records it in its storage
// (Storage.MarkRemoved) and stops with ErrRemoved; IDs are never reused.
//
// # Snapshots
//
// Snapshots are amortized: once at least Config.SnapshotCount entries were
// applied since the last snapshot AND those entries weigh at least as much
// as the last snapshot, the node asks the state machine for a point-in-time
// Snapshot, writes it through Storage.CreateSnapshot on a separate goroutine
// while applying continues (one at a time), and compacts the log, keeping
// Config.SnapshotCatchUpEntries entries for slow followers. A small state is
// thus snapshotted every SnapshotCount entries, as etcd does, and a large
// one about once per "state's size" of writes, so that snapshot work per
// byte written stays bounded (a fixed count would rewrite a 100 MB state
// every second under load). To tune: SnapshotCount bounds how often (raise
// it to snapshot less with a small state), the log kept is at most about
// the state's size plus SnapshotCatchUpEntries, and Node.Snapshot takes one
// on demand (before a backup, after a bulk load).
//
// A snapshot's data starts with the node's header (member records, removed
// IDs, the dedup windows, the settings and the client sessions), then the
// state machine's bytes. A member too
// far behind receives the leader's snapshot through the Transport as a
// stream; its data is verified whole before the state machine is restored
// from it. A member added after the latest snapshot is not in that
// snapshot's configuration and would refuse it: the leader then takes a
// fresh snapshot, at an applied index that includes the member, and sends
// that one (as etcd server merges its backend with the current
// configuration), so a learner added to an idle cluster catches up with
// exactly one snapshot; a snapshot still being written that predates the
// member is abandoned rather than finished first. A failed send is retried after a backoff (half an
// election timeout, doubling), and so is a snapshot that could not be
// written (a full disk, a failing state machine): one attempt and one
// Error line per step. The leader measures each member's catch-up
// (Membership's CatchUp: lag, rate, estimate, snapshot bytes in flight;
// EventCatchUp); the transport can bound the rate of snapshot streams
// (transport.Config.SnapshotBytesPerSec), gives learners a smaller queue,
// and gathers a learner's appends for a few milliseconds so that it syncs
// once per gathering rather than once per batch of the leader's
// (transport.Config.LearnerBatchDelay; the node tells the transport who is
// a learner, Transport.SetLearner).
//
// # Quiescence
//
// With Config.Quiesce, an idle group stops ticking and sending: a leader
// whose group was idle for a few ticks, with nothing pending and every
// member on a live host (LivenessTransport) caught up and every such
// learner ready and recorded so, sends each member a heartbeat marked "quiesce"
// (its context is 8 zero bytes and a marker: etcd raft reads a heartbeat
// answer's context as a read position, which zero leaves alone); a member
// that agrees on term, leader and commit and has nothing of its own
// pending quiesces too, else it answers and the leader wakes. A proposal,
// a read, a membership call, a transfer or a peer message wakes a
// quiesced member; Status and Membership do not. While quiesced, the
// leader's readiness and failover read each member's host liveness; a
// host's death wakes the quiesced groups it concerns, at
// SchedulerConfig.MaxWakesPerSec: a leader with a member there, and the
// followers of a leader there, which forget it and elect. A leader may
// quiesce with members on hosts not live (lagging, told nothing) when the
// others and itself are a quorum and the policy says when it would next
// act on them (confchange.Deadliner): a timer wakes it then, and so does a
// lagging member's host turning live again. Quiescence only
// withholds ticks and messages, so raft's safety is untouched (see
// "Quiescence" in docs/architecture.md). SchedulerStats counts quiesced
// groups and wake-ups by cause; Status says Quiesced and counts the
// member's own wake-ups. Config.Quiesce is off for a Node built here;
// understudy.Host turns it on for the groups it runs unless told not to
// (GroupConfig.DisableQuiescence).
//
// # Relayed standbys
//
// With Config.Relay, the leader feeds its standbys (learners) through
// relays, so that its bytes per write do not grow with their number: one
// RelayEnvelope per relay and Ready, each entry once, with each standby's
// append or heartbeat header; a relay (a follower voter, else a caught-up
// standby, at most Config.RelayFanout standbys each) hands each standby
// exactly the leader's message; the standbys answer through it, which
// hands their answers on to the leader together, and the leader steps an
// answer only from the relay it chose for that standby
// (AnswerRelayTransport; without it, they answer directly). A standby silent for an election timeout, stuck, or whose
// relay is unfit is fed directly again. A relay never builds a message
// from its own log, so a standby only ever steps the leader's messages,
// late or not (see "Relayed standbys" in docs/architecture.md). It needs
// a RelayTransport (transport.Transport and the host's groups are);
// Status.Progress says each standby's relay (RelayedBy). Config.Relay is
// off for a Node built here; understudy.Host turns it on for the groups
// it runs unless told not to (GroupConfig.DisableRelay).
//
// # Versions
//
// Members exchange log entries, snapshots and member-to-member requests
// whose formats grow: an entry kind a member does not know stops it with a
// FatalError. So the transport's protocol version (internal/wire.Version)
// versions all of them, and members whose version ranges do not meet
// refuse each other at the handshake (transport.ErrVersion, with both
// ranges in the reason; Membership shows Refused "version"): a rolling
// upgrade goes one member at a time, and the cluster serves while a quorum
// of voters runs one version (docs/operations.md, "Upgrades"). A change
// that adds an entry kind, a snapshot header version or a request op bumps
// that one constant. A change that only adds a frame a peer may go
// without (version 4: relay envelopes; 5: answers in them) keeps
// speaking the previous versions too (internal/wire.MinVersion), and
// sends that frame only on connections of the new one.
//
// # Failure
//
// A failure to persist, a storage read that fails inside raft, a committed
// entry that does not decode or a panic in the state machine (in any of
// its calls, a snapshot's writer included) stops the node with a
// *FatalError (Node.Err, Node.Done); no entry is ever skipped.
//
// # Use
//
// Most hosts start a member with the root package (understudy.Start), which
// does the wiring below, joins by address and checks the data dir's
// identity. Wired by hand, from the parts:
//
//	clusterID := understudy.ClusterIDFor(members, "") // the same on every initial member
//	store, _ := storage.Open(dir, storage.Options{})
//	node, _ := raft.NewNode(raft.Config{ID: 1, ClusterID: clusterID, InitialMembers: members}, sm, store)
//	tr, _ := transport.New(transport.Config{ID: 1, ClusterID: clusterID, ListenAddr: addr,
//		Handler: node.PeerHandler(), Snapshots: store})
//	_ = node.Start(tr) // refuses a store of another member or cluster (ErrIdentityMismatch)
//	defer func() { _ = node.Stop(ctx); <-node.Done(); tr.Close(); store.Close() }() // in this order
//	result, err := node.Propose(ctx, cmd)
//	value, err := node.Read(ctx, query)
//
// A joiner with empty storage learns the cluster first: Discover(ctx, tr,
// addrs, id, 0) returns the cluster ID (tr.SetClusterID, Config.ClusterID)
// and every member's address (tr.AddPeer).
package raft
