package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestAttachRoundTrip(t *testing.T) {
	a := Attach{Cluster: 0xc1, From: 1 << 62, To: 3}
	got, err := ParseAttach(AppendAttach(nil, a))
	if err != nil || got != a {
		t.Fatalf("got %+v, %v; want %+v", got, err, a)
	}
	if _, err := ParseAttach(AppendAttach(nil, a)[:AttachSize-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short attach: %v", err)
	}
	// With the sender's address.
	a.Addr = "10.0.0.7:7001"
	got, err = ParseAttach(AppendAttach(nil, a))
	if err != nil || got != a {
		t.Fatalf("with an address: got %+v, %v; want %+v", got, err, a)
	}
	// With the host ID and incarnation, with or without an address; later
	// versions may append fields after them.
	for _, addr := range []string{"10.0.0.7:7001", ""} {
		a := Attach{Cluster: 0xc1, From: 2, To: 3, Addr: addr, HostID: 0xfeed, Incarnation: 7}
		got, err = ParseAttach(append(AppendAttach(nil, a), 9, 9))
		if err != nil || got != a {
			t.Fatalf("with host ID and trailing bytes: got %+v, %v; want %+v", got, err, a)
		}
	}
	// Only the incarnation known.
	a = Attach{Cluster: 0xc1, From: 2, To: 3, Incarnation: 7}
	if got, err := ParseAttach(AppendAttach(nil, a)); err != nil || got != a {
		t.Fatalf("incarnation only: got %+v, %v; want %+v", got, err, a)
	}
	for _, bad := range [][]byte{
		append(AppendAttach(nil, Attach{}), 0),                // length cut short
		append(AppendAttach(nil, Attach{}), 0, 5, 'a'),        // address cut short
		append(AppendAttach(nil, Attach{}), 0x02, 0x01),       // longer than MaxAttachAddr
		append(AppendAttach(nil, Attach{}), 0, 2, 0xff, 0xfe), // not UTF-8
		append(AppendAttach(nil, Attach{}), 0, 0, 1, 2, 3),    // host ID cut short
	} {
		if _, err := ParseAttach(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("attach %x: %v, want ErrMalformed", bad, err)
		}
	}
	// Too long to send: left out.
	long := Attach{From: 1, Addr: strings.Repeat("a", MaxAttachAddr+1)}
	if got, err := ParseAttach(AppendAttach(nil, long)); err != nil || got.Addr != "" {
		t.Fatalf("an over-long address: %+v, %v", got, err)
	}
}

func TestAttachReplyRoundTrip(t *testing.T) {
	r := AttachReply{Code: CodeRemoved, From: 1, To: 2, Cluster: 0xc1, Reason: "member 1 was removed"}
	got, err := ParseAttachReply(AppendAttachReply(nil, r))
	if err != nil || got != r {
		t.Fatalf("got %+v, %v; want %+v", got, err, r)
	}
	long := AttachReply{Reason: strings.Repeat("é", MaxReasonSize)}
	got, err = ParseAttachReply(AppendAttachReply(nil, long))
	if err != nil || len(got.Reason) > MaxReasonSize || !strings.HasPrefix(long.Reason, got.Reason) {
		t.Fatalf("long reason: %d bytes, %v", len(got.Reason), err)
	}
	reserved := AppendAttachReply(nil, r)
	reserved[3] = 1
	for name, bad := range map[string][]byte{
		"short":        AppendAttachReply(nil, r)[:AttachReplySize-1],
		"reserved set": reserved,
		"bad UTF-8":    append(AppendAttachReply(nil, r), 0xff),
		"long reason":  append(AppendAttachReply(nil, AttachReply{}), bytes.Repeat([]byte("x"), MaxReasonSize+1)...),
	} {
		if _, err := ParseAttachReply(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestFrameBuffered(t *testing.T) {
	f := AppendFrame(nil, TypeMessage, 1, []byte("payload"))
	for i := range f {
		if FrameBuffered(f[:i]) {
			t.Fatalf("%d of %d bytes reported as a whole frame", i, len(f))
		}
	}
	if !FrameBuffered(f) || !FrameBuffered(append(f, 1, 2, 3)) {
		t.Fatal("a whole frame not reported")
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	if FrameBuffered(huge) {
		t.Fatal("a 4 GiB frame reported as buffered")
	}
}

// FuzzLinkRecords checks the link's control decoders never panic, that
// what they accept re-encodes to the same bytes, and that a host link's
// frame sequence decodes to frames or an error, never a panic.
func FuzzLinkRecords(f *testing.F) {
	f.Add(AppendAttach(nil, Attach{Cluster: 1, From: 2, To: 3}))
	f.Add(AppendAttach(nil, Attach{Cluster: 1, From: 2, To: 3, Addr: "127.0.0.1:7001"}))
	f.Add(AppendAttachReply(nil, AttachReply{Code: CodeUnknownSender, From: 2, To: 3, Cluster: 1, Reason: "who?"}))
	link := AppendFrame(nil, TypeHello, 1, AppendHello(nil, Hello{MinVersion: Version, MaxVersion: Version, Kind: KindLink, Group: 1}))
	link = AppendFrame(link, TypeAttach, 7, AppendAttach(nil, Attach{Cluster: 1, From: 2, To: 3}))
	link = AppendFrame(link, TypeAttachReply, 7, AppendAttachReply(nil, AttachReply{From: 2, To: 3}))
	link = AppendFrame(link, TypePing, 0, AppendPing(nil, 5))
	f.Add(link)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		if a, err := ParseAttach(p); err == nil {
			if again := AppendAttach(nil, a); !bytes.HasPrefix(p, again) {
				t.Fatalf("attach %+v re-encodes to %x, input %x", a, again, p)
			}
		}
		if r, err := ParseAttachReply(p); err == nil {
			if again := AppendAttachReply(nil, r); !bytes.Equal(again, p) {
				t.Fatalf("attach reply %+v re-encodes to %x, input %x", r, again, p)
			}
		}
		_ = FrameBuffered(p)
		r := NewReader(bytes.NewReader(p), 1<<16)
		for {
			fr, err := r.Next()
			if err != nil {
				break
			}
			switch fr.Type {
			case TypeHello:
				_, _ = ParseHello(fr.Payload)
			case TypeAttach:
				_, _ = ParseAttach(fr.Payload)
			case TypeAttachReply:
				_, _ = ParseAttachReply(fr.Payload)
			case TypePing, TypePong:
				_, _ = ParsePing(fr.Payload)
			case TypeMessage:
				_, _ = UnmarshalMessage(fr.Payload)
			}
		}
	})
}
