package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/time/rate"

	"github.com/understudy-raft/understudy/internal/wire"
)

// sendSnapshot starts streaming a MsgSnap and its file to the peer on its
// own connection. At most one snapshot per peer is in flight: raft sends
// the next one only after ReportSnapshot, so a second one is dropped.
func (p *peer) sendSnapshot(m *raftpb.Message) {
	p.mu.Lock()
	if p.snapping || p.stopped {
		p.mu.Unlock()
		p.c.more().dropFull.Add(1)
		return
	}
	p.snapping = true
	p.mu.Unlock()
	if !p.t.goTracked(func() { p.runSnapshot(m) }) {
		p.mu.Lock()
		p.snapping = false
		p.mu.Unlock()
	}
}

func (p *peer) runSnapshot(m *raftpb.Message) {
	start := time.Now()
	size, err := p.streamSnapshot(m)
	p.mu.Lock()
	p.snapping = false
	if r := p.c.rare.Load(); r != nil {
		if sc := r.snaps.Load(); sc != nil {
			sc.prog = nil
		}
	}
	p.mu.Unlock()
	if p.ops.isStopped(&p.mu) {
		return // removed, or the transport is closing: raft no longer cares
	}
	if err != nil {
		p.c.more().snapshots().failed.Add(1)
		var re *RefusedError
		if errors.As(err, &re) {
			p.c.more().refusals.Add(1)
			p.c.more().lastRefusal.Store(&re.Reason)
			p.t.logOnce(p.id, re.Reason, "peer refused our snapshot", "detail", re.Detail)
			if !errors.Is(err, ErrBusy) {
				p.t.handler.ReportRefused(p.id, err)
			}
		} else {
			p.t.log.Warn("sending snapshot failed", "peer", p.hexID(), "index", m.GetSnapshot().GetMetadata().GetIndex(), "err", err)
		}
		p.t.handler.ReportSnapshot(p.id, raft.SnapshotFailure)
		return
	}
	d := time.Since(start)
	sc := p.c.more().snapshots()
	sc.sent.Add(1)
	sc.bytesSent.Add(uint64(size))
	sc.hist.observe(d)
	p.t.log.Info("snapshot sent", "peer", p.hexID(), "index", m.GetSnapshot().GetMetadata().GetIndex(), "bytes", size, "duration", d)
	p.t.handler.ReportSnapshot(p.id, raft.SnapshotFinish)
}

// streamSnapshot sends m and its file, and waits for the receiver's ack.
func (p *peer) streamSnapshot(m *raftpb.Message) (int64, error) {
	t := p.t
	ctx, cancel := p.ops.with(&p.mu, context.Background(), 0) // canceled by RemovePeer and Close
	defer cancel()
	if err := t.mux.snapSend.acquire(ctx, p.learner.Load()); err != nil {
		return 0, err
	}
	defer t.mux.snapSend.release()

	var file io.Reader = eofReader{}
	var size int64
	if t.cfg.Snapshots != nil && m.Snapshot != nil {
		rc, n, err := t.cfg.Snapshots.OpenSnapshot(m.Snapshot)
		if err != nil {
			return 0, fmt.Errorf("transport: opening snapshot: %w", err)
		}
		defer func() { _ = rc.Close() }()
		if n < 0 {
			return 0, fmt.Errorf("transport: SnapshotStore reported a size of %d bytes", n)
		}
		file, size = rc, n
	}
	msg, err := wire.AppendMessage(nil, m)
	if err != nil {
		return 0, fmt.Errorf("transport: encoding MsgSnap: %w", err)
	}
	header := wire.AppendSnapshotHeader(nil, uint64(size), msg)
	if len(header) > t.cfg.MaxFrameSize {
		return 0, fmt.Errorf("transport: MsgSnap of %d bytes exceeds MaxFrameSize", len(header))
	}

	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	c, err := t.dial(ctx, addr, wire.KindSnapshot, p.id)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	if !t.track(c) {
		return 0, ErrClosed
	}
	defer t.untrack(c)
	stop := context.AfterFunc(ctx, func() { _ = c.Close() }) // RemovePeer
	defer stop()

	write := func(b []byte) error {
		_ = c.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
		_, err := c.Write(b)
		return err
	}
	if err := write(wire.AppendFrame(nil, wire.TypeSnapshot, t.cfg.GroupID, header)); err != nil {
		return 0, fmt.Errorf("transport: sending snapshot header: %w", err)
	}
	buf := make([]byte, wire.HeaderSize+int(min(int64(t.cfg.SnapshotChunkSize), max(size, 1))))
	paced := learnerPacer(*t.cfg.Config, p.learner.Load(), len(buf)-wire.HeaderSize)
	var crc uint32
	index := m.GetSnapshot().GetMetadata().GetIndex()
	for sent := int64(0); sent < size; {
		p.setSnapshotProgress(SnapshotProgress{Index: index, Sent: sent, Total: size})
		n := int(min(int64(len(buf)-wire.HeaderSize), size-sent))
		if t.mux.snapRate != nil {
			if err := t.mux.snapRate.WaitN(ctx, n); err != nil {
				return sent, fmt.Errorf("transport: snapshot rate limit: %w", err)
			}
		}
		if paced != nil {
			if err := paced.WaitN(ctx, n); err != nil {
				return sent, fmt.Errorf("transport: pacing a learner's snapshot: %w", err)
			}
		}
		frame := buf[:wire.HeaderSize+n]
		if _, err := io.ReadFull(file, frame[wire.HeaderSize:]); err != nil {
			return sent, fmt.Errorf("transport: reading snapshot file at byte %d of %d: %w", sent, size, err)
		}
		crc = wire.CRC(crc, frame[wire.HeaderSize:])
		if err := write(wire.SealFrame(frame, wire.TypeSnapshotChunk, t.cfg.GroupID)); err != nil {
			return sent, fmt.Errorf("transport: sending snapshot at byte %d of %d: %w", sent, size, err)
		}
		sent += int64(n)
	}
	if err := write(wire.AppendFrame(nil, wire.TypeSnapshotEnd, t.cfg.GroupID, wire.AppendSnapshotEnd(nil, uint64(size), crc))); err != nil {
		return size, fmt.Errorf("transport: sending snapshot end: %w", err)
	}

	_ = c.SetReadDeadline(time.Now().Add(t.cfg.SnapshotAckTimeout))
	f, err := c.r.Next()
	if err != nil {
		return size, fmt.Errorf("transport: waiting for the snapshot ack: %w", err)
	}
	if f.Type != wire.TypeSnapshotAck {
		return size, fmt.Errorf("%w: %s frame instead of a snapshot ack", ErrProtocol, f.Type)
	}
	ok, text, err := wire.ParseStatus(f.Payload)
	if err != nil {
		return size, err
	}
	if !ok {
		return size, &RemoteError{Peer: p.id, Message: string(text)}
	}
	return size, nil
}

// learnerPacer returns the limiter that paces one snapshot stream to a
// learner (Config.LearnerSnapshotBytesPerSec), nil for a voter or when
// pacing is off. Its burst is one chunk, so the stream is spread evenly
// from its first byte, never sent in a burst of a second's worth.
func learnerPacer(cfg Config, learner bool, chunk int) *rate.Limiter {
	if !learner || cfg.LearnerSnapshotBytesPerSec <= 0 {
		return nil
	}
	l := rate.NewLimiter(rate.Limit(cfg.LearnerSnapshotBytesPerSec), max(chunk, 1))
	l.AllowN(time.Now(), max(chunk, 1)) // the bucket starts empty
	return l
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// receiveSnapshot reads a MsgSnap and its file from a snapshot
// connection, has the SnapshotStore store the file, hands the message to
// the Handler and acks.
func (t *Transport) receiveSnapshot(a *accepted) error {
	a.dr.timeout = t.cfg.ReadTimeout
	f, err := a.r.Next()
	if err != nil {
		return err
	}
	if f.Type != wire.TypeSnapshot || f.Group != t.cfg.GroupID {
		return fmt.Errorf("%w: %s frame instead of a snapshot header", ErrProtocol, f.Type)
	}
	size, msg, err := wire.ParseSnapshotHeader(f.Payload)
	if err != nil {
		return err
	}
	m, err := wire.UnmarshalMessage(msg)
	if err != nil {
		return err
	}
	switch {
	case m.GetType() != raftpb.MsgSnap || m.Snapshot == nil:
		return fmt.Errorf("%w: %s with snapshot %t on a snapshot connection", ErrProtocol, m.GetType(), m.Snapshot != nil)
	case m.GetFrom() != a.hello.From || m.GetTo() != t.cfg.ID:
		return fmt.Errorf("%w: MsgSnap from %x to %x on a connection from %x", ErrProtocol, m.GetFrom(), m.GetTo(), a.hello.From)
	}

	start := time.Now()
	sr := &snapshotReader{r: a.r, size: size, remaining: size, group: t.cfg.GroupID, buf: make([]byte, min(uint64(t.cfg.SnapshotChunkSize), max(size, 1)))}
	if store := t.cfg.Snapshots; store != nil {
		err = store.ReceiveSnapshot(m.Snapshot, sr)
		if err != nil && sr.err == nil {
			err = fmt.Errorf("%w: %w", errSnapshotStore, err)
		}
	} else if size != 0 {
		err = fmt.Errorf("%w: a snapshot file of %d bytes arrived, and no SnapshotStore is configured", errSnapshotStore, size)
	}
	if err == nil {
		err = sr.finish()
	}
	if err != nil {
		storeErr := errors.Is(err, errSnapshotStore)
		if storeErr {
			t.connErrors.add(ReasonSnapshotStore)
			t.log.Error("storing a received snapshot failed", "peer", fmt.Sprintf("%x", a.hello.From), "err", err)
		}
		_ = a.nc.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
		_, _ = a.nc.Write(wire.AppendFrame(nil, wire.TypeSnapshotAck, t.cfg.GroupID, wire.AppendStatus(nil, nil, err.Error())))
		if storeErr {
			return nil // counted; the stream itself was fine
		}
		return err
	}
	sc := a.peer.c.more().snapshots()
	sc.recv.Add(1)
	sc.bytesRecv.Add(size)
	t.log.Info("snapshot received", "peer", fmt.Sprintf("%x", a.hello.From), "index", m.GetSnapshot().GetMetadata().GetIndex(), "bytes", size, "duration", time.Since(start))
	t.handler.Process(m)
	_ = a.nc.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
	_, err = a.nc.Write(wire.AppendFrame(nil, wire.TypeSnapshotAck, t.cfg.GroupID, wire.AppendStatus(nil, nil, "")))
	return err
}

var errSnapshotStore = errors.New("transport: snapshot store")

// snapshotReader is the io.Reader a SnapshotStore reads a received file
// from: the payloads of the chunk frames, in order, then io.EOF once the
// end frame confirmed the size and CRC-32C. Any problem is an error other
// than io.EOF, so a store never mistakes a cut stream for a whole file.
type snapshotReader struct {
	r         *wire.Reader
	group     uint64
	size      uint64
	remaining uint64 // declared bytes not yet received
	crc       uint32
	buf       []byte // chunk buffer, reused
	cur       []byte // unread part of the current chunk
	done      bool   // the end frame was verified
	err       error
}

func (s *snapshotReader) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.done {
			return 0, io.EOF
		}
		s.err = s.nextChunk()
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

func (s *snapshotReader) nextChunk() error {
	f, err := s.r.NextInto(s.buf)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("transport: snapshot stream at byte %d of %d: %w", s.size-s.remaining, s.size, err)
	}
	if f.Group != s.group {
		return fmt.Errorf("%w: snapshot frame for group %d", ErrProtocol, f.Group)
	}
	switch f.Type {
	case wire.TypeSnapshotChunk:
		if uint64(len(f.Payload)) > s.remaining {
			return fmt.Errorf("%w: snapshot stream longer than its declared %d bytes", ErrProtocol, s.size)
		}
		s.remaining -= uint64(len(f.Payload))
		s.crc = wire.CRC(s.crc, f.Payload)
		s.cur = f.Payload
	case wire.TypeSnapshotEnd:
		size, crc, err := wire.ParseSnapshotEnd(f.Payload)
		switch {
		case err != nil:
			return err
		case s.remaining != 0 || size != s.size:
			return fmt.Errorf("%w: snapshot stream ended after %d bytes of %d (end says %d)", io.ErrUnexpectedEOF, s.size-s.remaining, s.size, size)
		case crc != s.crc:
			return fmt.Errorf("%w: snapshot file CRC-32C %08x, sender computed %08x", wire.ErrChecksum, s.crc, crc)
		}
		s.done = true
	default:
		return fmt.Errorf("%w: %s frame in a snapshot stream", ErrProtocol, f.Type)
	}
	return nil
}

// finish reads the stream to its verified end. It fails if the store left
// file bytes unread: what it stored is then not the whole file.
func (s *snapshotReader) finish() error {
	n, err := io.Copy(io.Discard, s)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: the SnapshotStore returned before reading the last %d bytes", errSnapshotStore, n)
	}
	return nil
}
