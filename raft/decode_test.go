package raft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/understudy-raft/understudy/confchange"
)

func TestCommandRoundTrip(t *testing.T) {
	id := requestID{proposer: 7, seq: 1 << 60}
	gotID, rid, cmd, err := decodeCommand(encodeCommand(id, []byte("hello")))
	if err != nil || gotID != id || rid != (RequestID{}) || string(cmd) != "hello" {
		t.Fatalf("round trip: %v %v %v %q", err, gotID, rid, cmd)
	}
	want := RequestID{Client: 42, Seq: 3, Acked: 2}
	b := appendCommand(nil, id, want, []byte("again"))
	if len(b) != payloadSize(want, []byte("again")) {
		t.Fatalf("payload of %d bytes, payloadSize says %d", len(b), payloadSize(want, []byte("again")))
	}
	gotID, rid, cmd, err = decodeCommand(b)
	if err != nil || gotID != id || rid != want || string(cmd) != "again" {
		t.Fatalf("client round trip: %v %v %v %q", err, gotID, rid, cmd)
	}
	// An older version's client command (no Acked) still decodes.
	legacy := RequestID{Client: 42, Seq: 3}
	gotID, rid, cmd, err = decodeCommand(appendLegacyClientCommand(nil, id, legacy, []byte("old")))
	if err != nil || gotID != id || rid != legacy || string(cmd) != "old" {
		t.Fatalf("legacy client round trip: %v %v %v %q", err, gotID, rid, cmd)
	}
	zeroClient := appendCommand(nil, id, want, nil)
	clear(zeroClient[17:25])
	for _, bad := range [][]byte{nil, {1}, bytes.Repeat([]byte{9}, 20), b[:20], b[:40], zeroClient} {
		if _, _, _, err := decodeCommand(bad); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("decodeCommand(%x) = %v, want ErrCorruptEntry", bad, err)
		}
	}
}

func TestDedupWindowEvictsOldest(t *testing.T) {
	d := newDedupWindow(3)
	for seq := uint64(1); seq <= 4; seq++ {
		if !d.add(requestID{1, seq}) {
			t.Fatalf("seq %d reported as duplicate", seq)
		}
	}
	if d.add(requestID{1, 4}) {
		t.Fatal("seq 4 not reported as duplicate")
	}
	if !d.add(requestID{1, 1}) {
		t.Fatal("seq 1 should have been evicted")
	}
	c := newDedupWindow(3)
	c.reset(d.ids())
	if c.add(requestID{1, 1}) || c.add(requestID{1, 4}) || !c.add(requestID{1, 2}) {
		t.Fatal("reset did not restore the same window")
	}
}

func TestSnapHeaderRoundTrip(t *testing.T) {
	h := &snapHeader{
		members: []Member{{ID: 1, PeerAddr: "127.0.0.1:7001", Metadata: map[string]string{"client_addr": "127.0.0.1:8001"}}, {ID: 2, PeerAddr: "h:1", ReadOnly: true}},
		removed: []uint64{5, 9},
		dedup:   []requestID{{1, 2}, {3, 4}},
		clients: []requestID{{42, 7}},
	}
	var tab sessionTable
	tab.register(20, testLimits)
	tab.get(20).add(1)
	tab.get(20).fill(1, &Result{Value: []byte("r")})
	h.sessions = tab.appendTo(nil)
	var buf bytes.Buffer
	if err := h.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("state machine bytes")
	got, err := readSnapHeader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.members) != 2 || got.members[0].Metadata["client_addr"] != "127.0.0.1:8001" || !got.members[1].ReadOnly || len(got.removed) != 2 || got.removed[1] != 9 || len(got.dedup) != 2 || got.dedup[1] != (requestID{3, 4}) || len(got.clients) != 1 || got.clients[0] != (requestID{42, 7}) || !bytes.Equal(got.sessions, h.sessions) || got.table.get(20) == nil {
		t.Fatalf("round trip: %+v", got)
	}
	if rest := buf.String(); rest != "state machine bytes" {
		t.Fatalf("reader left at %q", rest)
	}
	// The older versions still read: a USN4 header is a USN5 one without
	// the sessions, a USN3 one without the settings either.
	h.sessions = nil
	body, err := h.encode()
	if err != nil {
		t.Fatal(err)
	}
	body = body[:len(body)-1] // the empty sessions
	for _, v := range []struct {
		magic string
		body  []byte
	}{{snapMagicV4, body}, {snapMagicV3, body[:len(body)-1]}} {
		var old bytes.Buffer
		old.WriteString(v.magic)
		old.Write(binary.BigEndian.AppendUint32(nil, uint32(len(v.body))))
		old.Write(v.body)
		old.Write(binary.BigEndian.AppendUint32(nil, crc32.Checksum(v.body, castagnoli)))
		got, err := readSnapHeader(&old)
		if err != nil || got.table != nil || len(got.clients) != 1 || len(got.members) != 2 {
			t.Fatalf("%s header: %+v, %v", v.magic, got, err)
		}
	}
	// Flip each byte of the framed header: always an error, never a panic.
	var framed bytes.Buffer
	_ = h.writeTo(&framed)
	for i := range framed.Len() {
		b := bytes.Clone(framed.Bytes())
		b[i] ^= 0x40
		if _, err := readSnapHeader(bytes.NewReader(b)); !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("flipped byte %d: err = %v, want ErrCorruptSnapshot", i, err)
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	f.Add(encodeCommand(requestID{1, 2}, []byte("x")))
	f.Add(appendCommand(nil, requestID{1, 2}, RequestID{Client: 3, Seq: 4}, []byte("x")))
	f.Add(appendLegacyClientCommand(nil, requestID{1, 2}, RequestID{Client: 3, Seq: 4}, []byte("x")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, rid, cmd, err := decodeCommand(b)
		encode := appendCommand
		if len(b) > 0 && b[0] == entryClientCommand {
			encode = appendLegacyClientCommand // an older version's entry
		}
		if err == nil && !bytes.Equal(encode(nil, id, rid, cmd), b) {
			t.Fatalf("decoded %x does not re-encode", b)
		}
	})
}

func FuzzDecodeSnapHeader(f *testing.F) {
	var tab sessionTable
	tab.register(3, testLimits)
	tab.register(4, testLimits)
	s := tab.get(3)
	tab.touch(s, 5)
	s.add(1)
	s.fill(1, &Result{Value: []byte("v")})
	s.add(2)
	s.fill(2, &Result{Value: []byte("w"), Err: errors.New("e")})
	s.add(3)
	s.fill(3, &Result{Value: []byte("too large a result")})
	h := &snapHeader{members: []Member{{ID: 1, PeerAddr: "a:1", Metadata: map[string]string{"k": "v"}}}, removed: []uint64{4}, dedup: []requestID{{1, 1}}, clients: []requestID{{9, 9}},
		settings: confchange.SeedClusterSettings(confchange.Settings{}, true).Encode(), sessions: tab.appendTo(nil)}
	b, err := h.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, uint8(5))
	f.Add(b[:len(b)-len(h.sessions)], uint8(4))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, uint8(5))
	f.Fuzz(func(t *testing.T, b []byte, version uint8) {
		version = 2 + version%4 // USN2 to USN5
		got, err := decodeSnapHeader(b, int(version))
		if err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("error %v does not wrap ErrCorruptSnapshot", err)
			}
			return
		}
		b, err = got.encode()
		if err != nil {
			t.Fatalf("re-encoding a decoded header fails: %v", err)
		}
		again, err := decodeSnapHeader(b, 5)
		if err != nil {
			t.Fatalf("decoding a re-encoded header fails: %v", err)
		}
		// Sessions are canonical: what was read is what is written.
		if !bytes.Equal(again.sessions, got.sessions) && len(got.sessions)+len(again.sessions) > 1 {
			t.Fatalf("sessions %x re-read as %x", got.sessions, again.sessions)
		}
	})
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := Config{ElectionTicks: 1, HeartbeatTicks: 2, InitialMembers: []Member{{ID: 2}, {ID: 2, PeerAddr: "x:1"}}}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"ID must be non-zero", "ElectionTicks (1)", "duplicate member ID 2", "member 2 has no PeerAddr", "must contain this member's ID"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Validate error lacks %q:\n%v", want, err)
		}
	}
	if err := (Config{ID: 1}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func FuzzDecodeReadiness(f *testing.F) {
	f.Add(appendReadiness(nil, requestID{1, 2}, 4, true))
	f.Add(appendReadiness(nil, requestID{1, 2}, 1<<40, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, member, ready, err := decodeReadiness(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("error %v does not wrap ErrCorruptEntry", err)
			}
			return
		}
		if !bytes.Equal(appendReadiness(nil, id, member, ready), b) {
			t.Fatalf("%x is not canonical", b)
		}
	})
}

func FuzzDecodeSettingsEntry(f *testing.F) {
	seed := confchange.SeedClusterSettings(confchange.Settings{}, true).Encode()
	f.Add(appendSettings(nil, requestID{1, 2}, seed))
	f.Add(appendSettingsKind(nil, entrySettingsSeed, requestID{1, 3}, seed))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, cs, err := decodeSettings(b)
		if err != nil {
			return
		}
		// Both kinds decode: an update, and the first leader's seed.
		if !bytes.Equal(appendSettingsKind(nil, b[0], id, cs.Encode()), b) {
			t.Fatalf("%x is not canonical", b)
		}
	})
}
