package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf []byte
	payloads := [][]byte{nil, {}, []byte("x"), bytes.Repeat([]byte("abc"), 1000)}
	for i, p := range payloads {
		buf = AppendFrame(buf, Type(i%int(maxType))+1, uint64(i)<<40|1, p)
	}
	r := NewReader(bytes.NewReader(buf), 4096)
	for i, p := range payloads {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Type != Type(i%int(maxType))+1 || f.Group != uint64(i)<<40|1 || !bytes.Equal(f.Payload, p) {
			t.Fatalf("frame %d: got %v %d %q", i, f.Type, f.Group, f.Payload)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

func TestFrameErrors(t *testing.T) {
	good := AppendFrame(nil, TypeMessage, 1, []byte("hello, world"))
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"truncated header", good[:HeaderSize-1], io.ErrUnexpectedEOF},
		{"truncated payload", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"payload bit flip", flip(len(good) - 1), ErrChecksum},
		{"group bit flip", flip(9), ErrChecksum},
		{"crc bit flip", flip(17), ErrChecksum},
		{"type zero", func() []byte { b := bytes.Clone(good); b[4] = 0; return b }(), ErrMalformed},
		{"type unknown", func() []byte { b := bytes.Clone(good); b[4] = 200; return b }(), ErrMalformed},
		{"reserved set", flip(6), ErrMalformed},
		{"4 GiB length", []byte{0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, ErrFrameTooLarge},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrMalformed},
	}
	for _, tt := range tests {
		_, err := NewReader(bytes.NewReader(tt.in), 1024).Next()
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// blockingReader serves its bytes and then blocks the test if read again.
type onceReader struct {
	b []byte
	t *testing.T
}

func (r *onceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		r.t.Fatal("the reader read past the header of an oversized frame")
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestFrameTooLargeCheckedBeforeAllocating(t *testing.T) {
	hdr := []byte{0xff, 0xff, 0xff, 0xf0, byte(TypeMessage), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := NewReader(&onceReader{b: hdr, t: t}, 1<<20).Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("allocated %d bytes for a refused frame", grew)
	}
}

func TestNextIntoReusesBuffer(t *testing.T) {
	var in []byte
	for i := 0; i < 3; i++ {
		in = AppendFrame(in, TypeSnapshotChunk, 1, bytes.Repeat([]byte{byte(i)}, 100))
	}
	r := NewReader(bufio.NewReader(bytes.NewReader(in)), 1024)
	buf := make([]byte, 128)
	for i := 0; i < 3; i++ {
		f, err := r.NextInto(buf)
		if err != nil {
			t.Fatal(err)
		}
		if &f.Payload[0] != &buf[0] || f.Payload[99] != byte(i) {
			t.Fatalf("frame %d not read into the buffer", i)
		}
	}
}

// FuzzReader feeds arbitrary bytes to the frame reader: it must never panic
// or return a frame whose checksum it did not verify, and every frame it
// returns must re-encode to the same bytes.
func FuzzReader(f *testing.F) {
	f.Add(AppendFrame(nil, TypeMessage, 1, []byte("payload")))
	f.Add(AppendFrame(AppendFrame(nil, TypePing, 1, AppendPing(nil, 7)), TypeHello, 1, AppendHello(nil, Hello{MinVersion: 1, MaxVersion: 1, Kind: KindStream, Group: 1, Cluster: 2, From: 3, To: 4})))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0})
	f.Add([]byte("garbage garbage garbage garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in), 1<<16)
		var out []byte
		for {
			fr, err := r.Next()
			if err != nil {
				break
			}
			out = AppendFrame(out, fr.Type, fr.Group, fr.Payload)
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("decoded frames do not re-encode to the input")
		}
	})
}

// TestReaderAllocatesWhatArrives: a header declaring a 64 MiB payload,
// followed by a few bytes and the end of the stream, costs the reader
// what arrived (a first chunk), not the declared size; a payload that
// does arrive is read whole, over several growths of its buffer.
func TestReaderAllocatesWhatArrives(t *testing.T) {
	const declared = 64 << 20
	var hdr [HeaderSize]byte
	putHeader(hdr[:], declared, TypeMessage, 1)
	stream := append(hdr[:], make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := NewReader(bytes.NewReader(stream), declared).Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*readChunk {
		t.Fatalf("reading a header of %d bytes and 100 bytes allocated %d bytes", declared, got)
	}

	payload := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB: growths from readChunk
	f, err := NewReader(bytes.NewReader(AppendFrame(nil, TypeMessage, 1, payload)), declared).Next()
	if err != nil || !bytes.Equal(f.Payload, payload) {
		t.Fatalf("large frame: %v, %d bytes", err, len(f.Payload))
	}
}

// TestReaderSkip: a frame skipped from its header leaves the stream at
// the next frame, allocating nothing of its size; a skipped frame whose
// CRC does not match is an error.
func TestReaderSkip(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 1<<20)
	stream := AppendFrame(nil, TypeMessage, 3, big)
	stream = AppendFrame(stream, TypePing, 0, AppendPing(nil, 42))
	r := NewReader(bytes.NewReader(stream), 2<<20)
	h, err := r.NextHeader()
	if err != nil || h.Type != TypeMessage || h.Group != 3 || h.Length != uint32(len(big)) {
		t.Fatalf("header: %+v, %v", h, err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = r.Skip(h)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("skipping %d bytes allocated %d", len(big), got)
	}
	f, err := r.Next()
	if err != nil || f.Type != TypePing {
		t.Fatalf("after the skipped frame: %v, %v", f.Type, err)
	}
	stream[HeaderSize+10] ^= 1
	r = NewReader(bytes.NewReader(stream), 2<<20)
	if h, err = r.NextHeader(); err != nil {
		t.Fatal(err)
	}
	if err := r.Skip(h); !errors.Is(err, ErrChecksum) {
		t.Fatalf("skipping a corrupted frame: %v, want ErrChecksum", err)
	}
}
