package raft

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A backup, as Node.Backup writes it:
//
//	"USBK"                 magic
//	uint32 (big endian)    version (1)
//	uint32                 length of the snapshot metadata
//	metadata               raftpb.SnapshotMetadata (index, term, configuration), protobuf
//	uint64                 length of the snapshot's data
//	data                   the snapshot's data: the node's header (member records,
//	                       removed IDs, dedup windows, client sessions), then the state machine's bytes
//	uint32                 CRC-32C of everything before it
const (
	backupMagic   = "USBK"
	backupVersion = 1
	maxBackupMeta = 64 << 20
)

// ErrCorruptBackup is returned by RestoreBackup for a backup that does not
// decode or fails its checksum: nothing is installed.
var ErrCorruptBackup = errors.New("raft: corrupt backup")

// Backup writes a consistent copy of this member's state to w: a snapshot
// taken now, at the applied index (Node.Snapshot), with the membership and
// the request dedup windows and client sessions. The state machine keeps
// applying meanwhile.
// RestoreBackup turns it into the data dir of a new one-member cluster.
// It returns the index the backup is at.
//
// Errors: those of Snapshot (ErrStopped, ctx's error), the storage's when
// opening the snapshot, and w's.
func (n *Node) Backup(ctx context.Context, w io.Writer) (uint64, error) {
	if _, err := n.Snapshot(ctx); err != nil {
		return 0, err
	}
	snap, err := n.store.Snapshot()
	if err != nil {
		return 0, fmt.Errorf("raft: backup: %w", err)
	}
	rc, size, err := n.store.OpenSnapshot(snap)
	if err != nil {
		return 0, fmt.Errorf("raft: backup: opening snapshot %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	defer rc.Close()
	meta, err := proto.Marshal(snap.GetMetadata())
	if err != nil {
		return 0, err
	}
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)
	var hdr []byte
	hdr = append(hdr, backupMagic...)
	hdr = binary.BigEndian.AppendUint32(hdr, backupVersion)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(meta)))
	hdr = append(hdr, meta...)
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(size))
	if _, err := bw.Write(hdr); err != nil {
		return 0, err
	}
	if err := copyCtx(ctx, bw, io.LimitReader(rc, size), size); err != nil {
		return 0, fmt.Errorf("raft: backup: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return 0, err
	}
	return snap.GetMetadata().GetIndex(), nil
}

// copyCtx copies exactly n bytes, checking ctx between chunks.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader, n int64) error {
	buf := make([]byte, 256<<10)
	var done int64
	for done < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, err := r.Read(buf[:min(int64(len(buf)), n-done)])
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return werr
			}
			done += int64(k)
		}
		if err == io.EOF && done < n {
			return io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	return nil
}

// snapshotImporter is the storage a backup is restored into
// (storage.Store implements it).
type snapshotImporter interface {
	ImportSnapshot(index, term uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error)
}

// RestoreBackup installs a backup written by Node.Backup into store, which
// must be empty, as the starting state of a new one-member cluster whose
// only voter is self (self.PeerAddr is its address there): every other
// member of the backup is recorded as removed. Start a node on store
// afterwards with no InitialMembers (record a new cluster ID with it, e.g.
// Config.ClusterID). It returns the index the backup is at.
// self.Incarnation is ignored: the restored data is a new copy, whose
// incarnation the member publishes once it runs.
//
// Errors: ErrCorruptBackup (nothing installed); ErrInvalidConfig for a
// store that is not empty or cannot import snapshots; the storage's.
func RestoreBackup(r io.Reader, store Storage, self Member) (uint64, error) {
	imp, ok := store.(snapshotImporter)
	if !ok {
		return 0, fmt.Errorf("%w: the storage cannot import a snapshot", ErrInvalidConfig)
	}
	if self.ID == 0 || self.PeerAddr == "" {
		return 0, fmt.Errorf("%w: RestoreBackup needs this member's ID and PeerAddr", ErrInvalidConfig)
	}
	// The restored data is a new copy: its incarnation is the new data
	// dir's, published once it runs. One copied from a record (Membership)
	// is the old copy's, and the restored member would stop itself as
	// wiped on every start.
	self.Incarnation = 0
	if last, err := store.LastIndex(); err != nil || last != 0 {
		return 0, fmt.Errorf("%w: RestoreBackup needs an empty storage (last index %d, %v)", ErrInvalidConfig, last, err)
	}
	crc := crc32.New(castagnoli)
	br := bufio.NewReaderSize(r, 256<<10)
	tr := io.TeeReader(br, crc)
	var pre [12]byte
	if _, err := io.ReadFull(tr, pre[:]); err != nil {
		return 0, fmt.Errorf("%w: reading the header: %v", ErrCorruptBackup, err)
	}
	if string(pre[:4]) != backupMagic || binary.BigEndian.Uint32(pre[4:8]) != backupVersion {
		return 0, fmt.Errorf("%w: not a backup of version %d (magic %q)", ErrCorruptBackup, backupVersion, pre[:4])
	}
	ml := binary.BigEndian.Uint32(pre[8:])
	if ml > maxBackupMeta {
		return 0, fmt.Errorf("%w: metadata of %d bytes", ErrCorruptBackup, ml)
	}
	mb := make([]byte, ml)
	if _, err := io.ReadFull(tr, mb); err != nil {
		return 0, fmt.Errorf("%w: reading the metadata: %v", ErrCorruptBackup, err)
	}
	var meta raftpb.SnapshotMetadata
	if err := proto.Unmarshal(mb, &meta); err != nil || meta.GetIndex() == 0 {
		return 0, fmt.Errorf("%w: bad metadata (%v)", ErrCorruptBackup, err)
	}
	var sz [8]byte
	if _, err := io.ReadFull(tr, sz[:]); err != nil {
		return 0, fmt.Errorf("%w: reading the data size: %v", ErrCorruptBackup, err)
	}
	size := int64(binary.BigEndian.Uint64(sz[:]))
	data := &io.LimitedReader{R: tr, N: size}
	cs := &raftpb.ConfState{Voters: []uint64{self.ID}}
	_, err := imp.ImportSnapshot(meta.GetIndex(), meta.GetTerm(), cs, func(w io.Writer) error {
		h, err := readSnapHeader(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorruptBackup, err)
		}
		// Everyone but self is gone from the new cluster.
		for _, m := range h.members {
			if m.ID != self.ID && !slices.Contains(h.removed, m.ID) {
				h.removed = append(h.removed, m.ID)
			}
		}
		for _, id := range meta.GetConfState().GetVoters() {
			if id != self.ID && !slices.Contains(h.removed, id) {
				h.removed = append(h.removed, id)
			}
		}
		for _, id := range meta.GetConfState().GetLearners() {
			if id != self.ID && !slices.Contains(h.removed, id) {
				h.removed = append(h.removed, id)
			}
		}
		h.removed = slices.DeleteFunc(h.removed, func(id uint64) bool { return id == self.ID })
		slices.Sort(h.removed)
		h.members = []Member{self}
		if err := h.writeTo(w); err != nil {
			return err
		}
		if _, err := io.Copy(w, data); err != nil {
			return fmt.Errorf("%w: reading the data: %v", ErrCorruptBackup, err)
		}
		if data.N != 0 {
			return fmt.Errorf("%w: the data ends %d bytes short", ErrCorruptBackup, data.N)
		}
		want := crc.Sum32()
		var sum [4]byte
		if _, err := io.ReadFull(br, sum[:]); err != nil {
			return fmt.Errorf("%w: reading the checksum: %v", ErrCorruptBackup, err)
		}
		if got := binary.BigEndian.Uint32(sum[:]); got != want {
			return fmt.Errorf("%w: checksum %08x, computed %08x", ErrCorruptBackup, got, want)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	hs := &raftpb.HardState{Term: proto.Uint64(meta.GetTerm()), Commit: proto.Uint64(meta.GetIndex())}
	if err := store.Save(hs, nil, nil); err != nil {
		return 0, err
	}
	return meta.GetIndex(), nil
}
