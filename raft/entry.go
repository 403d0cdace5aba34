package raft

import (
	"encoding/binary"
	"fmt"
)

// Entry payload format (the Data of a normal raft entry):
//
//	byte 0      kind (entryCommand)
//	bytes 1-8   proposer member ID, big endian
//	bytes 9-16  proposer's sequence number, big endian
//	rest        the command, as given to Propose
//
// The (proposer, sequence) pair is the request ID: the proposer resolves its
// caller when it applies the entry, and every member skips an ID it applied
// recently (a proposal duplicated by the network is applied once).
const (
	entryCommand      byte = 1
	entryHeaderSize        = 17
	maxEntryKindKnown      = entryCommand
)

// requestID identifies one proposal cluster-wide.
type requestID struct {
	proposer uint64
	seq      uint64
}

func encodeCommand(id requestID, cmd []byte) []byte {
	return appendCommand(make([]byte, 0, entryHeaderSize+len(cmd)), id, cmd)
}

// appendCommand appends the payload of cmd with id to b.
func appendCommand(b []byte, id requestID, cmd []byte) []byte {
	b = append(b, entryCommand)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	return append(b, cmd...)
}

// decodeCommand splits an entry payload. It never panics on bad input.
func decodeCommand(b []byte) (requestID, []byte, error) {
	if len(b) < entryHeaderSize {
		return requestID{}, nil, fmt.Errorf("%w: payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), entryHeaderSize)
	}
	if b[0] != entryCommand {
		return requestID{}, nil, fmt.Errorf("%w: unknown entry kind %d (this version knows up to %d)", ErrCorruptEntry, b[0], maxEntryKindKnown)
	}
	id := requestID{
		proposer: binary.BigEndian.Uint64(b[1:9]),
		seq:      binary.BigEndian.Uint64(b[9:17]),
	}
	return id, b[entryHeaderSize:], nil
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
