// Package storage is the durable storage of a raft group: the log, the hard
// state, the latest snapshot's metadata and the member's identity in a bbolt
// file, and the state machine's snapshots in files beside it. A *Store
// implements etcd's raft.Storage with exactly the semantics of
// raft.MemoryStorage, and adds the write side the node calls once per
// MsgStorageAppend (Save), snapshot files (CreateSnapshot, ReceiveSnapshot,
// OpenSnapshot) and the member's lifecycle (SetIdentity, MarkRemoved).
//
// # Many groups: the Engine
//
// A data dir can hold many raft groups (a host's). OpenEngine opens it as an
// *Engine, which owns the bbolt file and its committer; Engine.Group opens
// one group's *Store, a view with its own locks, cache, bounds, identity,
// tombstone and snapshot files. One commit runs at a time and carries every
// write of every group queued while the previous one ran, in one bbolt
// transaction (group commit across groups, with no delay: a lone write goes
// at once). BenchmarkEngineGroupCommit (one 256-byte entry
// per Save, fsync on, a shared 2-core machine, four runs): 100 groups
// saving at once make 21-28k Saves/s in one Engine, about 49 groups per
// commit, against 5-6.5k Saves/s with a data dir (a bbolt file and its
// fsyncs) per group; 10 groups 8.6-11k against 4.8-6.4k; one group alone
// 3-3.9k either way. Open is an Engine with one group, which
// the Store owns.
//
// # Backends: bbolt and Pebble
//
// The records live in buckets of keys, in one of two key-value stores
// (EngineOptions.Backend). BackendBolt, the default, is one bbolt file: a
// B+tree whose commit copies every page it touches (about three 4 KiB pages
// per group in the commit) and syncs twice. BackendPebble is a Pebble
// database (github.com/cockroachdb/pebble/v2, the LSM CockroachDB runs on,
// whose write-ahead log dragonboat also uses for many groups): a commit is
// appended to its log and synced once, so it costs its bytes, whatever
// number of groups it carries; a bucket is a key prefix there ('b' name
// marks a bucket, 'k' name 0x00 key holds a key), and deleting a log is one
// range deletion. The Store, its checks and its records are the same on
// both; only the commit and the reads differ. Choose Pebble for a host with
// many active groups (benchmarks/README.md has the figures); bbolt for one
// group, where its commit is as fast and the data dir is one file. A data
// dir keeps the backend it was created with: the zero Backend opens the one
// it holds (for a new dir, EngineOptions.NewBackend, bbolt if that is zero
// too; understudy.NewHost and understudy.Start set it to Pebble), and asking for the other returns
// ErrBackend; there is no conversion between them. A Pebble data dir's
// bbolt file holds format version 100, which releases that know only bbolt
// refuse (ErrVersion) rather than start afresh beside the records. The package's tests run
// on either (UNDERSTUDY_STORAGE_BACKEND=pebble).
//
// # On-disk layout
//
// A data dir holds:
//
//	understudy.db                 the bbolt file (format below); with
//	                              BackendPebble, only a marker (format
//	                              version 100: the records are in pebble/)
//	                              and the data dir's lock
//	pebble/                       BackendPebble: the Pebble database, whose
//	                              keys hold the buckets below
//	snap/<group>-<term>-<index>.snap
//	                              snapshot files, three 16-digit hex numbers
//	snap/<name>.tmp-<random>      a snapshot being written; removed by
//	                              OpenEngine (and Open), every group's
//
// The bbolt file holds these buckets; every bucket of a group is namespaced
// by its ID (1 for a data dir of one group opened with Open), so one file
// holds many groups:
//
//	understudy                    version → format version (FormatVersion)
//	group/<16 hex>/state          hardstate → term, vote, commit
//	                              snapshot  → the latest raftpb.Snapshot, with
//	                                          its Descriptor in Data
//	                              bounds    → index and term of the entry
//	                                          before the first (FirstIndex()-1),
//	                                          and the last index (in format
//	                                          version 3, Pebble's, as of the
//	                                          last snapshot, compaction or
//	                                          truncation: appends extend
//	                                          the log past it)
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
// Options.KeepSnapshots files (2) and the recorded one are kept, per group.
//
// # Format versions
//
// Version 1 and version 2 have the same layout. A file is version 1 while it
// holds one group, and is raised to version 2, for good, when a second group
// is created in it. The first release reads version 1 only and accepts any
// group's buckets, so a file of one group written by this code still opens
// there, and a shared file is refused with ErrVersion ("has format version
// 2, this code reads 1") instead of being opened as a single group's. This
// code reads both; a data dir of the first release opens as an Engine
// unchanged.
//
// # Crash guarantees
//
// Each Save, Compact, CreateSnapshot's record, SetIdentity and MarkRemoved is
// part of one bbolt transaction (one commit: two fdatasyncs, more when the
// file grows), which also carries the writes other groups of the engine
// queued meanwhile: after a crash the store reopens to the last one
// committed, with nothing of a later one, across groups. In particular a
// Save's snapshot, entries and hard state are durable together or not at
// all, and an acknowledged (returned) Save is never lost (unless
// Options.NoSync).
//
// A snapshot file is fsynced and renamed into place, and the directory
// fsynced, before bbolt records it, so a recorded snapshot always has its
// file; a crash in between leaves at most an unrecorded file (pruned later)
// or a temporary one (removed by Open).
//
// After a failed commit the engine refuses further writes of every group
// (ErrFailed), and every write of that commit fails: an fsync error may have
// lost pages, and only reopening, which reads the last committed
// transaction, tells what is on disk. A write whose bbolt work fails rolls
// back the whole commit, the other groups' writes in it included.
//
// # Errors and corruption
//
// The raft.Storage methods return etcd's ErrCompacted and ErrUnavailable
// unwrapped, since raft compares them with ==. Everything else is wrapped and
// names its file. Data that fails a check is an error — ErrCorrupt with a
// *CorruptError saying which file, bucket and key, or ErrVersion for a newer
// format — never a panic, and never skipped or repaired. A read that fails
// (an I/O error of the disk under Pebble) is not corruption: it is returned
// as that error, wrapped (errors.Is finds it), even when the record it failed
// to read would otherwise read as missing. The checks:
//
//   - OpenEngine (and Open) walks bbolt's page tree once (see
//     Options.NoOpenCheck): bbolt checksums only its meta pages, and a
//     damaged page count or child id can make it descend forever or read
//     out of bounds. Page ids, types, element bounds, depth and the freelist
//     are checked.
//   - OpenEngine accepts only the buckets and keys this format writes, of
//     every group (a flipped key would otherwise make a record such as the
//     hard state vanish). Opening a group decodes every record of its state
//     bucket, checks that the log starts right after the bounds record's
//     first index and ends at its last index (format version 3: at or
//     after it), that the recorded snapshot's
//     file is there with its size, and decodes the entries it caches.
//   - Every value carries a CRC-32C; entries are checked, and the log checked
//     for holes, whenever they are read.
//   - Snapshot files are checked against their descriptor's size and CRC-32C
//     as they are read (OpenSnapshot) or received (ReceiveSnapshot).
//
// bbolt also panics on some damage. Every call into bbolt recovers such a
// panic (and a fault on its memory map) at this package's boundary and
// returns a *CorruptError; the engine (every group) then never enters bbolt
// again, since bbolt's locks may be held, and Close releases the file
// without it.
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
// without blocking readers. An Engine's groups share its committer only: a
// group's readers never wait for another group's writes. The most recent
// entries stay in memory, up to Options.TailCacheBytes (16 MiB) per group (a
// host of many groups sets GroupOptions.TailCacheBytes lower), so
// replication to followers that keep up
// never reads the database; older entries are read from it and decoded
// into batch-allocated memory. The tail holds the entries' records in
// chunks of bytes the garbage collector does not scan (not the
// *raftpb.Entry values Save was given: those are the caller's again when
// Save returns), and Entries decodes what it returns from them. Returned
// slices belong to the caller; entries must not be modified, as
// raft.Storage requires.
package storage
