package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHelloRoundTrip(t *testing.T) {
	h := Hello{MinVersion: 1, MaxVersion: 3, Kind: KindSnapshot, Group: 1, Cluster: 0xdeadbeef, From: 1 << 60, To: 2}
	got, err := ParseHello(AppendHello(nil, h))
	if err != nil || got != h {
		t.Fatalf("got %+v, %v; want %+v", got, err, h)
	}
	// With the host ID and the incarnation; later versions may append
	// fields after them.
	h.HostID, h.Incarnation = 0xabc, 0
	got, err = ParseHello(append(AppendHello(nil, h), 1, 2, 3))
	if err != nil || got != h {
		t.Fatalf("with host ID and trailing bytes: got %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, AppendHello(nil, h)[:HelloSize-1], AppendHello(nil, h)[:HelloSize+15], []byte(strings.Repeat("GET / HTTP/1.1\r\n", 4))} {
		if _, err := ParseHello(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseHello(%q): %v, want ErrMalformed", bad, err)
		}
	}
}

func TestHelloReplyRoundTrip(t *testing.T) {
	r := HelloReply{Version: 1, Code: CodeRemoved, Cluster: 9, Member: 3, Reason: "member 4 was removed"}
	got, err := ParseHelloReply(AppendHelloReply(nil, r))
	if err != nil || got != r {
		t.Fatalf("got %+v, %v; want %+v", got, err, r)
	}
	// The listener's frame limit, in bytes that were reserved: a reply
	// without it (an encoder that does not know it) decodes to 0, and one
	// with it keeps its other fields where they were.
	withLimit := r
	withLimit.MaxFrame = 64 << 10
	b := AppendHelloReply(nil, withLimit)
	got, err = ParseHelloReply(b)
	if err != nil || got != withLimit {
		t.Fatalf("with a frame limit: got %+v, %v; want %+v", got, err, withLimit)
	}
	if !bytes.Equal(b[:4], AppendHelloReply(nil, r)[:4]) || !bytes.Equal(b[8:], AppendHelloReply(nil, r)[8:]) {
		t.Fatalf("the frame limit moved other fields: %x", b)
	}
	long := HelloReply{Reason: strings.Repeat("é", MaxReasonSize)}
	got, err = ParseHelloReply(AppendHelloReply(nil, long))
	if err != nil || len(got.Reason) > MaxReasonSize || !strings.HasPrefix(long.Reason, got.Reason) {
		t.Fatalf("long reason: %d bytes, %v", len(got.Reason), err)
	}
	if _, err := ParseHelloReply(append(AppendHelloReply(nil, r), 0xff)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("invalid UTF-8 reason: %v", err)
	}
}

func TestControlPayloads(t *testing.T) {
	ok, data, err := ParseStatus(AppendStatus(nil, []byte("result"), ""))
	if !ok || string(data) != "result" || err != nil {
		t.Fatalf("ok status: %v %q %v", ok, data, err)
	}
	ok, data, err = ParseStatus(AppendStatus(nil, nil, "boom"))
	if ok || string(data) != "boom" || err != nil {
		t.Fatalf("error status: %v %q %v", ok, data, err)
	}
	if _, _, err := ParseStatus([]byte{7}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad status: %v", err)
	}
	d, req, err := ParseRequest(AppendRequest(nil, 5, []byte("q")))
	if d != 5 || string(req) != "q" || err != nil {
		t.Fatalf("request: %d %q %v", d, req, err)
	}
	n, msg, err := ParseSnapshotHeader(AppendSnapshotHeader(nil, 1<<40, []byte("m")))
	if n != 1<<40 || string(msg) != "m" || err != nil {
		t.Fatalf("snapshot header: %d %q %v", n, msg, err)
	}
	n, crc, err := ParseSnapshotEnd(AppendSnapshotEnd(nil, 12, 34))
	if n != 12 || crc != 34 || err != nil {
		t.Fatalf("snapshot end: %d %d %v", n, crc, err)
	}
	tok, err := ParsePing(AppendPing(nil, 99))
	if tok != 99 || err != nil {
		t.Fatalf("ping: %d %v", tok, err)
	}
	for name, err := range map[string]error{
		"request":  second(ParseRequest([]byte{1})),
		"header":   second(ParseSnapshotHeader(nil)),
		"end":      third(ParseSnapshotEnd(make([]byte, 13))),
		"ping":     func() error { _, err := ParsePing(nil); return err }(),
		"status 0": third(ParseStatus(nil)),
	} {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func second[A, B any](_ A, _ B, err error) error { return err }
func third[A, B any](_ A, _ B, err error) error  { return err }

// FuzzHello checks the handshake decoders never panic and that what they
// accept re-encodes to the same bytes (but for the reserved ones, and a
// later version's fields past the host ID and incarnation).
func FuzzHello(f *testing.F) {
	f.Add(AppendHello(nil, Hello{MinVersion: 1, MaxVersion: 1, Kind: KindStream, Group: 1, Cluster: 2, From: 3, To: 4}))
	f.Add(AppendHelloReply(nil, HelloReply{Version: 1, Code: CodeClusterMismatch, Cluster: 5, Member: 6, Reason: "no"}))
	f.Add([]byte("USTW"))
	f.Add(AppendHello(nil, Hello{MinVersion: 4, MaxVersion: 4, Kind: KindLink, HostID: 7, Incarnation: 8}))
	f.Fuzz(func(t *testing.T, p []byte) {
		if h, err := ParseHello(p); err == nil {
			// The fixed part re-encodes to the same bytes but the reserved
			// ones (9-15); the host ID and incarnation after it, when
			// either is set, to the same 16 bytes; bytes after those are a
			// later version's, which this one ignores.
			again := AppendHello(nil, h)
			back, err := ParseHello(again)
			if err != nil || back != h || !bytes.Equal(again[:9], p[:9]) || !bytes.Equal(again[16:HelloSize], p[16:HelloSize]) ||
				(len(again) > HelloSize && !bytes.Equal(again[HelloSize:], p[HelloSize:HelloSize+16])) {
				t.Fatalf("hello %+v re-encodes to %x (%+v, %v), input %x", h, again, back, err, p)
			}
		}
		if r, err := ParseHelloReply(p); err == nil {
			again, err := ParseHelloReply(AppendHelloReply(nil, r))
			if err != nil || again != r {
				t.Fatalf("reply %+v re-decodes to %+v, %v", r, again, err)
			}
		}
		_, _, _ = ParseStatus(p)
		_, _, _ = ParseSnapshotEnd(p)
	})
}
