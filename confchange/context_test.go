package confchange

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestContextRoundTrip(t *testing.T) {
	tests := []Context{
		{},
		{ChangeID: 1},
		{ChangeID: 1<<64 - 1},
		{ChangeID: 7, Members: []Member{{ID: 4, PeerAddr: "10.0.0.4:7001"}}},
		{ChangeID: 8, Members: []Member{
			{ID: 9, PeerAddr: "[::1]:7009", ReadOnly: true, Metadata: map[string]string{"client_addr": "[::1]:8009", "zone": "b", "empty": ""}},
			{ID: 2, PeerAddr: "", Metadata: map[string]string{"k": "v"}},
		}},
		{ChangeID: 9, Members: []Member{
			{ID: 3, PeerAddr: "a:3", Incarnation: 1<<64 - 1},
			{ID: 5, PeerAddr: "a:5", ReadOnly: true, Incarnation: 7, Metadata: map[string]string{"k": "v"}},
		}},
	}
	for _, c := range tests {
		b, err := c.Encode()
		require.NoError(t, err)
		got, err := DecodeContext(b)
		require.NoError(t, err)
		require.Len(t, got.Members, len(c.Members))
		assert.Equal(t, c.ChangeID, got.ChangeID)
		for _, m := range c.Members {
			i := 0
			for got.Members[i].ID != m.ID {
				i++
			}
			assert.True(t, m.Equal(got.Members[i]), "%s != %s", m, got.Members[i])
		}
		again, err := got.Encode()
		require.NoError(t, err)
		assert.Equal(t, b, again, "canonical")
	}
}

func TestContextGolden(t *testing.T) {
	b, err := Context{ChangeID: 300, Members: []Member{{ID: 4, PeerAddr: "h:1", ReadOnly: true, Metadata: map[string]string{"a": "b"}}}}.Encode()
	require.NoError(t, err)
	// version, change ID 300 (0xac 0x02), 1 member: ID 4, flags 1, "h:1",
	// 1 metadata entry "a"="b". The format is a contract: it is in the log.
	assert.Equal(t, []byte{1, 0xac, 0x02, 1, 4, 1, 3, 'h', ':', '1', 1, 1, 'a', 1, 'b'}, b)

	// With an incarnation: flag bit 1, and the incarnation after the
	// metadata (protocol version 3).
	b, err = Context{Members: []Member{{ID: 4, PeerAddr: "h:1", Incarnation: 300}}}.Encode()
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0, 1, 4, 2, 3, 'h', ':', '1', 0, 0xac, 0x02}, b)
}

func TestContextEncodeErrors(t *testing.T) {
	for _, c := range []Context{
		{Members: []Member{{ID: 0}}},
		{Members: []Member{{ID: 3}, {ID: 3}}},
		{Members: []Member{{ID: 3, Metadata: map[string]string{"": "x"}}}},
	} {
		_, err := c.Encode()
		assert.ErrorIs(t, err, ErrBadContext)
		assert.Equal(t, "bad_context", Code(err))
	}
}

func TestDecodeContextErrors(t *testing.T) {
	valid, err := Context{ChangeID: 5, Members: []Member{{ID: 2, PeerAddr: "h:1", Metadata: map[string]string{"a": "1", "b": "2"}}}}.Encode()
	require.NoError(t, err)
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := map[string][]byte{
		"unknown version":   {2, 0, 0},
		"version only":      {1},
		"overlong varint":   {1, 0x80, 0x00, 0},
		"varint overflow":   cat([]byte{1}, bytes.Repeat([]byte{0xff}, 10), []byte{1, 0}),
		"count too large":   {1, 0, 5, 1, 0, 0, 0},
		"member ID 0":       {1, 0, 1, 0, 0, 0, 0},
		"IDs not ascending": {1, 0, 2, 3, 0, 0, 0, 2, 0, 0, 0},
		"repeated ID":       {1, 0, 2, 3, 0, 0, 0, 3, 0, 0, 0},
		"unknown flag":      {1, 0, 1, 3, 4, 0, 0},
		"incarnation 0":     {1, 0, 1, 3, 2, 0, 0, 0},
		"no incarnation":    {1, 0, 1, 3, 2, 0, 0},
		"truncated flags":   {1, 0, 1, 3},
		"addr too long":     {1, 0, 1, 3, 0, 9, 'h', 0},
		"empty key":         {1, 0, 1, 3, 0, 0, 1, 0, 1, 'x'},
		"keys not sorted":   cat([]byte{1, 0, 1, 3, 0, 0, 2}, uv(1), []byte("b"), uv(0), uv(1), []byte("a"), uv(0)),
		"repeated key":      cat([]byte{1, 0, 1, 3, 0, 0, 2}, uv(1), []byte("a"), uv(0), uv(1), []byte("a"), uv(0)),
		"trailing bytes":    append(bytes.Clone(valid), 0),
		"truncated":         valid[:len(valid)-1],
		"value too long":    {1, 0, 1, 3, 0, 0, 1, 1, 'a', 5, 'x'},
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeContext(b)
			require.ErrorIs(t, err, ErrBadContext)
			t.Log(err)
		})
	}
	c, err := DecodeContext(nil)
	require.NoError(t, err)
	assert.Equal(t, Context{}, c)
}

// FuzzDecodeContext: any input decodes cleanly or fails with ErrBadContext;
// what decodes re-encodes to exactly the same bytes.
func FuzzDecodeContext(f *testing.F) {
	seeds := []Context{
		{ChangeID: 1},
		{ChangeID: 2, Members: []Member{{ID: 4, PeerAddr: "10.0.0.4:7001", Metadata: map[string]string{"client_addr": "10.0.0.4:8001"}}}},
		{ChangeID: 3, Members: []Member{{ID: 1, PeerAddr: "a:1", ReadOnly: true}, {ID: 1 << 40, PeerAddr: "[::1]:2"}}},
	}
	for _, c := range seeds {
		b, _ := c.Encode()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x80})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeContext(b)
		if err != nil {
			if Code(err) != "bad_context" {
				t.Fatalf("error without ErrBadContext: %v", err)
			}
			return
		}
		again, err := c.Encode()
		if err != nil {
			t.Fatalf("decoded context does not encode: %v", err)
		}
		if len(b) > 0 && !bytes.Equal(b, again) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b, again)
		}
	})
}

// FuzzContextRoundTrip: every encodable context decodes to itself.
func FuzzContextRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint64(4), "10.0.0.4:7001", "client_addr", "10.0.0.4:8001", true, uint64(5), "b:2")
	f.Fuzz(func(t *testing.T, changeID, id1 uint64, addr1, key, val string, ro bool, id2 uint64, addr2 string) {
		c := Context{ChangeID: changeID, Members: []Member{
			{ID: id1, PeerAddr: addr1, Metadata: map[string]string{key: val}, ReadOnly: ro},
			{ID: id2, PeerAddr: addr2},
		}}
		b, err := c.Encode()
		if err != nil {
			if id1 != 0 && id2 != 0 && id1 != id2 && key != "" {
				t.Fatalf("valid context refused: %v", err)
			}
			return
		}
		got, err := DecodeContext(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got.ChangeID != changeID || len(got.Members) != 2 {
			t.Fatalf("got %+v", got)
		}
		for _, m := range got.Members {
			want := c.Members[0]
			if m.ID == id2 {
				want = c.Members[1]
			}
			if !m.Equal(want) {
				t.Fatalf("%s != %s", m, want)
			}
		}
	})
}
