package raft

import (
	"encoding/binary"
	"fmt"

	"github.com/understudy-raft/understudy/confchange"
)

// Entry payload format (the Data of a normal raft entry):
//
//	byte 0      kind (entryCommand, entrySessionCommand, entrySettings,
//	            entryReadiness: a learner's readiness, see readiness.go,
//	            entrySettingsSeed: settings applied only if none are set,
//	            entryRegisterClient: a client session, see sessions.go, or
//	            entryClientCommand: written by older versions only)
//	bytes 1-8   proposer member ID, big endian
//	bytes 9-16  proposer's sequence number, big endian
//	bytes 17-40 entrySessionCommand only: the caller's RequestID (client,
//	            seq, acked); entryClientCommand: bytes 17-32 (client, seq)
//	rest        the command, as given to Propose; for entrySettings, the
//	            cluster settings (confchange.ClusterSettings.Encode), which the
//	            node applies itself: the state machine never sees them; for
//	            entryRegisterClient, the session bounds (3 x uint32)
//
// The (proposer, sequence) pair identifies the proposal: the proposer
// resolves its caller when it applies the entry, and every member skips a
// pair it applied recently (a proposal duplicated by the network is applied
// once). A session command also carries the caller's RequestID, which every
// member checks against the client's session: a retry through any member is
// applied once (sessions.go). An older version's entryClientCommand is
// checked against the window of the last 8192 client request IDs it used.
const (
	entryCommand       byte = 1
	entryClientCommand byte = 2
	entrySettings      byte = 3
	// entrySettingsSeed is the first leader's seed: applied only while no
	// settings are set, so that it never overrides an update that reached
	// the log before it.
	entrySettingsSeed   byte = 5
	entrySessionCommand byte = 6
	entryRegisterClient byte = 7
	entryHeaderSize          = 17
	clientHeaderSize         = entryHeaderSize + 16
	sessionHeaderSize        = entryHeaderSize + 24
	maxEntryKindKnown        = entryRegisterClient
)

// requestID identifies one proposal cluster-wide.
type requestID struct {
	proposer uint64
	seq      uint64
}

// RequestID identifies a command of a client session across retries
// (Node.ProposeWithID). Client is the ID Node.RegisterClient returned;
// Seq numbers the client's requests, starting at 1 and increasing: a new
// request never reuses or goes below the Seq of an earlier one (a retry
// reuses its own). Acked, optional, tells the cluster that the client has
// the answers of every request with a Seq at or below it, so that their
// results can be dropped; it must be below Seq.
//
// Every member keeps, per session, the results of the client's latest 16
// requests above Acked: a retry of one of them is answered with its first
// result and not applied again, however many other commands were applied
// in between; a request at or below the part the session forgot is
// answered with ErrSessionExpired and not applied. So a client may have up
// to 16 requests outstanding (sent but unanswered) at a time.
type RequestID struct {
	Client uint64
	Seq    uint64
	Acked  uint64
}

func encodeCommand(id requestID, cmd []byte) []byte {
	return appendCommand(make([]byte, 0, entryHeaderSize+len(cmd)), id, RequestID{}, cmd)
}

// appendCommand appends the payload of cmd with id (and rid, if its Client
// is set: a session command) to b.
func appendCommand(b []byte, id requestID, rid RequestID, cmd []byte) []byte {
	kind := entryCommand
	if rid.Client != 0 {
		kind = entrySessionCommand
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	if rid.Client != 0 {
		b = binary.BigEndian.AppendUint64(b, rid.Client)
		b = binary.BigEndian.AppendUint64(b, rid.Seq)
		b = binary.BigEndian.AppendUint64(b, rid.Acked)
	}
	return append(b, cmd...)
}

// appendLegacyClientCommand appends an older version's client command
// (entryClientCommand: no Acked) to b. Only tests write one.
func appendLegacyClientCommand(b []byte, id requestID, rid RequestID, cmd []byte) []byte {
	b = append(b, entryClientCommand)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	b = binary.BigEndian.AppendUint64(b, rid.Client)
	b = binary.BigEndian.AppendUint64(b, rid.Seq)
	return append(b, cmd...)
}

// appendSettings appends the payload of a settings entry with id to b.
func appendSettings(b []byte, id requestID, settings []byte) []byte {
	return appendSettingsKind(b, entrySettings, id, settings)
}

func appendSettingsKind(b []byte, kind byte, id requestID, settings []byte) []byte {
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	return append(b, settings...)
}

// decodeSettings splits a settings entry's payload.
func decodeSettings(b []byte) (requestID, confchange.ClusterSettings, error) {
	if len(b) < entryHeaderSize || (b[0] != entrySettings && b[0] != entrySettingsSeed) {
		return requestID{}, confchange.ClusterSettings{}, fmt.Errorf("%w: not a settings entry", ErrCorruptEntry)
	}
	id := requestID{proposer: binary.BigEndian.Uint64(b[1:9]), seq: binary.BigEndian.Uint64(b[9:17])}
	cs, err := confchange.DecodeClusterSettings(b[entryHeaderSize:])
	return id, cs, err
}

// payloadSize is the size of the payload appendCommand makes.
func payloadSize(rid RequestID, cmd []byte) int {
	if rid.Client != 0 {
		return sessionHeaderSize + len(cmd)
	}
	return entryHeaderSize + len(cmd)
}

// decodeCommand splits an entry payload; rid.Client is 0 for a plain
// command (b[0] tells a session command from an older version's client
// command). It never panics on bad input.
func decodeCommand(b []byte) (id requestID, rid RequestID, cmd []byte, err error) {
	if len(b) < entryHeaderSize {
		return id, rid, nil, fmt.Errorf("%w: payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), entryHeaderSize)
	}
	switch b[0] {
	case entryCommand, entryClientCommand, entrySessionCommand:
	default:
		return id, rid, nil, fmt.Errorf("%w: unknown entry kind %d (this version knows up to %d)", ErrCorruptEntry, b[0], maxEntryKindKnown)
	}
	id = requestID{
		proposer: binary.BigEndian.Uint64(b[1:9]),
		seq:      binary.BigEndian.Uint64(b[9:17]),
	}
	if b[0] == entryCommand {
		return id, rid, b[entryHeaderSize:], nil
	}
	size := clientHeaderSize
	if b[0] == entrySessionCommand {
		size = sessionHeaderSize
	}
	if len(b) < size {
		return id, rid, nil, fmt.Errorf("%w: client payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), size)
	}
	rid = RequestID{Client: binary.BigEndian.Uint64(b[17:25]), Seq: binary.BigEndian.Uint64(b[25:33])}
	if size == sessionHeaderSize {
		rid.Acked = binary.BigEndian.Uint64(b[33:41])
	}
	if rid.Client == 0 {
		return id, rid, nil, fmt.Errorf("%w: client payload with client ID 0", ErrCorruptEntry)
	}
	return id, rid, b[size:], nil
}

// dedupWindow remembers the request IDs of the last `size` applied commands,
// deterministically (by log position, never by time), so that every member
// skips the same duplicates. It is part of the snapshot. Its memory grows
// with the IDs it holds: an idle member's windows are empty.
type dedupWindow struct {
	size int
	seen map[requestID]struct{}
	ring []requestID // FIFO of remembered IDs, oldest at head
	head int
}

func newDedupWindow(size int) *dedupWindow {
	return &dedupWindow{size: size, seen: make(map[requestID]struct{})}
}

// add records id and reports whether it was new.
func (d *dedupWindow) add(id requestID) bool {
	if _, dup := d.seen[id]; dup {
		return false
	}
	d.seen[id] = struct{}{}
	if len(d.ring) < d.size {
		d.ring = append(d.ring, id)
		return true
	}
	delete(d.seen, d.ring[d.head])
	d.ring[d.head] = id
	d.head = (d.head + 1) % d.size
	return true
}

// ids returns the remembered IDs, oldest first.
func (d *dedupWindow) ids() []requestID {
	out := make([]requestID, 0, len(d.ring))
	out = append(out, d.ring[d.head:]...)
	return append(out, d.ring[:d.head]...)
}

// reset replaces the contents with ids (oldest first).
func (d *dedupWindow) reset(ids []requestID) {
	d.seen = make(map[requestID]struct{}, min(len(ids), d.size))
	d.ring = nil
	d.head = 0
	for _, id := range ids {
		d.add(id)
	}
}
