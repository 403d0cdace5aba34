package raft

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3/raftpb"
)

// decodeConfChange decodes a committed configuration change entry.
func decodeConfChange(e *raftpb.Entry) (raftpb.ConfChangeI, error) {
	switch e.GetType() {
	case raftpb.EntryConfChange:
		cc := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return nil, fmt.Errorf("%w: conf change at index %d: %v", ErrCorruptEntry, e.GetIndex(), err)
		}
		return cc, nil
	case raftpb.EntryConfChangeV2:
		cc := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return nil, fmt.Errorf("%w: conf change at index %d: %v", ErrCorruptEntry, e.GetIndex(), err)
		}
		return cc, nil
	}
	return nil, fmt.Errorf("%w: entry %d is not a conf change", ErrCorruptEntry, e.GetIndex())
}

// confChangeContext returns the context of a conf change (where the member
// records travel).
func confChangeContext(cc raftpb.ConfChangeI) []byte {
	switch c := cc.(type) {
	case *raftpb.ConfChange:
		return c.GetContext()
	case *raftpb.ConfChangeV2:
		return c.GetContext()
	}
	return nil
}

// memberTable is the apply goroutine's view of every member's record,
// derived from the log (conf change contexts) and snapshots.
type memberTable map[uint64]Member

func (t memberTable) sorted() []Member {
	out := make([]Member, 0, len(t))
	for _, m := range t {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Member records are encoded as:
//
//	uvarint n, then n members: uvarint id, bytes peer address, uvarint flags
//	(bit 0: read-only), uvarint k, then k metadata pairs: bytes key, bytes value
//
// where bytes is a uvarint length followed by the bytes; metadata keys are
// sorted so the encoding is deterministic.
func appendMembers(b []byte, members []Member) []byte {
	b = binary.AppendUvarint(b, uint64(len(members)))
	for _, m := range members {
		b = binary.AppendUvarint(b, m.ID)
		b = appendBytes(b, m.PeerAddr)
		var flags uint64
		if m.ReadOnly {
			flags |= 1
		}
		b = binary.AppendUvarint(b, flags)
		keys := slices.Sorted(maps.Keys(m.Metadata))
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendBytes(b, k)
			b = appendBytes(b, m.Metadata[k])
		}
	}
	return b
}

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// readMembers decodes what appendMembers wrote; d.err is set on bad input.
func readMembers(d *decoder) []Member {
	n := d.count()
	var out []Member
	for i := uint64(0); i < n && d.err == nil; i++ {
		m := Member{ID: d.uvarint(), PeerAddr: string(d.bytes())}
		m.ReadOnly = d.uvarint()&1 != 0
		k := d.count()
		for j := uint64(0); j < k && d.err == nil; j++ {
			key, val := string(d.bytes()), string(d.bytes())
			if m.Metadata == nil {
				m.Metadata = make(map[string]string)
			}
			m.Metadata[key] = val
		}
		out = append(out, m)
	}
	return out
}

// memberContextVersion prefixes the context of the conf changes the node
// writes at bootstrap.
const memberContextVersion = 1

func encodeMemberContext(members []Member) []byte {
	return appendMembers([]byte{memberContextVersion}, members)
}

func decodeMemberContext(b []byte) ([]Member, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != memberContextVersion {
		return nil, fmt.Errorf("%w: unknown member context version %d", ErrCorruptEntry, b[0])
	}
	d := decoder{b: b[1:]}
	ms := readMembers(&d)
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: member context: %v", ErrCorruptEntry, d.err)
	}
	return ms, nil
}
