package transport

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestSendReceiveTwoTransports(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	connect(a, b)

	const n = 1000
	var msgs []*raftpb.Message
	for i := uint64(1); i <= n; i++ {
		msgs = append(msgs, appMsg(1, 2, i, 256))
	}
	a.Send(msgs)
	waitFor(t, "b receives every message", func() bool { return hb.count() == n })
	for i, m := range hb.received() {
		if !proto.Equal(m, msgs[i]) {
			t.Fatalf("message %d: got %v, want %v", i, m, msgs[i])
		}
	}
	b.Send([]*raftpb.Message{heartbeat(2, 1)})
	waitFor(t, "a receives the heartbeat", func() bool { return ha.count() == 1 })

	waitFor(t, "an RTT measurement", func() bool { return a.Stats().Peers[0].RTTHistory.Count > 0 })
	// A write is counted once it returns, which may be after the peer read it.
	waitFor(t, "a's messages counted", func() bool { return a.Stats().Peers[0].MessagesSent >= n })
	sa, sb := a.Stats(), b.Stats()
	if p := sa.Peers[0]; p.ID != 2 || p.MessagesSent != n || !p.Connected || p.RTT <= 0 {
		t.Errorf("a's stats of b: %+v", p)
	}
	if p := sb.Peers[0]; p.MessagesReceived != n || p.BytesReceived == 0 {
		t.Errorf("b's stats of a: %+v", p)
	}
}

func TestSendNeverMutatesMessages(t *testing.T) {
	hb := &fakeHandler{}
	a := newTestTransport(t, 1, &fakeHandler{})
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	m := appMsg(1, 2, 5, 64)
	want := proto.Clone(m)
	a.Send([]*raftpb.Message{m, m, m})
	waitFor(t, "delivery", func() bool { return hb.count() == 3 })
	if !proto.Equal(m, want) {
		t.Fatalf("message modified: %v", m)
	}
}

func TestThreeTransports(t *testing.T) {
	hs := []*fakeHandler{{}, {}, {}}
	var ts []*Transport
	for i, h := range hs {
		ts = append(ts, newTestTransport(t, uint64(i+1), h))
	}
	connect(ts...)
	for i, tr := range ts {
		from := uint64(i + 1)
		var msgs []*raftpb.Message
		for to := uint64(1); to <= 3; to++ {
			if to != from {
				for k := uint64(1); k <= 50; k++ {
					msgs = append(msgs, appMsg(from, to, k, 32))
				}
			}
		}
		tr.Send(msgs)
	}
	for i, h := range hs {
		waitFor(t, "every member receives 100 messages", func() bool { return h.count() == 100 })
		perSender := map[uint64]uint64{}
		for _, m := range h.received() {
			if m.GetTo() != uint64(i+1) {
				t.Fatalf("member %d got a message for %d", i+1, m.GetTo())
			}
			// Per sender, order is kept.
			if m.GetEntries()[0].GetIndex() != perSender[m.GetFrom()]+1 {
				t.Fatalf("member %d: message from %d out of order", i+1, m.GetFrom())
			}
			perSender[m.GetFrom()]++
		}
	}
}

func TestUnknownPeerDropped(t *testing.T) {
	a := newTestTransport(t, 1, &fakeHandler{})
	a.Send([]*raftpb.Message{heartbeat(1, 9), heartbeat(1, 1)})
	if got := a.Stats().DroppedUnknownPeer; got != 2 {
		t.Fatalf("DroppedUnknownPeer = %d, want 2", got)
	}
}

func TestPeerRestart(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	addr := b.Addr().String()
	connect(a, b)
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "first delivery", func() bool { return hb.count() > 0 })

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// While b is down, messages are dropped and b reported unreachable.
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "b reported unreachable", func() bool {
		return ha.unreachableCount(2) > 0 && a.Stats().Peers[0].DroppedDisconnected > 0
	})

	hb2 := &fakeHandler{}
	b2 := newTestTransport(t, 2, hb2, func(c *Config) { c.ListenAddr = addr })
	b2.AddPeer(1, a.Addr().String())
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery after the restart", func() bool { return hb2.count() > 0 })
	// Messages follow the attachment without waiting for its reply, so the
	// acceptance may be counted after the first delivery.
	waitFor(t, "the attachment accepted again", func() bool { return a.Stats().Peers[0].Dials >= 2 })
	if s := a.Stats().Peers[0]; s.DroppedDisconnected == 0 {
		t.Errorf("after a restart: %+v", s)
	}
}

func TestUpdatePeerAddress(t *testing.T) {
	hb, hb2 := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, &fakeHandler{})
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery to the old address", func() bool { return hb.count() > 0 })

	// Member 2 moves: a new process on a new port.
	b2 := newTestTransport(t, 2, hb2)
	b2.AddPeer(1, a.Addr().String())
	a.UpdatePeer(2, b2.Addr().String())
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery to the new address", func() bool { return hb2.count() > 0 })
	if got := a.Stats().Peers[0].Addr; got != b2.Addr().String() {
		t.Fatalf("address %s, want %s", got, b2.Addr())
	}
}

// blackhole accepts TCP connections and never answers: a peer stuck in its
// handshake, whose queue can only fill.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func TestQueueFullDropsAndReports(t *testing.T) {
	ha := &fakeHandler{}
	a := newTestTransport(t, 1, ha, func(c *Config) {
		c.MaxQueueMessages = 100
		c.MaxQueueBytes = 64 << 10
		c.MaxLearnerQueueBytes = 8 << 10
		c.HandshakeTimeout = 10 * time.Minute // the blackhole never answers; keep the dial pending
	})
	a.AddPeer(2, blackhole(t))
	a.AddPeer(3, blackhole(t))
	a.SetLearner(3, true)

	var msgs []*raftpb.Message
	for i := uint64(1); i <= 1000; i++ {
		msgs = append(msgs, appMsg(1, 2, i, 1024), appMsg(1, 3, i, 1024))
	}
	a.Send(msgs) // must return: Send never blocks
	s := a.Stats()
	voter, learner := s.Peers[0], s.Peers[1]
	if voter.QueuedBytes > 64<<10 || voter.QueuedMessages == 0 || voter.DroppedQueueFull != uint64(1000-voter.QueuedMessages) {
		t.Errorf("voter: %+v", voter)
	}
	if learner.QueuedBytes > 8<<10 || learner.QueuedMessages == 0 || learner.QueuedMessages >= voter.QueuedMessages {
		t.Errorf("learner: %+v (voter queued %d)", learner, voter.QueuedMessages)
	}
	waitFor(t, "both peers reported unreachable", func() bool { return ha.unreachableCount(2) > 0 && ha.unreachableCount(3) > 0 })

	// The message count limit applies too.
	a.AddPeer(4, blackhole(t))
	for i := 0; i < 200; i++ {
		a.Send([]*raftpb.Message{heartbeat(1, 4)})
	}
	if q := a.Stats().Peers[2].QueuedMessages; q != 100 {
		t.Errorf("queued %d messages, want the limit of 100", q)
	}
}

// TestSlowReceiverDoesNotBlockSend: a receiver whose handler blocks holds
// up neither Send nor the link: its group's inbox fills and what does not
// fit is dropped and counted at the receiver (a shared host link never
// waits for one group: TestSlowGroupDoesNotHoldUpTheLink), and once the
// handler goes on, messages flow again.
func TestSlowReceiverDoesNotBlockSend(t *testing.T) {
	release := make(chan struct{})
	var blocked atomic.Bool
	hb := &fakeHandler{process: func(*raftpb.Message) {
		if blocked.CompareAndSwap(false, true) {
			<-release
		}
	}}
	ha := &fakeHandler{}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.MaxQueueMessages = 64 })
	b := newTestTransport(t, 2, hb, func(c *Config) { c.MaxQueueMessages = 64 })
	connect(a, b)
	defer func() {
		if !blocked.Load() || b.Stats().DroppedReceiveQueueFull == 0 {
			close(release)
		}
	}()
	msgs := []*raftpb.Message{appMsg(1, 2, 1, 64<<10)}
	sendUntil(t, a, msgs, "drops for a full receive queue", func() bool { return b.Stats().DroppedReceiveQueueFull > 0 })
	close(release)
	n := hb.count()
	sendUntil(t, a, msgs, "delivery once the handler goes on", func() bool { return hb.count() > n+64 })
}

func TestRemovedPeerIsRefused(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery", func() bool { return hb.count() > 0 })

	b.RemovePeer(1)
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "a told it was removed", func() bool { return ha.refusedWith(ErrRemoved) })
	if got := b.Stats().Refused[ReasonRemoved]; got == 0 {
		t.Fatalf("b counted no refusal: %v", b.Stats())
	}
	if s := a.Stats().Peers[0]; s.LastRefusal != ReasonRemoved || s.Refusals == 0 {
		t.Fatalf("a's stats of b: %+v", s)
	}
	var err error
	ha.mu.Lock()
	for _, r := range ha.refused {
		if errors.Is(r.err, ErrRemoved) {
			err = r.err
		}
	}
	ha.mu.Unlock()
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || re.Peer != 2 || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("refusal error: %v", err)
	}

	// Added again, it is accepted again.
	n := hb.count()
	b.AddPeer(1, a.Addr().String())
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery after re-adding", func() bool { return hb.count() > n })
}

// TestConfigPeersKnownBeforeAccepting: the peers and removed members of
// Config are known before the first connection is accepted — a restarted
// member accepts its peers and refuses a removed one as removed from the
// first moment, not as an unknown sender until someone calls AddPeer.
func TestConfigPeersKnownBeforeAccepting(t *testing.T) {
	ha, hc := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	c := newTestTransport(t, 3, hc)
	hb := &fakeHandler{}
	b := newTestTransport(t, 2, hb, func(cfg *Config) {
		cfg.Peers = map[uint64]string{1: a.Addr().String(), 3: c.Addr().String()}
		cfg.Removed = []uint64{3}
	})
	if ids := b.Stats().Peers; len(ids) != 1 || ids[0].ID != 1 {
		t.Fatalf("b's peers: %+v (want only 1: 3 is removed)", ids)
	}
	a.AddPeer(2, b.Addr().String())
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery from a peer of Config.Peers", func() bool { return hb.count() > 0 })
	if got := b.Stats().Refused[ReasonUnknownSender]; got != 0 {
		t.Fatalf("b refused %d connections as from an unknown sender", got)
	}
	c.AddPeer(2, b.Addr().String())
	sendUntil(t, c, []*raftpb.Message{heartbeat(3, 2)}, "c told it was removed", func() bool { return hc.refusedWith(ErrRemoved) })
}

// TestInboundConnectionRedialsAtOnce: when a peer that was down connects
// to us (it restarted), our stream to it is redialed at once instead of on
// the backoff timer — here 30–60 s, so the delivery below, bounded by 20 s,
// can only come from the redial.
func TestInboundConnectionRedialsAtOnce(t *testing.T) {
	slow := func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Minute, time.Minute }
	ha := &fakeHandler{}
	a := newTestTransport(t, 1, ha, slow)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrB := ln.Addr().String()
	ln.Close() // b is down: a's first dial fails and a backs off
	a.AddPeer(2, addrB)
	a.Send([]*raftpb.Message{heartbeat(1, 2)})
	waitFor(t, "a's dial to b failed", func() bool {
		s := a.Stats()
		return len(s.Peers) == 1 && !a.peer(2).c.connected.Load() && s.Peers[0].DialFailures > 0
	})

	hb := &fakeHandler{}
	b := newTestTransport(t, 2, hb, func(c *Config) { c.ListenAddr = addrB })
	b.AddPeer(1, a.Addr().String())
	b.Send([]*raftpb.Message{heartbeat(2, 1)}) // b dials a: a learns b is back
	deadline := time.Now().Add(20 * time.Second)
	for hb.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a's stream to b was not redialed when b connected: %+v", a.Stats().Peers)
		}
		a.Send([]*raftpb.Message{heartbeat(1, 2)})
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	tests := []struct {
		name   string
		dialer func(c *Config)
		wire   func(a, b *Transport) (to uint64) // who knows whom
		want   error
		reason string
	}{
		{"cluster mismatch", func(c *Config) { c.ClusterID = 0xbad }, nil, ErrClusterMismatch, ReasonClusterMismatch},
		{"group mismatch", func(c *Config) { c.GroupID = 7 }, nil, ErrGroupMismatch, ReasonGroupMismatch},
		{"unknown sender", nil, func(a, b *Transport) uint64 {
			a.AddPeer(2, b.Addr().String()) // b does not know a
			return 2
		}, ErrUnknownSender, ReasonUnknownSender},
		{"wrong receiver", nil, func(a, b *Transport) uint64 {
			a.AddPeer(3, b.Addr().String()) // a believes member 3 lives at b's address
			b.AddPeer(1, a.Addr().String())
			return 3
		}, ErrWrongReceiver, ReasonWrongReceiver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ha, hb := &fakeHandler{}, &fakeHandler{}
			var opts []func(*Config)
			if tt.dialer != nil {
				opts = append(opts, tt.dialer)
			}
			a := newTestTransport(t, 1, ha, opts...)
			b := newTestTransport(t, 2, hb)
			to := uint64(2)
			if tt.wire != nil {
				to = tt.wire(a, b)
			} else {
				addPeers(a, b)
			}
			sendUntil(t, a, []*raftpb.Message{heartbeat(1, to)}, "the refusal", func() bool { return ha.refusedWith(tt.want) })
			if got := b.Stats().Refused[tt.reason]; got == 0 {
				t.Fatalf("refusal not counted under %q: %v", tt.reason, b.Stats().Refused)
			}
			if hb.count() != 0 {
				t.Fatalf("a refused connection delivered %d messages", hb.count())
			}
		})
	}
}

func TestCall(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	ctx := context.Background()

	resp, err := a.Call(ctx, 2, []byte("members?"))
	if err != nil || string(resp) != "1:members?" {
		t.Fatalf("Call: %q, %v", resp, err)
	}
	r, err := a.CallAddr(ctx, b.Addr().String(), []byte("hi"))
	if err != nil || string(r.Payload) != "1:hi" || r.ClusterID != testCluster || r.MemberID != 2 {
		t.Fatalf("CallAddr: %+v, %v", r, err)
	}
	if _, err := a.Call(ctx, 9, nil); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Call to an unknown peer: %v", err)
	}

	release := make(chan struct{})
	gotDeadline := make(chan bool, 1)
	hb.serve = func(ctx context.Context, from uint64, req []byte) ([]byte, error) {
		if string(req) == "wait" {
			_, ok := ctx.Deadline() // the caller's deadline travels with the request
			gotDeadline <- ok
			<-release
			return nil, ctx.Err()
		}
		return nil, errors.New("not the leader")
	}
	_, err = a.Call(ctx, 2, []byte("x"))
	var re *RemoteError
	if !errors.As(err, &re) || !errors.Is(err, ErrRemote) || re.Message != "not the leader" || re.Peer != 2 {
		t.Fatalf("remote error: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = a.Call(cctx, 2, []byte("wait"))
	close(release)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past its deadline: %v", err)
	}
	if !<-gotDeadline {
		t.Fatal("the serving side's context had no deadline")
	}
}

func TestCallDiscoveryByJoiner(t *testing.T) {
	hb := &fakeHandler{}
	b := newTestTransport(t, 2, hb)
	// The joiner, member 5, knows no cluster yet; b has added it.
	j := newTestTransport(t, 5, &fakeHandler{}, func(c *Config) { c.ClusterID = 0 })
	b.AddPeer(5, j.Addr().String())

	if _, err := j.Call(context.Background(), 2, nil); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Call before knowing peers: %v", err)
	}
	r, err := j.CallAddr(context.Background(), b.Addr().String(), []byte("join"))
	if err != nil || r.ClusterID != testCluster || r.MemberID != 2 || string(r.Payload) != "5:join" {
		t.Fatalf("discovery: %+v, %v", r, err)
	}
	// A joiner accepts no raft traffic until it knows its cluster.
	j.AddPeer(2, b.Addr().String())
	if _, err := j.Call(context.Background(), 2, nil); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("Call without a cluster ID: %v", err)
	}
	b.Send([]*raftpb.Message{heartbeat(2, 5)})
	sendUntil(t, b, []*raftpb.Message{heartbeat(2, 5)}, "refused: no cluster yet", func() bool { return hb.refusedWith(ErrClusterMismatch) })
	j.SetClusterID(r.ClusterID)
	if _, err := j.Call(context.Background(), 2, nil); err != nil {
		t.Fatalf("Call after SetClusterID: %v", err)
	}

	// A member b does not know is refused, even for discovery.
	stranger := newTestTransport(t, 6, &fakeHandler{}, func(c *Config) { c.ClusterID = 0 })
	_, err = stranger.CallAddr(context.Background(), b.Addr().String(), nil)
	if !errors.Is(err, ErrUnknownSender) || !errors.Is(err, ErrRefused) {
		t.Fatalf("stranger's discovery: %v", err)
	}
}

func TestCloseIsIdempotentAndFinal(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery", func() bool { return hb.count() > 0 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Send([]*raftpb.Message{heartbeat(1, 2)})
	a.AddPeer(3, "127.0.0.1:1")
	if _, err := a.Call(context.Background(), 2, nil); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Call after Close: %v", err)
	}
	if _, err := a.CallAddr(context.Background(), b.Addr().String(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("CallAddr after Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{MaxQueueMessages: -1, PingInterval: 10 * time.Second, ReadTimeout: 5 * time.Second, MaxFrameSize: 100, MinBackoff: 2 * time.Second, MaxBackoff: time.Second}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{"ID", "Handler", "Listener", "MaxQueueMessages (-1)", "MaxFrameSize (100)", "ReadTimeout (5s)", "MinBackoff (2s)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	ok := Config{ID: 1, Handler: &fakeHandler{}, ListenAddr: "127.0.0.1:0"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with an empty config: %v", err)
	}
	if d := ok.WithDefaults(); d.GroupID != 1 || d.MaxFrameSize != DefaultMaxFrameSize || d.Logger == nil {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestOversizedMessageDropped(t *testing.T) {
	hb := &fakeHandler{}
	a := newTestTransport(t, 1, &fakeHandler{}, func(c *Config) { c.MaxFrameSize = 64 << 10 })
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	a.Send([]*raftpb.Message{appMsg(1, 2, 1, 100<<10), heartbeat(1, 2)})
	waitFor(t, "the heartbeat", func() bool { return hb.count() == 1 })
	if got := hb.received()[0].GetType(); got != raftpb.MsgHeartbeat {
		t.Fatalf("delivered %v", got)
	}
	if s := a.Stats().Peers[0]; s.DroppedTooLarge != 1 || !s.Connected {
		t.Fatalf("stats: %+v", s)
	}
}

// A MsgSnap for a member the transport does not know is reported as a
// failed snapshot (raft would otherwise wait for it until the next leader
// change), without blocking Send.
func TestSnapshotToUnknownPeerIsReportedFailed(t *testing.T) {
	h := &fakeHandler{}
	tr := newTestTransport(t, 1, h)
	tr.Send([]*raftpb.Message{{Type: raftpb.MsgSnap.Enum(), To: new(uint64(9)), From: new(uint64(1)), Snapshot: &raftpb.Snapshot{}}})
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		got := slices.Clone(h.snaps)
		h.mu.Unlock()
		if len(got) == 1 {
			if got[0] != (snapReport{9, raft.SnapshotFailure}) {
				t.Fatalf("reported %+v, want a failure for member 9", got[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot reports %+v, want one failure for member 9", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
