package storage

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func FuzzDescriptor(f *testing.F) {
	f.Add(Descriptor{Name: SnapshotFileName(1, 2, 3), Size: 10, CRC32C: 0xdeadbeef}.Marshal())
	f.Add(Descriptor{Name: SnapshotFileName(1<<63, 0, 1), Size: 0}.Marshal())
	f.Add([]byte("USNP\x01\x05hello"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDescriptor(data)
		if err != nil {
			return
		}
		if !bytes.Equal(d.Marshal(), data) {
			t.Fatalf("%+v re-encodes differently", d)
		}
		if _, _, _, ok := parseSnapshotFileName(d.Name); !ok || filepath.Base(d.Name) != d.Name {
			t.Fatalf("accepted name %q", d.Name)
		}
	})
}

// FuzzEntryRecord decodes arbitrary values as entry records: no panic, and
// what decodes re-encodes to the same bytes.
func FuzzEntryRecord(f *testing.F) {
	for _, e := range []*raftpb.Entry{
		ent(1, 1, "data"),
		{Index: proto.Uint64(5)},
		{Index: proto.Uint64(7), Term: proto.Uint64(1 << 60), Type: raftpb.EntryConfChangeV2.Enum(), Data: []byte{}},
		{Index: proto.Uint64(9), Type: raftpb.EntryType(-1).Enum()},
	} {
		f.Add(e.GetIndex(), appendEntry(nil, e))
	}
	f.Add(uint64(3), []byte{0xff, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, index uint64, v []byte) {
		var a entryAlloc
		e, err := decodeEntry(index, v, &a, 1)
		term, terr := decodeEntryTerm(v)
		if (err == nil) != (terr == nil) && err == nil {
			t.Fatalf("entry decodes but its term does not: %v", terr)
		}
		if err != nil {
			return
		}
		if term != e.GetTerm() {
			t.Fatalf("term %d vs %d", term, e.GetTerm())
		}
		if e.Index != nil && e.GetIndex() != index {
			t.Fatalf("index %d, key %d", e.GetIndex(), index)
		}
		if got := appendEntry(nil, e); !bytes.Equal(got, v) {
			t.Fatalf("re-encodes to %x, was %x", got, v)
		}
		if uint64(proto.Size(e)) != entrySize(e) {
			t.Fatalf("entrySize %d, proto.Size %d", entrySize(e), proto.Size(e))
		}
	})
}

// FuzzEntryRoundTrip builds entries from arbitrary fields (a presence byte,
// index, term and type, then the payload): they encode and decode to a
// proto.Equal entry of the same proto.Size.
func FuzzEntryRoundTrip(f *testing.F) {
	f.Add([]byte("\x0f\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00x"))
	f.Add([]byte("\x00"))
	f.Add([]byte("\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xfb\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var fields [21]byte
		copy(fields[:], in)
		present, data := fields[0], in[min(len(in), len(fields)):]
		e := &raftpb.Entry{}
		if present&1 != 0 {
			e.Term = proto.Uint64(binary.LittleEndian.Uint64(fields[9:]))
		}
		if present&2 != 0 {
			e.Index = proto.Uint64(binary.LittleEndian.Uint64(fields[1:]))
		}
		if present&4 != 0 {
			e.Type = raftpb.EntryType(int32(binary.LittleEndian.Uint32(fields[17:]))).Enum()
		}
		if present&8 != 0 {
			e.Data = append([]byte{}, data...)
		}
		v := appendEntry(nil, e)
		if len(v) != encodedEntrySize(e) {
			t.Fatalf("encodedEntrySize %d, encoded %d", encodedEntrySize(e), len(v))
		}
		var a entryAlloc
		got, err := decodeEntry(e.GetIndex(), v, &a, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(e, got) {
			t.Fatalf("%v decodes to %v", e, got)
		}
		if uint64(proto.Size(e)) != entrySize(e) {
			t.Fatalf("entrySize %d, proto.Size %d", entrySize(e), proto.Size(e))
		}
	})
}

func FuzzHardStateRecord(f *testing.F) {
	f.Add(encodeHardState(hardState(1, 2, 3)))
	f.Add(encodeHardState(&raftpb.HardState{Commit: proto.Uint64(9)}))
	f.Add([]byte{7, 1, 2})
	f.Fuzz(func(t *testing.T, v []byte) {
		hs, err := decodeHardState(v)
		if err != nil {
			return
		}
		if got := encodeHardState(hs); !bytes.Equal(got, v) {
			t.Fatalf("re-encodes to %x, was %x", got, v)
		}
	})
}

func FuzzUvarintRecord(f *testing.F) {
	f.Add(appendUvarints(nil, 1, 2, 3), 3)
	f.Add(appendUvarints(nil, FormatVersion), 1)
	f.Add([]byte{0x80, 0x80}, 2)
	f.Fuzz(func(t *testing.T, v []byte, n int) {
		n = n & 7
		vs, err := decodeUvarints(v, n)
		if err != nil {
			return
		}
		if got := appendUvarints(nil, vs...); !bytes.Equal(got, v) {
			// Non-minimal varints decode too; the value must still agree.
			again, err := decodeUvarints(got, n)
			if err != nil || !equalU64s(again, vs) {
				t.Fatalf("%v does not round-trip", vs)
			}
		}
	})
}

func equalU64s(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func FuzzSnapshotRecord(f *testing.F) {
	rec, err := encodeSnapshot(snapshotFor(1, 10, 2, confState(1, 2), []byte("state")))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rec)
	f.Add([]byte{0x12, 0x02, 0x10, 0x01, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		snap, err := decodeSnapshot(v)
		if err != nil {
			return
		}
		if snap.GetMetadata().GetConfState() == nil {
			t.Fatal("decoded snapshot without ConfState")
		}
	})
}

// FuzzCorruptBolt flips bits of a real store's bbolt file (two places) and
// opens and reads it: never a panic or a hang, and either ErrCorrupt or
// exactly the original answers... or, when the flip hits the newest meta
// page, the answers of the previous (identical) commit.
func FuzzCorruptBolt(f *testing.F) {
	src := f.TempDir()
	populate(f, src)
	want, err := readAll(f, src)
	if err != nil {
		f.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(src, dbFileName))
	if err != nil {
		f.Fatal(err)
	}
	d, err := ParseDescriptor(want.snap.GetData())
	if err != nil {
		f.Fatal(err)
	}
	snapBytes, err := os.ReadFile(filepath.Join(src, snapDirName, d.Name))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint32(4096*2+10), byte(4), uint32(0), byte(0))
	f.Add(uint32(4096*6+10), byte(4), uint32(4096*6+24), byte(0x80))
	f.Add(uint32(20), byte(1), uint32(4096+20), byte(1))
	f.Fuzz(func(t *testing.T, off1 uint32, mask1 byte, off2 uint32, mask2 byte) {
		b := bytes.Clone(orig)
		b[int(off1)%len(b)] ^= mask1
		b[int(off2)%len(b)] ^= mask2
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, snapDirName), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, snapDirName, d.Name), snapBytes, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dbFileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, dir)
		if err != nil {
			if !isCorrupt(err) {
				t.Fatalf("not ErrCorrupt: %v", err)
			}
			return
		}
		requireSameImage(t, want, got, "")
	})
}

// FuzzGroupBucketName parses arbitrary bucket names as a group's: no panic,
// and a name accepted is exactly the one its group and kind are written as.
func FuzzGroupBucketName(f *testing.F) {
	f.Add(stateBucketName(1))
	f.Add(logBucketName(1<<64 - 1))
	f.Add([]byte("group/000000000000000g/state"))
	f.Add([]byte("group/0000000000000001/other"))
	f.Add([]byte("understudy"))
	f.Fuzz(func(t *testing.T, name []byte) {
		g, kind, ok := parseGroupBucket(name)
		if !ok {
			return
		}
		want := logBucketName(g)
		if kind == "state" {
			want = stateBucketName(g)
		}
		if !bytes.Equal(want, name) {
			t.Fatalf("%q parsed as group %d %s", name, g, kind)
		}
	})
}
