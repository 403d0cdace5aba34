package wire

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto).
const (
	msgType       = 1
	msgTo         = 2
	msgFrom       = 3
	msgTerm       = 4
	msgLogTerm    = 5
	msgIndex      = 6
	msgEntries    = 7
	msgCommit     = 8
	msgSnapshot   = 9
	msgReject     = 10
	msgRejectHint = 11
	msgContext    = 12
	msgVote       = 13
	msgResponses  = 14

	entType  = 1
	entTerm  = 2
	entIndex = 3
	entData  = 4
)

// Valid values of the closed proto2 enums. protobuf-go keeps an unknown
// value of a closed enum as an unknown field, so the fast decoder leaves
// such input to proto.Unmarshal.
var (
	validMsgType   [64]bool
	validEntryType [64]bool
)

func init() {
	for v := range raftpb.MessageType_name {
		if v >= 0 && int(v) < len(validMsgType) {
			validMsgType[v] = true
		}
	}
	for v := range raftpb.EntryType_name {
		if v >= 0 && int(v) < len(validEntryType) {
			validEntryType[v] = true
		}
	}
}

func validEnum(table *[64]bool, v uint64) bool {
	e := int32(v) // protobuf-go truncates an enum varint to int32
	return e >= 0 && int(e) < len(table) && table[e]
}

// AppendMessage appends the protobuf encoding of m to b.
//
// Messages without a snapshot, responses or unknown fields (every message
// raft sends to a peer except MsgSnap) take a hand-written protowire path
// that writes the same bytes as proto.Marshal (fields in number order) in
// a single pass without touching m; the rest go through proto.Marshal.
// m is only read, never modified.
func AppendMessage(b []byte, m *raftpb.Message) ([]byte, error) {
	if !fastEncodable(m) {
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	b = appendUint64Field(b, msgType, m.Type != nil, uint64(int64(m.GetType())))
	b = appendUint64Field(b, msgTo, m.To != nil, m.GetTo())
	b = appendUint64Field(b, msgFrom, m.From != nil, m.GetFrom())
	b = appendUint64Field(b, msgTerm, m.Term != nil, m.GetTerm())
	b = appendUint64Field(b, msgLogTerm, m.LogTerm != nil, m.GetLogTerm())
	b = appendUint64Field(b, msgIndex, m.Index != nil, m.GetIndex())
	for _, e := range m.Entries {
		b = appendEntryField(b, e)
	}
	b = appendUint64Field(b, msgCommit, m.Commit != nil, m.GetCommit())
	var reject uint64
	if m.GetReject() {
		reject = 1
	}
	b = appendUint64Field(b, msgReject, m.Reject != nil, reject)
	b = appendUint64Field(b, msgRejectHint, m.RejectHint != nil, m.GetRejectHint())
	if m.Context != nil {
		b = protowire.AppendTag(b, msgContext, protowire.BytesType)
		b = protowire.AppendBytes(b, m.Context)
	}
	b = appendUint64Field(b, msgVote, m.Vote != nil, m.GetVote())
	return b, nil
}

// MarshalProto is AppendMessage through proto.Marshal only. It exists for
// the benchmarks and tests that compare the two encoders.
func MarshalProto(b []byte, m *raftpb.Message) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

// UnmarshalProto decodes b with proto.Unmarshal only (a copying decoder).
// It exists for the benchmarks and tests that compare the two decoders.
func UnmarshalProto(b []byte) (*raftpb.Message, error) {
	m := new(raftpb.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: raft message: %v", ErrMalformed, err)
	}
	return m, nil
}

func fastEncodable(m *raftpb.Message) bool {
	if m.Snapshot != nil || len(m.Responses) != 0 || len(m.ProtoReflect().GetUnknown()) != 0 {
		return false
	}
	for _, e := range m.Entries {
		if e == nil || len(e.ProtoReflect().GetUnknown()) != 0 {
			return false
		}
	}
	return true
}

// appendEntryField appends e as a message's entries field, as
// proto.Marshal writes it. e has no unknown fields (fastEncodable).
func appendEntryField(b []byte, e *raftpb.Entry) []byte {
	b = protowire.AppendTag(b, msgEntries, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(entrySize(e)))
	b = appendUint64Field(b, entType, e.Type != nil, uint64(int64(e.GetType())))
	b = appendUint64Field(b, entTerm, e.Term != nil, e.GetTerm())
	b = appendUint64Field(b, entIndex, e.Index != nil, e.GetIndex())
	if e.Data != nil {
		b = protowire.AppendTag(b, entData, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Data)
	}
	return b
}

func appendUint64Field(b []byte, num protowire.Number, present bool, v uint64) []byte {
	if !present {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func uint64FieldSize(present bool, v uint64) int {
	if !present {
		return 0
	}
	return 1 + protowire.SizeVarint(v) // field numbers below 16 take a 1-byte tag
}

func entrySize(e *raftpb.Entry) int {
	n := uint64FieldSize(e.Type != nil, uint64(int64(e.GetType()))) +
		uint64FieldSize(e.Term != nil, e.GetTerm()) +
		uint64FieldSize(e.Index != nil, e.GetIndex())
	if e.Data != nil {
		n += 1 + protowire.SizeBytes(len(e.Data))
	}
	return n
}

// messageBacking holds a decoded message and all of its scalar fields, so
// that the fast decoder allocates once per message rather than once per
// optional field.
type messageBacking struct {
	m      raftpb.Message
	u      [8]uint64
	typ    raftpb.MessageType
	reject bool
}

// messageBacking1 is messageBacking for the most common message with
// entries, a MsgApp carrying one: a single allocation holds it all.
type messageBacking1 struct {
	messageBacking
	ents [1]entryBacking
	ptrs [1]*raftpb.Entry
}

// entryBacking is messageBacking for an entry; all entries of a message
// share one []entryBacking allocation.
type entryBacking struct {
	e   raftpb.Entry
	u   [2]uint64
	typ raftpb.EntryType
}

// UnmarshalMessage decodes a raftpb.Message from b.
//
// The result is proto.Equal to what proto.Unmarshal gives for the same
// input. Messages with only the fields raft uses for everything but MsgSnap
// are decoded by a hand-written path that allocates a constant number of
// times per message, independent of the number of entries and fields; the
// rest (snapshots, responses, unknown fields or enum values, anything odd)
// go through proto.Unmarshal.
//
// The fast path does not copy: Entry.Data and Context alias b, so the caller
// must hand b over with the message and not reuse it. It allocates once
// for a message with at most one entry, three times for more.
func UnmarshalMessage(b []byte) (*raftpb.Message, error) {
	nEntries, ok := scanMessage(b)
	if ok {
		if m, ok := decodeMessage(b, nEntries); ok {
			return m, nil
		}
	}
	return UnmarshalProto(b)
}

// UnmarshalMessageShared is UnmarshalMessage for b in a buffer its caller
// reuses: shared reports whether the message refers to b (its entries' data
// or its context alias it, or the general decoder decoded it), and then b
// is the message's from now on. A message that does not (an answer, a
// heartbeat) leaves b to its caller.
func UnmarshalMessageShared(b []byte) (m *raftpb.Message, shared bool, err error) {
	nEntries, ok := scanMessage(b)
	if ok {
		if m, ok := decodeMessage(b, nEntries); ok {
			return m, nEntries > 0 || m.Context != nil, nil
		}
	}
	m, err = UnmarshalProto(b)
	return m, true, err
}

// scanMessage checks that every field of b is one the fast decoder handles,
// with the expected wire type, and counts the entries.
func scanMessage(b []byte) (nEntries int, ok bool) {
	nEntries, _, ok = scanFields(b, false)
	return nEntries, ok
}

// scanFields is scanMessage, accepting responses (each a message without
// responses of its own) if responses, and counting them.
func scanFields(b []byte, responses bool) (nEntries, nResponses int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		if num == msgResponses && responses {
			v, n := protowire.ConsumeBytes(b)
			if typ != protowire.BytesType || n < 0 {
				return 0, 0, false
			}
			if _, ok := scanMessage(v); !ok {
				return 0, 0, false
			}
			nResponses++
			b = b[n:]
			continue
		}
		switch num {
		case msgType, msgTo, msgFrom, msgTerm, msgLogTerm, msgIndex, msgCommit, msgReject, msgRejectHint, msgVote:
			if typ != protowire.VarintType {
				return 0, 0, false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || (num == msgType && !validEnum(&validMsgType, v)) {
				return 0, 0, false
			}
			b = b[n:]
		case msgEntries, msgContext:
			if typ != protowire.BytesType {
				return 0, 0, false
			}
			_, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
			if num == msgEntries {
				nEntries++
			}
		default:
			return 0, 0, false
		}
	}
	return nEntries, nResponses, true
}

// UnmarshalContainer decodes a relay container (a message with responses:
// the headers of a relay envelope, see relay.go) as UnmarshalMessage does,
// its headers with the fast decoder too; input the fast decoder does not
// handle goes to proto.Unmarshal. The container refers to b.
func UnmarshalContainer(b []byte) (*raftpb.Message, error) {
	nEntries, nResponses, ok := scanContainer(b)
	if ok {
		if m, ok := decodeContainer(b, nEntries, nResponses); ok {
			return m, nil
		}
	}
	return UnmarshalProto(b)
}

// scanContainer is scanMessage for a container: it also accepts responses,
// each a message scanMessage accepts, and counts them.
func scanContainer(b []byte) (nEntries, nResponses int, ok bool) {
	return scanFields(b, true)
}

// fieldLen is the length of a field's value of wire type typ at the start
// of b (-1 if malformed or of a type no raftpb.Message field has).
func fieldLen(b []byte, typ protowire.Type) int {
	switch typ {
	case protowire.VarintType:
		_, n := protowire.ConsumeVarint(b)
		return n
	case protowire.BytesType:
		_, n := protowire.ConsumeBytes(b)
		return n
	}
	return -1
}

// decodeContainer decodes b, which scanContainer accepted.
func decodeContainer(b []byte, nEntries, nResponses int) (*raftpb.Message, bool) {
	m, ok := decodeMessage(b, nEntries)
	if !ok || nResponses == 0 {
		return m, ok
	}
	// The headers (no entries of their own) share one allocation.
	m.Responses = make([]*raftpb.Message, 0, nResponses)
	backs := make([]messageBacking, nResponses)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		n = fieldLen(b, typ)
		if num == msgResponses {
			v, _ := protowire.ConsumeBytes(b)
			var h *raftpb.Message
			if k, _ := scanMessage(v); k == 0 {
				h, ok = decodeInto(v, &backs[len(m.Responses)], nil, nil)
			} else {
				h, ok = decodeMessage(v, k)
			}
			if !ok {
				return nil, false
			}
			m.Responses = append(m.Responses, h)
		}
		b = b[n:]
	}
	return m, true
}

// decodeMessage decodes b, which scanMessage (or scanContainer, whose
// responses it skips) accepted. It reports false when an entry needs the
// general decoder.
func decodeMessage(b []byte, nEntries int) (*raftpb.Message, bool) {
	var mb *messageBacking
	var ents []entryBacking
	var ptrs []*raftpb.Entry
	switch nEntries {
	case 0:
		mb = new(messageBacking)
	case 1:
		mb1 := new(messageBacking1)
		mb, ents, ptrs = &mb1.messageBacking, mb1.ents[:], mb1.ptrs[:0:1]
	default:
		mb = new(messageBacking)
		ents, ptrs = make([]entryBacking, nEntries), make([]*raftpb.Entry, 0, nEntries)
	}
	return decodeInto(b, mb, ents, ptrs)
}

// decodeInto is decodeMessage into backing mb, with room for the entries
// in ents and ptrs (empty, with a capacity of the entry count).
func decodeInto(b []byte, mb *messageBacking, ents []entryBacking, ptrs []*raftpb.Entry) (*raftpb.Message, bool) {
	m := &mb.m
	m.Entries = ptrs
	for len(b) > 0 {
		num, _, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num == msgEntries || num == msgContext || num == msgResponses {
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			if num == msgResponses {
				continue // decodeContainer's
			}
			if num == msgContext {
				m.Context = v[:len(v):len(v)]
				continue
			}
			eb := &ents[len(m.Entries)]
			if !decodeEntry(v, eb) {
				return nil, false
			}
			m.Entries = append(m.Entries, &eb.e)
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		b = b[n:]
		switch num {
		case msgType:
			mb.typ = raftpb.MessageType(int32(v))
			m.Type = &mb.typ
		case msgTo:
			mb.u[0] = v
			m.To = &mb.u[0]
		case msgFrom:
			mb.u[1] = v
			m.From = &mb.u[1]
		case msgTerm:
			mb.u[2] = v
			m.Term = &mb.u[2]
		case msgLogTerm:
			mb.u[3] = v
			m.LogTerm = &mb.u[3]
		case msgIndex:
			mb.u[4] = v
			m.Index = &mb.u[4]
		case msgCommit:
			mb.u[5] = v
			m.Commit = &mb.u[5]
		case msgRejectHint:
			mb.u[6] = v
			m.RejectHint = &mb.u[6]
		case msgVote:
			mb.u[7] = v
			m.Vote = &mb.u[7]
		case msgReject:
			mb.reject = protowire.DecodeBool(v)
			m.Reject = &mb.reject
		}
	}
	return m, true
}

func decodeEntry(b []byte, eb *entryBacking) bool {
	e := &eb.e
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case entType, entTerm, entIndex:
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case entType:
				if !validEnum(&validEntryType, v) {
					return false
				}
				eb.typ = raftpb.EntryType(int32(v))
				e.Type = &eb.typ
			case entTerm:
				eb.u[0] = v
				e.Term = &eb.u[0]
			case entIndex:
				eb.u[1] = v
				e.Index = &eb.u[1]
			}
		case entData:
			if typ != protowire.BytesType {
				return false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			e.Data = v[:len(v):len(v)]
		default:
			return false
		}
	}
	return true
}

// MessageSize estimates the encoded size of m in bytes without encoding
// it: the payload bytes (entry data, context, snapshot data) plus a fixed
// allowance per message and entry. The transport's queue byte budgets count
// this.
func MessageSize(m *raftpb.Message) int {
	n := 64 + len(m.Context)
	for _, e := range m.Entries {
		n += 24 + len(e.Data)
	}
	if m.Snapshot != nil {
		n += len(m.Snapshot.Data) + 64
	}
	return n
}
