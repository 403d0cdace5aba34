package wire

import (
	"bytes"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Delta-coded relay containers (DeltaVersion; the layout is in relay.go).
// The container is written by hand, field by field as protobuf would,
// so that a header that repeats the one before it costs its differences
// only; any protobuf decoder reads it as a raftpb.Message, and
// expandDeltas makes it the plain container again.

// Container and header field numbers (raftpb.Message).
const (
	fieldType       protowire.Number = 1
	fieldTo         protowire.Number = 2
	fieldFrom       protowire.Number = 3
	fieldTerm       protowire.Number = 4
	fieldLogTerm    protowire.Number = 5
	fieldIndex      protowire.Number = 6
	fieldEntries    protowire.Number = 7
	fieldCommit     protowire.Number = 8
	fieldReject     protowire.Number = 10
	fieldRejectHint protowire.Number = 11
	fieldContext    protowire.Number = 12
	fieldVote       protowire.Number = 13
	fieldResponses  protowire.Number = 14
)

// appendDeltaContainer appends container m with its headers delta-coded.
func appendDeltaContainer(dst []byte, m *raftpb.Message) ([]byte, error) {
	if m.Type != nil || len(m.Responses) == 0 || m.Snapshot != nil {
		return dst, fmt.Errorf("%w: not a relay container", ErrMalformed)
	}
	dst = appendU64(dst, fieldTo, m.To)
	dst = appendU64(dst, fieldFrom, m.From)
	for _, e := range m.Entries {
		if e != nil && len(e.ProtoReflect().GetUnknown()) == 0 {
			dst = appendEntryField(dst, e) // the bytes proto.Marshal writes, without reflection
			continue
		}
		dst = protowire.AppendTag(dst, fieldEntries, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(proto.Size(e)))
		var err error
		if dst, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(dst, e); err != nil {
			return dst, err
		}
	}
	flags := m.GetRejectHint() | relayDelta
	dst = appendU64(dst, fieldRejectHint, &flags)

	// The counts, doubled, each plus its header's delta bit.
	size, i := 0, 0
	for b := m.Context; len(b) > 0; i++ {
		c, n := protowire.ConsumeVarint(b)
		if n < 0 || i >= len(m.Responses) {
			return dst, fmt.Errorf("%w: relay entry counts", ErrMalformed)
		}
		b = b[n:]
		size += protowire.SizeVarint(c<<1 | deltaBit(m.Responses, i))
	}
	if i != len(m.Responses) {
		return dst, fmt.Errorf("%w: %d relay entry counts for %d messages", ErrMalformed, i, len(m.Responses))
	}
	dst = protowire.AppendTag(dst, fieldContext, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	i = 0
	for b := m.Context; len(b) > 0; i++ {
		c, n := protowire.ConsumeVarint(b)
		b = b[n:]
		dst = protowire.AppendVarint(dst, c<<1|deltaBit(m.Responses, i))
	}

	for i, h := range m.Responses {
		var prev *raftpb.Message
		if deltaBit(m.Responses, i) != 0 {
			prev = m.Responses[i-1]
		}
		dst = protowire.AppendTag(dst, fieldResponses, protowire.BytesType)
		at := len(dst)
		dst = append(dst, 0) // the length, one byte if under 128
		dst = appendHeader(dst, h, prev)
		dst = fixLength(dst, at)
	}
	return dst, nil
}

// deltaBit is 1 if header i of hs is written as a delta of header i-1:
// it has every field that one has (a field absent from a delta reads as
// the one before's), and no body.
func deltaBit(hs []*raftpb.Message, i int) uint64 {
	if i == 0 {
		return 0
	}
	h, p := hs[i], hs[i-1]
	if h == nil || p == nil || len(h.Entries) > 0 || h.Snapshot != nil || len(h.Responses) > 0 {
		return 0
	}
	if covers(h.Type != nil, p.Type != nil) && covers(h.To != nil, p.To != nil) && covers(h.From != nil, p.From != nil) &&
		covers(h.Term != nil, p.Term != nil) && covers(h.LogTerm != nil, p.LogTerm != nil) &&
		covers(h.Index != nil, p.Index != nil) && covers(h.Commit != nil, p.Commit != nil) &&
		covers(h.Vote != nil, p.Vote != nil) && covers(h.Reject != nil, p.Reject != nil) &&
		covers(h.RejectHint != nil, p.RejectHint != nil) && covers(h.Context != nil, p.Context != nil) {
		return 1
	}
	return 0
}

// covers: a field the one before has, this one has too.
func covers(this, before bool) bool { return this || !before }

// appendHeader appends header h's fields: all of them, or with prev, those
// whose value differs from prev's.
func appendHeader(dst []byte, h, prev *raftpb.Message) []byte {
	if h == nil {
		return dst
	}
	if h.Type != nil && (prev == nil || prev.Type == nil || *prev.Type != *h.Type) {
		dst = protowire.AppendTag(dst, fieldType, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(*h.Type))
	}
	pick := func(v, p *uint64) *uint64 {
		if v == nil || (prev != nil && p != nil && *p == *v) {
			return nil
		}
		return v
	}
	var pTo, pFrom, pTerm, pLogTerm, pIndex, pCommit, pVote, pHint *uint64
	if prev != nil {
		pTo, pFrom, pTerm, pLogTerm, pIndex, pCommit, pVote, pHint = prev.To, prev.From, prev.Term, prev.LogTerm, prev.Index, prev.Commit, prev.Vote, prev.RejectHint
	}
	dst = appendU64(dst, fieldTo, pick(h.To, pTo))
	dst = appendU64(dst, fieldFrom, pick(h.From, pFrom))
	dst = appendU64(dst, fieldTerm, pick(h.Term, pTerm))
	dst = appendU64(dst, fieldLogTerm, pick(h.LogTerm, pLogTerm))
	dst = appendU64(dst, fieldIndex, pick(h.Index, pIndex))
	dst = appendU64(dst, fieldCommit, pick(h.Commit, pCommit))
	if h.Reject != nil && (prev == nil || prev.Reject == nil || *prev.Reject != *h.Reject) {
		dst = protowire.AppendTag(dst, fieldReject, protowire.VarintType)
		dst = protowire.AppendVarint(dst, protowire.EncodeBool(*h.Reject))
	}
	dst = appendU64(dst, fieldRejectHint, pick(h.RejectHint, pHint))
	if h.Context != nil && (prev == nil || prev.Context == nil || !bytes.Equal(prev.Context, h.Context)) {
		dst = protowire.AppendTag(dst, fieldContext, protowire.BytesType)
		dst = protowire.AppendBytes(dst, h.Context)
	}
	return appendU64(dst, fieldVote, pick(h.Vote, pVote))
}

func appendU64(dst []byte, num protowire.Number, v *uint64) []byte {
	if v == nil {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.VarintType)
	return protowire.AppendVarint(dst, *v)
}

// fixLength writes the length of what follows dst[at] into the one byte
// reserved there, moving it along if the length takes more.
func fixLength(dst []byte, at int) []byte {
	n := len(dst) - at - 1
	if n < 0x80 {
		dst[at] = byte(n)
		return dst
	}
	k := protowire.SizeVarint(uint64(n))
	dst = append(dst, make([]byte, k-1)...)
	copy(dst[at+k:], dst[at+1:at+1+n])
	protowire.AppendVarint(dst[at:at], uint64(n))
	return dst
}

// expandDeltas makes container m, decoded from a delta-coded frame, the
// plain container: each delta header gets the fields it lacks from the
// one before it (shared values: headers are never modified), and the
// counts lose their delta bits.
func expandDeltas(m *raftpb.Message) error {
	plain := make([]byte, 0, len(m.Context))
	i := 0
	for b := m.Context; len(b) > 0; i++ {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 || i >= len(m.Responses) {
			return fmt.Errorf("%w: relay entry counts", ErrMalformed)
		}
		b = b[n:]
		if v&1 != 0 {
			h := m.Responses[i]
			if i == 0 || h == nil || m.Responses[i-1] == nil {
				return fmt.Errorf("%w: a relay header that is a delta of none", ErrMalformed)
			}
			fill(h, m.Responses[i-1])
		}
		plain = protowire.AppendVarint(plain, v>>1)
	}
	if i != len(m.Responses) {
		return fmt.Errorf("%w: %d relay entry counts for %d messages", ErrMalformed, i, len(m.Responses))
	}
	m.Context = plain
	if flags := m.GetRejectHint() &^ relayDelta; flags != 0 {
		m.RejectHint = &flags
	} else {
		m.RejectHint = nil
	}
	return nil
}

// fill gives h the fields it lacks from p.
func fill(h, p *raftpb.Message) {
	h.Type = cmpOr(h.Type, p.Type)
	h.To, h.From, h.Term = cmpOr(h.To, p.To), cmpOr(h.From, p.From), cmpOr(h.Term, p.Term)
	h.LogTerm, h.Index, h.Commit = cmpOr(h.LogTerm, p.LogTerm), cmpOr(h.Index, p.Index), cmpOr(h.Commit, p.Commit)
	h.Vote, h.Reject, h.RejectHint = cmpOr(h.Vote, p.Vote), cmpOr(h.Reject, p.Reject), cmpOr(h.RejectHint, p.RejectHint)
	if h.Context == nil {
		h.Context = p.Context
	}
}

func cmpOr[T any](v, p *T) *T {
	if v != nil {
		return v
	}
	return p
}
