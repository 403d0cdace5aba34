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
// term and type as uvarints, and the payload; the index is the key. It
// decodes to a proto.Equal entry (field presence included) whose proto.Size,
// which raft's size limits use, is computed without reflection. Against
// protobuf (BenchmarkCodec, 256-byte entry): encoding takes 0.6 of
// proto.Marshal's time; decoding takes 0.7 of proto.Unmarshal's, with the
// entry, its pointer fields and payload carved from per-batch chunks instead
// of five allocations per entry. The other records are uvarints, except the
// snapshot's, which is protobuf.
//
// A snapshot's raftpb.Snapshot.Data is a Descriptor (file name, size,
// CRC-32C; see Descriptor for the choice of checksum), not the state machine:
// snapshots are streamed, never held in memory. The newest
// Options.KeepSnapshots files (2) and the recorded one are kept.
//
// # Crash guarantees
//
// Each Save, Compact, CreateSnapshot's record, SetIdentity and MarkRemoved is
// one bbolt transaction (one commit: two fdatasyncs, more when the file grows):
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
// names its file. Data that fails a check is an error — ErrCorrupt with a
// *CorruptError saying which file, bucket and key, or ErrVersion for a newer
// format — never a panic, and never skipped or repaired. The checks:
//
//   - Open walks bbolt's page tree once (see Options.NoOpenCheck): bbolt
//     checksums only its meta pages, and a damaged page count or child id
//     can make it descend forever or read out of bounds. Page ids, types,
//     element bounds, depth and the freelist are checked.
//   - Open accepts only the buckets and keys this format writes (a flipped
//     key would otherwise make a record such as the hard state vanish),
//     decodes every record of the state bucket, checks that the log starts
//     right after the bounds record's first index and ends at its last index,
//     that the recorded snapshot's file is there with its size, and decodes
//     the entries it caches.
//   - Every value carries a CRC-32C; entries are checked, and the log checked
//     for holes, whenever they are read.
//   - Snapshot files are checked against their descriptor's size and CRC-32C
//     as they are read (OpenSnapshot) or received (ReceiveSnapshot).
//
// bbolt also panics on some damage. Every call into bbolt recovers such a
// panic (and a fault on its memory map) at this package's boundary and
// returns a *CorruptError; the store then never enters bbolt again, since
// bbolt's locks may be held, and Close releases the file without it.
//
// One limit remains: when the newest of bbolt's two meta pages is damaged,
// bbolt silently opens the previous transaction, losing the last commit.
// Flipping single bytes all over a store's file (TestCorruptBoltFile,
// FuzzCorruptBolt) otherwise gives either the original answers or ErrCorrupt.
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
