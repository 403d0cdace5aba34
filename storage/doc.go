// Package storage is the durable storage of a raft group: the log, the hard
// state, the latest snapshot's metadata and the member's identity in a bbolt
// file, and the state machine's snapshots in files beside it. A *Store
// implements etcd's raft.Storage with exactly the semantics of
// raft.MemoryStorage, and adds the write side the node calls once per
// MsgStorageAppend (Save), snapshot files (CreateSnapshot, ReceiveSnapshot,
// OpenSnapshot) and the member's lifecycle (SetIdentity, MarkRemoved).
//
// # On-disk layout
//
// A data dir holds:
//
//	understudy.db                 the bbolt file (format below)
//	snap/<group>-<term>-<index>.snap
//	                              snapshot files, three 16-digit hex numbers
//	snap/<name>.tmp-<random>      a snapshot being written; removed by Open
//
// The bbolt file holds these buckets; every bucket of a group is namespaced
// by its ID (today always 1), so one file can hold many groups:
//
//	understudy                    version → format version (FormatVersion)
//	group/<16 hex>/state          hardstate → term, vote, commit
//	                              snapshot  → the latest raftpb.Snapshot, with
//	                                          its Descriptor in Data
//	                              bounds    → index and term of the entry
//	                                          before the first (FirstIndex()-1),
//	                                          and the last index
//	                              identity  → cluster ID, member ID
//	                              removed   → tombstone (MarkRemoved)
//	group/<16 hex>/log            8-byte big-endian index → entry record
//
// Every value ends with the CRC-32C of the rest (bbolt checksums only its meta
// pages). An entry record is a flags byte (which protobuf fields are set), the
// term and type as uvarints, and the payload; the index is the key. This
// encodes and decodes several times faster than proto.Marshal, with fewer
// allocations, and decodes to a proto.Equal entry. The other records are
// uvarints, except the snapshot's, which is protobuf.
//
// A snapshot's raftpb.Snapshot.Data is a Descriptor (file name, size,
// CRC-32C; see Descriptor for the choice of checksum), not the state machine:
// snapshots are streamed, never held in memory. The newest
// Options.KeepSnapshots files (2) and the recorded one are kept.
//
// # Crash guarantees
//
// Each Save, Compact, SetIdentity and MarkRemoved is one bbolt transaction:
// after a crash the store reopens to the last one committed, with nothing of
// a later one. In particular a Save's snapshot, entries and hard state are
// durable together or not at all, and an acknowledged (returned) Save is
// never lost (unless Options.NoSync).
//
// A snapshot file is fsynced and renamed into place, and the directory
// fsynced, before bbolt records it, so a recorded snapshot always has its
// file; a crash in between leaves at most an unrecorded file (pruned later)
// or a temporary one (removed by Open).
//
// After a failed commit the store refuses further writes (ErrFailed): an
// fsync error may have lost pages, and only reopening, which reads the last
// committed transaction, tells what is on disk.
//
// # Errors and corruption
//
// The raft.Storage methods return etcd's ErrCompacted and ErrUnavailable
// unwrapped, since raft compares them with ==. Everything else is wrapped and
// names its file. Data that fails a check — a checksum, a record that does
// not decode, a gap in the log, a snapshot file of the wrong size or
// checksum, a newer format — is an error (ErrCorrupt with a *CorruptError,
// or ErrVersion), never a panic and never skipped. bbolt panics on some
// corrupt pages; every call into bbolt recovers such a panic (and a fault on
// its memory map) at this package's boundary and returns a *CorruptError
// naming the file. Corruption is detected when the damaged data is read: Open
// reads the records of the state bucket, the ends of the log and the entries
// it caches, the rest is checked as it is read. One limit: bbolt walks its
// pages in a goroutine of its own only when the freelist is not synced, so
// the store keeps bbolt's freelist synced and that walk never runs.
//
// # Concurrency and memory
//
// All methods are safe for concurrent use: raft's loop calls Save, Entries
// and Term while an apply goroutine snapshots and compacts and the transport
// sends and receives snapshot files. An append (the common Save) commits
// without blocking readers. The most recent entries stay in memory, up to
// Options.TailCacheBytes (16 MiB), so replication to followers that keep up
// never reads bbolt; older entries are read from bbolt and decoded into
// batch-allocated memory. Returned slices belong to the caller; entries are
// shared and must not be modified, as raft.Storage requires.
package storage
