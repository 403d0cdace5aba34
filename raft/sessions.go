package raft

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
)

// Client sessions (the Raft dissertation, §6.3, as LogCabin and dragonboat
// keep them) make a retried command apply once, however many other
// commands were applied in between:
//
//   - RegisterClient proposes a registration entry; the client's ID is that
//     entry's log index, so an ID is never handed out twice and a session,
//     once expired, never comes back.
//   - Every member keeps, per session, the results of the client's latest
//     applied requests (at most sessionResultsKept, those above what the
//     client acknowledged with RequestID.Acked), and the point below which it
//     forgot them (the floor). A request whose Seq it has a result for is
//     answered with that result and not applied; one at or below the floor
//     is answered with ErrSessionExpired and not applied either: it may have
//     been applied, and the session can no longer tell.
//   - Sessions expire only when a registration finds the table full: the
//     least recently used one goes — the one whose last request is earliest
//     in the log. Nothing depends on a clock: every member holds the same
//     sessions after the same log, and they are part of the snapshot.
//   - The bounds a session obeys travel in its registration entry (the
//     Config of the member it registered through), so members configured
//     differently still decide alike.

// Defaults of the session bounds (Config.MaxClientSessions,
// Config.MaxSessionResultSize).
const (
	DefaultMaxClientSessions    = 4096
	DefaultMaxSessionResultSize = 1 << 10
)

const (
	// sessionResultsKept is how many results one session keeps (requests
	// applied above its floor): a client may have this many requests
	// outstanding and still be answered exactly.
	sessionResultsKept = 16
	// Sanity bounds, for decoding: a registration or snapshot beyond them is
	// refused.
	maxClientSessionsLimit    = 1 << 20
	maxSessionResultsLimit    = 1 << 10
	maxSessionResultSizeLimit = 1 << 20
	// maxSessionMemory bounds what one configuration's sessions may keep
	// (MaxClientSessions x sessionResultsKept x MaxSessionResultSize), so
	// that they fit in a snapshot header.
	maxSessionMemory    = 256 << 20
	registerPayloadSize = entryHeaderSize + 12
)

// RegisterClient opens a client session and returns its ID, for
// RequestID.Client in ProposeWithID. The ID is the log index of the
// registration, unique in the cluster for ever; every member keeps the
// session, in snapshots too, until Config.MaxClientSessions newer or more
// recently used sessions push it out (it then expires: ErrSessionExpired).
// A client registers once and numbers its requests 1, 2, 3, … in it; it
// registers again only after ErrSessionExpired.
//
// Errors are Propose's: when the outcome is unknown (ErrTimeout,
// ErrLeaderChanged), register again; a session registered but never used
// is simply the first to expire.
func (n *Node) RegisterClient(ctx context.Context) (uint64, error) {
	lim := sessionLimits{
		sessions:   uint32(n.cfg.MaxClientSessions),
		results:    sessionResultsKept,
		resultSize: uint32(n.cfg.MaxSessionResultSize),
	}
	v, err := n.proposeEntry(ctx, RequestID{}, lim.encode(), entryRegisterClient)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: a registration answered with %d bytes", ErrCorruptEntry, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// sessionLimits are the bounds a registration carries.
type sessionLimits struct {
	sessions   uint32 // the most sessions kept once this one is registered
	results    uint32 // the most results one session keeps
	resultSize uint32 // the most bytes of one result kept (value and error message)
}

func (l sessionLimits) encode() []byte {
	b := make([]byte, 0, 12)
	b = binary.BigEndian.AppendUint32(b, l.sessions)
	b = binary.BigEndian.AppendUint32(b, l.results)
	return binary.BigEndian.AppendUint32(b, l.resultSize)
}

func (l sessionLimits) valid() error {
	switch {
	case l.sessions == 0 || l.sessions > maxClientSessionsLimit:
		return fmt.Errorf("%d sessions (want 1 to %d)", l.sessions, maxClientSessionsLimit)
	case l.results == 0 || l.results > maxSessionResultsLimit:
		return fmt.Errorf("%d results per session (want 1 to %d)", l.results, maxSessionResultsLimit)
	case l.resultSize > maxSessionResultSizeLimit:
		return fmt.Errorf("results of %d bytes (want at most %d)", l.resultSize, maxSessionResultSizeLimit)
	}
	return nil
}

// decodeRegister splits a registration entry's payload. id is set whenever
// the entry header is whole, also when the limits are invalid.
func decodeRegister(b []byte) (id requestID, l sessionLimits, err error) {
	if len(b) < entryHeaderSize || b[0] != entryRegisterClient {
		return id, l, fmt.Errorf("%w: not a registration entry", ErrCorruptEntry)
	}
	id = requestID{proposer: binary.BigEndian.Uint64(b[1:9]), seq: binary.BigEndian.Uint64(b[9:17])}
	if len(b) != registerPayloadSize {
		return id, l, fmt.Errorf("%w: registration of %d bytes, want %d", ErrCorruptEntry, len(b), registerPayloadSize)
	}
	p := b[entryHeaderSize:]
	l = sessionLimits{
		sessions:   binary.BigEndian.Uint32(p[0:4]),
		results:    binary.BigEndian.Uint32(p[4:8]),
		resultSize: binary.BigEndian.Uint32(p[8:12]),
	}
	if err := l.valid(); err != nil {
		return id, l, fmt.Errorf("%w: registration: %v", ErrCorruptEntry, err)
	}
	return id, l, nil
}

// applyRegister applies a registration at idx: the commands before it
// first, then the new session (expiring the least recently used ones
// beyond the bound). Its proposer learns the client ID, idx.
func (n *Node) applyRegister(idx uint64, data []byte) error {
	a := &n.apply
	if err := n.flushCommands(); err != nil {
		return err
	}
	a.applied = idx
	id, lim, err := decodeRegister(data)
	if id == (requestID{}) || !a.dedup.add(id) {
		if err != nil {
			n.log.Warn("ignoring a registration entry that does not decode", slog.Uint64("index", idx), slog.Any("err", err))
		}
		return nil
	}
	var r Result
	if err != nil {
		// Replicated bytes: every member skips it alike.
		n.log.Warn("ignoring a registration entry that does not decode", slog.Uint64("index", idx), slog.Any("err", err))
		r.Err = err
	} else {
		if expired := a.sessions.register(idx, lim); expired > 0 {
			n.log.Debug("client sessions expired", slog.Uint64("index", idx), slog.Int("expired", expired), slog.Int("sessions", a.sessions.len()))
		}
		r.Value = binary.BigEndian.AppendUint64(nil, idx)
	}
	n.answerApplied(idx, id, r)
	return nil
}

// sessionCommand decides, at idx, what becomes of a command of a client
// session: applied (false: the caller collects it; its result is kept once
// the state machine gives it), or answered without being applied (true: a
// retry of a request applied before, or one its session cannot tell about).
func (n *Node) sessionCommand(idx uint64, id requestID, rid RequestID) (answered bool, err error) {
	a := &n.apply
	mine := id.proposer == n.cfg.ID
	s := a.sessions.get(rid.Client)
	if s == nil {
		var r Result
		if mine {
			r.Err = fmt.Errorf("%w: client %d has no session (it expired, or was never registered)", ErrSessionExpired, rid.Client)
		}
		return true, n.answerNow(idx, id, r)
	}
	a.sessions.touch(s, idx)
	r, st := s.lookup(rid.Seq)
	switch st {
	case seqNew:
		s.add(rid.Seq)
		b := n.applyBuffers()
		b.pend = append(b.pend, pendingResult{s: s, seq: rid.Seq, i: len(b.cmds)})
		s.ack(rid.Acked)
		return false, nil
	case seqForgotten:
		s.ack(rid.Acked)
		var res Result
		if mine {
			res.Err = fmt.Errorf("%w: client %d's session no longer knows request %d (it keeps the latest %d requests, none at or below %d): not applied now, it may have been before",
				ErrSessionExpired, rid.Client, rid.Seq, s.maxResults, s.floor)
		}
		return true, n.answerNow(idx, id, res)
	}
	if r.flags&resultPending != 0 {
		// Applied earlier in this batch: its result comes with the flush.
		if err := n.flushCommands(); err != nil {
			return true, err
		}
	}
	var res Result
	if mine {
		res = r.answer()
	}
	s.ack(rid.Acked)
	return true, n.answerNow(idx, id, res)
}

// answerNow answers the command at idx, which is not applied: after the
// commands before it, so that its caller never hears of it before theirs.
func (n *Node) answerNow(idx uint64, id requestID, r Result) error {
	if err := n.flushCommands(); err != nil {
		return err
	}
	n.answerApplied(idx, id, r)
	return nil
}

// pendingResult is a session command collected for the state machine: its
// result is stored once the batch is applied.
type pendingResult struct {
	s   *session
	seq uint64
	i   int // its position in the batch
}

// keepResults stores the results of the session commands just applied.
func (b *applyBufs) keepResults(results []Result) {
	for _, p := range b.pend {
		p.s.fill(p.seq, &results[p.i])
	}
	clear(b.pend)
	b.pend = b.pend[:0]
}

// resultError is a state machine's error as a session keeps it: its
// message. It matches (errors.Is) an error with the same message, so a
// sentinel the state machine returned as it is (kv.ErrCompareFailed) is
// recognised in the answer to a retry.
type resultError struct{ msg string }

func (e *resultError) Error() string { return e.msg }

func (e *resultError) Is(target error) bool { return target != nil && target.Error() == e.msg }

// The flags of a sessionResult.
const (
	resultPending uint8 = 1 << iota // applied in the batch being collected: no result yet
	resultKept                      // value (and errMsg) are the answer; else too large to keep
	resultErr                       // the answer carries an error, errMsg
	resultStored  = resultKept | resultErr
)

// sessionResult is what a session remembers of one applied request.
type sessionResult struct {
	seq    uint64
	flags  uint8
	value  []byte
	errMsg string
}

// answer is the answer to a retry of r's request: the first answer, or
// ErrDuplicateRequest if it was too large to keep.
func (r *sessionResult) answer() Result {
	if r.flags&resultKept == 0 {
		return Result{Err: fmt.Errorf("%w: its result was larger than the session keeps", ErrDuplicateRequest)}
	}
	res := Result{Value: bytes.Clone(r.value)}
	if r.flags&resultErr != 0 {
		res.Err = &resultError{msg: r.errMsg}
	}
	return res
}

// session is one client's session.
type session struct {
	client        uint64 // the index of its registration
	lastUse       uint64 // the index of its latest request (or registration)
	floor         uint64 // requests at or below it are forgotten
	maxResults    uint32
	maxResultSize uint32
	results       []sessionResult // applied requests above floor, ascending Seq
	spare         []byte          // a dropped result's buffer, for the next one
	older, newer  *session        // the table's use order
}

type seqState int

const (
	seqNew       seqState = iota // not applied: apply it
	seqApplied                   // applied: answer with its result
	seqForgotten                 // at or below the floor: cannot tell
)

func (s *session) lookup(seq uint64) (*sessionResult, seqState) {
	if seq <= s.floor {
		return nil, seqForgotten
	}
	for i := len(s.results) - 1; i >= 0; i-- {
		switch r := &s.results[i]; {
		case r.seq == seq:
			return r, seqApplied
		case r.seq < seq:
			return nil, seqNew
		}
	}
	return nil, seqNew
}

// add records seq (above the floor, not recorded) as applied, its result
// pending, forgetting the oldest beyond the bound.
func (s *session) add(seq uint64) {
	if s.results == nil {
		s.results = make([]sessionResult, 0, min(s.maxResults, sessionResultsKept))
	}
	i := len(s.results)
	for i > 0 && s.results[i-1].seq > seq {
		i--
	}
	s.results = append(s.results, sessionResult{})
	copy(s.results[i+1:], s.results[i:])
	s.results[i] = sessionResult{seq: seq, flags: resultPending}
	for uint32(len(s.results)) > s.maxResults {
		s.dropFirst()
	}
}

// ack forgets the results of the requests at or below acked: the client
// has their answers.
func (s *session) ack(acked uint64) {
	for len(s.results) > 0 && s.results[0].seq <= acked {
		s.dropFirst()
	}
	s.floor = max(s.floor, acked)
}

func (s *session) dropFirst() {
	r := s.results[0]
	s.floor = max(s.floor, r.seq)
	if cap(r.value) > cap(s.spare) {
		s.spare = r.value[:0]
	}
	n := copy(s.results, s.results[1:])
	s.results[n] = sessionResult{}
	s.results = s.results[:n]
}

// fill stores res as the result of seq, if still recorded.
func (s *session) fill(seq uint64, res *Result) {
	r, st := s.lookup(seq)
	if st != seqApplied || r.flags&resultPending == 0 {
		return
	}
	r.flags = 0
	var msg string
	if res.Err != nil {
		msg = res.Err.Error()
		r.flags |= resultErr
	}
	if uint64(len(res.Value))+uint64(len(msg)) > uint64(s.maxResultSize) {
		r.flags = 0
		return
	}
	r.flags |= resultKept
	r.value = append(s.spare[:0], res.Value...)
	s.spare = nil
	r.errMsg = msg
}

// sessionTable is every client session, in use order. It is owned by the
// apply goroutine; its map is allocated with the first session.
type sessionTable struct {
	m              map[uint64]*session
	oldest, newest *session
}

func (t *sessionTable) len() int { return len(t.m) }

func (t *sessionTable) get(client uint64) *session { return t.m[client] }

// register opens the session of the registration at idx and expires the
// least recently used ones beyond lim.sessions; it returns how many expired.
func (t *sessionTable) register(idx uint64, lim sessionLimits) (expired int) {
	for len(t.m) >= int(lim.sessions) && t.oldest != nil {
		t.remove(t.oldest)
		expired++
	}
	t.insert(&session{client: idx, lastUse: idx, maxResults: lim.results, maxResultSize: lim.resultSize})
	return expired
}

// insert adds s as the most recently used session.
func (t *sessionTable) insert(s *session) {
	if t.m == nil {
		t.m = make(map[uint64]*session)
	}
	t.m[s.client] = s
	s.older, s.newer = t.newest, nil
	if t.newest != nil {
		t.newest.newer = s
	} else {
		t.oldest = s
	}
	t.newest = s
}

func (t *sessionTable) remove(s *session) {
	delete(t.m, s.client)
	if s.older != nil {
		s.older.newer = s.newer
	} else {
		t.oldest = s.newer
	}
	if s.newer != nil {
		s.newer.older = s.older
	} else {
		t.newest = s.older
	}
	s.older, s.newer = nil, nil
}

// touch records a request of s at idx.
func (t *sessionTable) touch(s *session, idx uint64) {
	s.lastUse = idx
	if t.newest == s {
		return
	}
	t.remove(s)
	t.insert(s)
}

// appendTo appends the table's snapshot encoding to b:
//
//	uvarint n, then n sessions, least recently used first:
//	  uvarint client, last use, floor, max results, max result size
//	  uvarint r, then r results, ascending Seq:
//	    uvarint seq, byte flags (1: kept, 2: error)
//	    kept: uvarint length, value bytes; error too: uvarint length, message
//
// The encoding is canonical: equal tables encode to equal bytes.
func (t *sessionTable) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(t.m)))
	for s := t.oldest; s != nil; s = s.newer {
		b = binary.AppendUvarint(b, s.client)
		b = binary.AppendUvarint(b, s.lastUse)
		b = binary.AppendUvarint(b, s.floor)
		b = binary.AppendUvarint(b, uint64(s.maxResults))
		b = binary.AppendUvarint(b, uint64(s.maxResultSize))
		b = binary.AppendUvarint(b, uint64(len(s.results)))
		for _, r := range s.results {
			b = binary.AppendUvarint(b, r.seq)
			flags := r.flags & resultStored // a pending result is never in a snapshot (applying flushes first)
			b = append(b, flags>>1)
			if flags&resultKept != 0 {
				b = binary.AppendUvarint(b, uint64(len(r.value)))
				b = append(b, r.value...)
				if flags&resultErr != 0 {
					b = binary.AppendUvarint(b, uint64(len(r.errMsg)))
					b = append(b, r.errMsg...)
				}
			}
		}
	}
	return b
}

// decodeSessions reads a table encoded by appendTo, checking every
// invariant the apply path relies on.
func decodeSessions(d *decoder) (*sessionTable, error) {
	t := &sessionTable{}
	n := d.count()
	var lastUse uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		s := &session{client: d.uvarint(), lastUse: d.uvarint(), floor: d.uvarint()}
		maxResults, maxSize := d.uvarint(), d.uvarint()
		nr := d.count()
		if d.err != nil {
			break
		}
		switch {
		case s.client == 0 || t.m[s.client] != nil:
			return nil, fmt.Errorf("session %d: zero or repeated client ID", i)
		case i > 0 && s.lastUse <= lastUse:
			return nil, fmt.Errorf("session %d: last use %d not after %d", s.client, s.lastUse, lastUse)
		case s.lastUse < s.client:
			return nil, fmt.Errorf("session %d: last use %d before its registration", s.client, s.lastUse)
		case maxResults == 0 || maxResults > maxSessionResultsLimit || maxSize > maxSessionResultSizeLimit || nr > maxResults:
			return nil, fmt.Errorf("session %d: bounds %d/%d with %d results", s.client, maxResults, maxSize, nr)
		}
		lastUse = s.lastUse
		s.maxResults, s.maxResultSize = uint32(maxResults), uint32(maxSize)
		prev := s.floor
		for j := uint64(0); j < nr && d.err == nil; j++ {
			r := sessionResult{seq: d.uvarint()}
			flags := d.u8()
			if d.err != nil {
				break
			}
			if r.seq <= prev || flags > 3 || flags == 2 {
				return nil, fmt.Errorf("session %d: result %d (flags %d) after %d", s.client, r.seq, flags, prev)
			}
			prev = r.seq
			r.flags = flags << 1
			if flags&1 != 0 {
				r.value = bytes.Clone(d.bytes())
				if flags&2 != 0 {
					r.errMsg = string(d.bytes())
				}
				if uint64(len(r.value))+uint64(len(r.errMsg)) > maxSize {
					return nil, fmt.Errorf("session %d: result %d larger than %d bytes", s.client, r.seq, maxSize)
				}
			}
			s.results = append(s.results, r)
		}
		if d.err == nil {
			t.insert(s)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return t, nil
}
