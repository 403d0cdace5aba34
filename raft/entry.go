package raft

import (
	"encoding/binary"
	"fmt"

	"github.com/understudy-raft/understudy/confchange"
)

// Entry payload format (the Data of a normal raft entry):
//
//	byte 0      kind (entryCommand, entryClientCommand, entrySettings,
//	            entryReadiness: a learner's readiness, see readiness.go, or
//	            entrySettingsSeed: settings applied only if none are set)
//	bytes 1-8   proposer member ID, big endian
//	bytes 9-16  proposer's sequence number, big endian
//	bytes 17-32 entryClientCommand only: the caller's RequestID (client, seq)
//	rest        the command, as given to Propose; for entrySettings, the
//	            cluster settings (confchange.ClusterSettings.Encode), which the
//	            node applies itself: the state machine never sees them
//
// The (proposer, sequence) pair identifies the proposal: the proposer
// resolves its caller when it applies the entry, and every member skips a
// pair it applied recently (a proposal duplicated by the network is applied
// once). A client command also carries the caller's RequestID, which every
// member skips the same way: a retry through any member is applied once.
const (
	entryCommand       byte = 1
	entryClientCommand byte = 2
	entrySettings      byte = 3
	// entrySettingsSeed is the first leader's seed: applied only while no
	// settings are set, so that it never overrides an update that reached
	// the log before it.
	entrySettingsSeed byte = 5
	entryHeaderSize        = 17
	clientHeaderSize       = entryHeaderSize + 16
	maxEntryKindKnown      = entrySettingsSeed
)

// requestID identifies one proposal cluster-wide.
type requestID struct {
	proposer uint64
	seq      uint64
}

// RequestID identifies a command across retries (Node.ProposeWithID): a
// client picks a Client ID of its own (non-zero, e.g. random, unique among
// the clients of a cluster) and numbers its requests with Seq. A command
// whose RequestID was applied recently — among the last 8192 client
// commands — is not applied again.
type RequestID struct {
	Client uint64
	Seq    uint64
}

func encodeCommand(id requestID, cmd []byte) []byte {
	return appendCommand(make([]byte, 0, entryHeaderSize+len(cmd)), id, RequestID{}, cmd)
}

// appendCommand appends the payload of cmd with id (and rid, if its Client
// is set) to b.
func appendCommand(b []byte, id requestID, rid RequestID, cmd []byte) []byte {
	kind := entryCommand
	if rid.Client != 0 {
		kind = entryClientCommand
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	if rid.Client != 0 {
		b = binary.BigEndian.AppendUint64(b, rid.Client)
		b = binary.BigEndian.AppendUint64(b, rid.Seq)
	}
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
		return clientHeaderSize + len(cmd)
	}
	return entryHeaderSize + len(cmd)
}

// decodeCommand splits an entry payload; rid.Client is 0 for a plain
// command. It never panics on bad input.
func decodeCommand(b []byte) (id requestID, rid RequestID, cmd []byte, err error) {
	if len(b) < entryHeaderSize {
		return id, rid, nil, fmt.Errorf("%w: payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), entryHeaderSize)
	}
	switch b[0] {
	case entryCommand, entryClientCommand:
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
	if len(b) < clientHeaderSize {
		return id, rid, nil, fmt.Errorf("%w: client payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), clientHeaderSize)
	}
	rid = RequestID{Client: binary.BigEndian.Uint64(b[17:25]), Seq: binary.BigEndian.Uint64(b[25:33])}
	if rid.Client == 0 {
		return id, rid, nil, fmt.Errorf("%w: client payload with client ID 0", ErrCorruptEntry)
	}
	return id, rid, b[clientHeaderSize:], nil
}

// dedupWindow remembers the request IDs of the last `size` applied commands,
// deterministically (by log position, never by time), so that every member
// skips the same duplicates. It is part of the snapshot.
type dedupWindow struct {
	size int
	seen map[requestID]struct{}
	ring []requestID // FIFO of remembered IDs, oldest at head
	head int
}

func newDedupWindow(size int) *dedupWindow {
	return &dedupWindow{size: size, seen: make(map[requestID]struct{}, size)}
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
	d.seen = make(map[requestID]struct{}, d.size)
	d.ring = d.ring[:0]
	d.head = 0
	for _, id := range ids {
		d.add(id)
	}
}
