// Package transport carries etcd raft messages, snapshots and
// member-to-member requests between the members of a cluster, over TCP
// with optional mutual TLS.
//
// # Use
//
// The node creates one Transport with New, adds every other member with
// AddPeer (and UpdatePeer, SetLearner, RemovePeer as membership changes),
// and hands each Ready's messages to Send. Received messages, and reports
// for raft (unreachable peers, snapshot outcomes), arrive through the
// Handler it supplies; snapshot files through its SnapshotStore.
//
//	tr, err := transport.New(transport.Config{
//		ID: 1, ClusterID: cid, ListenAddr: "10.0.0.1:7001",
//		TLS: tlsCfg, Handler: node, Snapshots: snapStore,
//	})
//	tr.AddPeer(2, "10.0.0.2:7001")
//	tr.Send(rd.Messages) // never blocks
//
// # Connections
//
// Raft messages travel on host links: one connection from each host (a
// Mux: a Transport without one makes its own) to each peer address,
// shared by every group with a peer there, in each direction — host A
// writes every group's messages to B on the link A dialed, B to A on the
// link B dialed, so appends pipeline without head-of-line blocking behind
// responses. A peer owns no goroutine: Send queues into it, and the
// link's writer drains the queues of all its groups' peers by deficit
// round robin (a quantum of 32 KiB per queue per round; a queue whose
// message was larger sits rounds out until they repay it), so that one
// group's backlog (a catching-up follower, a learner) delays another
// group's heartbeats by at most a round; everything a round encodes leaves
// in one write (up to 256 KiB), flushed as soon as the queues run dry. The
// writer dials (with exponential backoff and jitter between attempts) and
// pings every PingInterval; the listener answers with a pong on the same
// connection, which gives the round-trip time (every group's peers there
// share it), says whether the peer host is live (Transport.HostContact,
// LivenessHandler: no pong within LivenessTimeout, or a redial that
// failed after a break) and keeps an idle link within the listener's
// ReadTimeout. A
// link that breaks or cannot connect makes every group's peer there
// unreachable; it redials at once when the peer host reaches us.
//
// Before a group's first message on a link, the writer sends an attachment
// (group, cluster, sender, receiver, the sender's advertised address and
// its host's ID, MuxConfig.HostID): the listener's transport for that
// group checks it exactly as the hello of a connection (below) and answers
// on the link; it may also revoke it later (the sender was removed, the
// group stopped). The listener also binds it to the link's host: the
// attachment's host ID must be the link hello's, and the sender must be a
// member that host owns here (the first host ID that spoke for it), whose
// advertised address alone updates the address book (Mux.Addresses); with
// TLS, that host ID is bound to its certificate's subject (identity.go).
// Messages of what was not admitted are dropped and counted
// (MuxStats.DroppedUnadmitted) — those of a group with no admission on the
// link without being read into memory — and a message over the host's
// MaxFrameSize is skipped and counted (MuxStats.DroppedTooLarge), the link
// going on; a refusal is the group's only:
// the peer retries its attachment on its backoff. The listener hands each
// group what one read got for it at once: to a BatchHandler directly, to a
// plain Handler through a bounded inbox drained on demand; it never waits
// for one group. A host that answers a link hello as an unknown kind is
// reached with a raft stream of the old kind per group (legacy.go).
//
// Messages to a learner (SetLearner) are gathered for LearnerBatchDelay
// after each write, and the contiguous appends among them merged into one:
// a learner is not in the quorum, so nothing waits on its acknowledgement,
// and it then syncs its log once per delay instead of once per leader
// batch — the cost a standby puts on the voters' disk and cores falls
// accordingly. A read answer to a learner is written at once.
//
// Send never blocks: each peer's queue is bounded in messages and bytes
// (a lower byte budget for learners), and a message that does not fit, or
// whose peer's link is down or attachment refused, is dropped, counted,
// and the peer reported to Handler.ReportUnreachable (from a goroutine
// started on demand), as raft expects of a lossy network.
//
// A MsgSnap travels on a connection of its own, with the file from
// SnapshotStore.OpenSnapshot streamed behind it in checksummed chunks,
// so a snapshot never delays heartbeats or appends. The receiver hands the
// stream to SnapshotStore.ReceiveSnapshot, verifying the size and the
// whole-file CRC-32C as it goes; only once the store has the file does it
// pass the MsgSnap to Handler.Process and acknowledge, and only then does
// the sender report raft.SnapshotFinish. Neither side holds the file in
// memory, and MaxConcurrentSnapshots bounds both directions.
//
// Call and CallAddr send an opaque request to a peer's
// Handler.ServeRequest on a short-lived connection of a third kind, with
// the same handshake and TLS: a joiner discovers the cluster through it,
// a follower forwards a membership request to the leader.
//
// # Handshake and refusals
//
// Every connection opens with a hello: protocol version range, connection
// kind, group ID, cluster ID, sender and receiver member IDs. The listener
// refuses, with a reason sent back, counted in Stats.Refused and logged at
// warning level once per member and reason — once a minute per reason for
// a sender it does not know (a hello's sender ID is not authenticated, so
// nothing is remembered per claimed ID):
//
//   - a version range with no version in common (ErrVersion): a member
//     speaks only its own protocol version, which versions what members
//     exchange (frames, raft entry kinds, snapshot headers, requests), so
//     members of different versions refuse each other, both ways, with a
//     reason naming both; the hello carries a range so that a later build
//     can also speak an earlier version;
//   - another group (ErrGroupMismatch) or cluster (ErrClusterMismatch);
//   - a receiver ID that is not its own (ErrWrongReceiver);
//   - a sender it has removed (ErrRemoved) or does not know (ErrUnknownSender);
//   - a snapshot beyond its concurrency limit (ErrBusy).
//
// Two exceptions serve joiners: a request connection with cluster ID 0
// from a known member is accepted (discovery: the reply carries the
// listener's cluster and member IDs), and so is one with receiver ID 0
// (CallAddr, which does not know whom it dials). A member whose own
// cluster ID is still 0 accepts only request connections.
//
// The dialer passes a refusal to Handler.ReportRefused as a *RefusedError
// that matches the reason's sentinel with errors.Is: that is how a removed
// member learns it was removed. Only a group's own refusals are passed:
// those of its connections' hellos, and of its attachments on a host link.
// A host link's hello names no member that counts, so a refusal of it is
// passed to the groups only for another protocol version; any other is a
// failed connection (their peers are unreachable).
//
// # Wire format
//
// A connection is a sequence of frames, each a 20-byte header and a
// payload of at most MaxFrameSize bytes:
//
//	offset size field
//	0      4    payload length, big endian
//	4      1    type: 1 hello, 2 hello reply, 3 raft message, 4 ping, 5 pong,
//	            6 snapshot header, 7 snapshot chunk, 8 snapshot end,
//	            9 snapshot ack, 10 request, 11 response, 12 attach,
//	            13 attach reply
//	5      3    reserved, zero
//	8      8    group ID, big endian
//	16     4    CRC-32C (Castagnoli) of bytes 0..15 and the payload, big endian
//
// The length is checked against the limit before anything is allocated
// (4 KiB for the first frame, before the peer is known), the CRC before the
// payload is used. Payloads:
//
//	hello        "USTW", min version u16, max version u16, kind u8 (1 raft
//	             stream, 2 snapshot, 3 request, 4 host link), 7 reserved bytes, group u64,
//	             cluster u64, sender u64, receiver u64 (48 bytes; later
//	             versions may append)
//	hello reply  version u16 (0 if refused), code u8 (0 accepted, 1 version,
//	             2 cluster, 3 group, 4 wrong receiver, 5 unknown sender,
//	             6 removed, 7 busy, 8 bad hello), 5 reserved bytes, cluster u64,
//	             member u64, then a UTF-8 reason of up to 1 KiB
//	raft message the protobuf encoding of raftpb.Message
//	ping, pong   an 8-byte token (the pinger's monotonic clock)
//	snapshot     file size u64, then the MsgSnap's protobuf encoding
//	chunk        the next bytes of the file
//	snapshot end file size u64, CRC-32C of the whole file u32
//	ack/response status u8 (0 ok: the response follows; 1 error: UTF-8 text)
//	request      the caller's remaining time in nanoseconds u64 (0: none),
//	             then the request
//	attach       cluster u64, sender u64, receiver u64 (later versions may append)
//	attach reply code u8 (as the hello reply's), 7 reserved bytes, sender
//	             u64, receiver u64, cluster u64, then a UTF-8 reason of up
//	             to 1 KiB
//
// All integers are big endian. On a host link, the dialer sends
// attachments, messages (the group in the header) and pings (group 0); the
// listener attach replies and pongs. A link hello names one of the groups
// it will carry (a host of the previous release then answers bad_hello,
// "unknown connection kind", which makes the dialer fall back to raft
// streams; so does group_mismatch); a listener that speaks links ignores
// its group and IDs. On a raft stream, the dialer sends
// messages and pings and the listener only pongs; on a snapshot
// connection, the dialer sends the header, the chunks and the end, the
// listener the ack; on a request connection, requests and responses
// alternate. Any decoding error, checksum mismatch, oversized frame,
// unexpected frame, or a silence longer than HandshakeTimeout (before the
// hello) or ReadTimeout (after) closes the connection and is counted in
// Stats.ConnErrors; nothing from such a connection reaches raft.
//
// Raft messages are encoded by a hand-written protowire codec for every
// type but MsgSnap (byte-identical to proto.Marshal, about twice as fast,
// and decoding with one allocation per message of at most one entry),
// falling back to the protobuf package otherwise.
//
// # Security
//
// With Config.TLS from NewMutualTLS, every connection is TLS 1.3 and both
// sides present a certificate signed by the cluster's CA, optionally
// restricted to a list of names. Member IDs in the hello are not bound to
// certificates: any holder of a valid certificate may claim any member ID.
package transport
