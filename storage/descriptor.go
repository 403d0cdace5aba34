package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
)

// Descriptor is what a raft snapshot's Data holds: not the state machine but
// the name, size and checksum of the snapshot file in the data dir. The
// transport streams the file beside the MsgSnap; the receiver checks it
// against the descriptor.
//
// The checksum is CRC-32C (Castagnoli). It guards against accidental damage
// (a torn or truncated file, flipped bits on disk or in a buffer), not against
// an adversary, which mutual TLS on the peer port is for. CRC-32C runs at
// memory speed in hardware on amd64 and arm64, so verifying never limits how
// fast a snapshot is sent or restored, where SHA-256 runs at 0.4-2 GB/s; it
// detects every burst error up to 32 bits and misses random damage with
// probability 2^-32. The descriptor is versioned, so a stronger hash can be
// added as a new version.
type Descriptor struct {
	// Name is the file name in the snapshot directory, as SnapshotFileName
	// builds it.
	Name string
	// Size is the file size in bytes.
	Size int64
	// CRC32C is the CRC-32C (Castagnoli) of the file's contents.
	CRC32C uint32
}

// Descriptor wire format, version 1 (all integers big-endian):
//
//	magic    4 bytes  "USNP"
//	version  1 byte   1
//	namelen  1 byte
//	name     namelen bytes
//	size     8 bytes
//	crc      4 bytes  CRC-32C of the snapshot file
//	check    4 bytes  CRC-32C of all the bytes above
const (
	descMagic   = "USNP"
	descVersion = 1
	descFixed   = len(descMagic) + 1 + 1 + 8 + 4 + 4
)

// Marshal returns the encoding of d, to be stored in raftpb.Snapshot.Data.
func (d Descriptor) Marshal() []byte {
	buf := make([]byte, 0, descFixed+len(d.Name))
	buf = append(buf, descMagic...)
	buf = append(buf, descVersion, byte(len(d.Name)))
	buf = append(buf, d.Name...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(d.Size))
	buf = binary.BigEndian.AppendUint32(buf, d.CRC32C)
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

// ParseDescriptor decodes a descriptor. It rejects anything that is not
// exactly a valid encoding: a wrong magic, length or check, an unknown version,
// a negative size, or a name that SnapshotFileName could not have built (so a
// name from a peer never escapes the snapshot directory). The error wraps
// ErrCorrupt, or ErrVersion for an unknown version.
func ParseDescriptor(data []byte) (Descriptor, error) {
	bad := func(detail string) (Descriptor, error) {
		return Descriptor{}, &CorruptError{File: "snapshot descriptor", Detail: detail}
	}
	if len(data) < descFixed {
		return bad(fmt.Sprintf("%d bytes, want at least %d", len(data), descFixed))
	}
	if string(data[:4]) != descMagic {
		return bad(fmt.Sprintf("bad magic %q", data[:4]))
	}
	n := int(data[5])
	if len(data) != descFixed+n {
		return bad(fmt.Sprintf("%d bytes, want %d for a %d-byte name", len(data), descFixed+n, n))
	}
	body, check := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != check {
		return bad("descriptor checksum mismatch")
	}
	if v := data[4]; v != descVersion {
		return Descriptor{}, fmt.Errorf("%w: snapshot descriptor version %d, this code reads %d", ErrVersion, v, descVersion)
	}
	d := Descriptor{
		Name:   string(data[6 : 6+n]),
		Size:   int64(binary.BigEndian.Uint64(data[6+n:])),
		CRC32C: binary.BigEndian.Uint32(data[6+n+8:]),
	}
	if d.Size < 0 {
		return bad(fmt.Sprintf("negative size %d", d.Size))
	}
	if _, _, _, ok := parseSnapshotFileName(d.Name); !ok {
		return bad(fmt.Sprintf("invalid file name %q", d.Name))
	}
	return d, nil
}

// SnapshotFileName is the name of the snapshot file of a group at a raft term
// and index: three 16-digit lowercase hex numbers, "<group>-<term>-<index>.snap".
// Sorting names of one group by index sorts snapshots by age.
func SnapshotFileName(group, term, index uint64) string {
	return fmt.Sprintf("%016x-%016x-%016x%s", group, term, index, snapExt)
}

const snapExt = ".snap"

func parseSnapshotFileName(name string) (group, term, index uint64, ok bool) {
	const hex = 16
	if len(name) != 3*hex+2+len(snapExt) || name[hex] != '-' || name[2*hex+1] != '-' || name[3*hex+2:] != snapExt {
		return 0, 0, 0, false
	}
	var vs [3]uint64
	for i := range vs {
		s := name[i*(hex+1) : i*(hex+1)+hex]
		for _, c := range []byte(s) {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return 0, 0, 0, false
			}
		}
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		vs[i] = v
	}
	return vs[0], vs[1], vs[2], true
}
