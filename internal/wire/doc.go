// Package wire is the byte format of the peer transport: frames, the
// handshake, the control payloads and a fast raftpb.Message codec.
//
// # Frames
//
// Every connection is a sequence of frames. A frame is a 20-byte header and
// a payload:
//
//	offset size field
//	0      4    payload length in bytes (header not counted), big endian
//	4      1    frame type (Type)
//	5      3    reserved, zero
//	8      8    group ID, big endian (0 on a host link's pings and pongs)
//	16     4    CRC-32C (Castagnoli) of header bytes 0..15 then the payload, big endian
//
// The reader checks the length against its maximum before it allocates
// anything, the type and reserved bytes before it reads the payload, and
// the CRC after. Any failure means the stream is unusable and the
// connection is closed: there is no resynchronisation. A large payload is
// allocated as its bytes arrive, never from its declared length alone;
// and a reader that does not want a frame (Reader.NextHeader tells it its
// type, group and size) skips its payload, CRC checked, without
// allocating it, and the stream stays usable.
//
// # Connections
//
// The dialer's first frame is a Hello (magic "USTW", version range, kind,
// group, cluster, sender and receiver IDs); the listener answers with a
// HelloReply (chosen version or a refusal code with a reason, and its own
// cluster and member IDs), and closes the connection if it refused. Then,
// by kind:
//
//   - KindStream: the dialer sends TypeMessage frames (one protobuf-encoded
//     raftpb.Message each, many per write) and TypePing frames; the listener
//     only answers pings with TypePong. Raft traffic from A to B flows on the
//     stream A dialed; B's messages to A on the stream B dialed.
//   - KindSnapshot: the dialer sends one TypeSnapshot frame (file size and the
//     MsgSnap), the file in TypeSnapshotChunk frames, and a TypeSnapshotEnd
//     frame (size and CRC-32C of the whole file); the listener answers with
//     one TypeSnapshotAck status once the file is stored, and both close.
//   - KindRequest: TypeRequest frames (the caller's time budget and an
//     opaque request), each answered by one TypeResponse status.
//   - KindLink: a host link, one per ordered pair of hosts, carrying the
//     raft messages of every group: TypeAttach frames admit a group's
//     (sender, receiver) and are answered by TypeAttachReply frames, which
//     also refuse or revoke; TypeMessage and TypeRelay (relay envelope)
//     frames of any admitted group; pings and pongs in group 0 (see
//     link.go, relay.go).
//
// # Messages
//
// AppendMessage and UnmarshalMessage are a hand-written protowire codec for
// raftpb.Message, byte-compatible with proto.Marshal and proto.Unmarshal
// (a fuzz test checks both agree). Every message but MsgSnap takes the fast
// path: encoding is a single pass with no allocation in about half the time
// of proto.Marshal; decoding allocates once for a message with at most one
// entry and three times for more, whatever the number of fields and entries
// (proto.Unmarshal allocates once per set field and five times per entry),
// and aliases entry data and context into the frame's payload rather
// than copying it. Anything else falls back to the proto package.
package wire
