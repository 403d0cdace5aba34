package storage

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Benchmarks. The figures in the issue note come from
//
//	go test -run '^$' -bench 'Save|BoltCeiling' -benchmem -benchtime 500x -count 3 ./storage
//	go test -run '^$' -bench 'Entries|Term|Codec' -benchmem ./storage
//	go test -run '^$' -bench 'Snapshot' -benchmem -benchtime 5x -count 3 ./storage
//
// BenchmarkSave and BenchmarkBoltCeiling write the same bytes (256-byte
// entries, batches of 1, 16 and 256 per Save), with fsync, so their ratio is
// the cost of this package over a bare bbolt put+commit.

const benchEntrySize = 256

func benchEntries(first uint64, n int) []*raftpb.Entry {
	es := make([]*raftpb.Entry, n)
	data := bytes.Repeat([]byte{'d'}, benchEntrySize)
	for i := range es {
		es[i] = &raftpb.Entry{Index: proto.Uint64(first + uint64(i)), Term: proto.Uint64(1),
			Type: raftpb.EntryNormal.Enum(), Data: data}
	}
	return es
}

// reportPerEntry adds allocs/entry from the benchmark's allocations.
func reportPerEntry(b *testing.B, before runtime.MemStats, entries int) {
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(entries), "allocs/entry")
}

func BenchmarkSave(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, batch := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("sync=%t/batch=%d", sync, batch), func(b *testing.B) {
				s, err := Open(b.TempDir(), Options{NoSync: !sync})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				// Build the batches first: raft hands Save entries it made.
				batches := make([][]*raftpb.Entry, b.N)
				for i := range batches {
					batches[i] = benchEntries(uint64(i*batch+1), batch)
				}
				hs := hardState(1, 1, 0)
				b.SetBytes(int64(batch * benchEntrySize))
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := s.Save(hs, batches[i], nil); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				reportPerEntry(b, ms, b.N*batch)
				m := s.Metrics()
				b.ReportMetric(float64(m.Commits)/float64(b.N), "commits/op")
			})
		}
	}
}

// BenchmarkBoltCeiling is the bare bbolt put+commit of the same keys and
// values as BenchmarkSave, with the same bbolt options: the ceiling.
func BenchmarkBoltCeiling(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, batch := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("sync=%t/batch=%d", sync, batch), func(b *testing.B) {
				db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600,
					&bolt.Options{NoSync: !sync, FreelistType: bolt.FreelistMapType})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				bucket := []byte("log")
				if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }); err != nil {
					b.Fatal(err)
				}
				// The same value bytes our record has: 256 B of payload plus
				// the flags, term, type and checksum.
				val := appendEntry(nil, benchEntries(1, 1)[0])
				keys := make([]byte, 8*batch)
				b.SetBytes(int64(batch * benchEntrySize))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					keys = keys[:0]
					for j := range batch {
						keys = indexKey(keys, uint64(i*batch+j+1))
					}
					err := db.Update(func(tx *bolt.Tx) error {
						bk := tx.Bucket(bucket)
						bk.FillPercent = 1
						for j := range batch {
							if err := bk.Put(keys[8*j:8*j+8], val); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEntries reads 64 entries (16 KiB) at the end of a 20,000-entry
// log (recent: served by a 1 MiB tail) and at its start (old: read from
// bbolt), and recent ones with the tail disabled.
func BenchmarkEntries(b *testing.B) {
	for _, tc := range []struct {
		name string
		tail int64
		old  bool
	}{{"recent", 1 << 20, false}, {"recent-notail", -1, false}, {"old", 1 << 20, true}} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{NoSync: true, TailCacheBytes: tc.tail})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const total, n = 20_000, 64
			for i := 0; i < total; i += 1000 {
				if err := s.Save(nil, benchEntries(uint64(i+1), 1000), nil); err != nil {
					b.Fatal(err)
				}
			}
			lo := uint64(total - n + 1)
			if tc.old {
				lo = 1
			}
			b.SetBytes(n * benchEntrySize)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				es, err := s.Entries(lo, lo+n, raftNoLimit)
				if err != nil || len(es) != n {
					b.Fatal(err, len(es))
				}
			}
			b.StopTimer()
			reportPerEntry(b, ms, b.N*n)
		})
	}
}

func BenchmarkTerm(b *testing.B) {
	s, err := Open(b.TempDir(), Options{NoSync: true, TailCacheBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 10_000; i += 1000 {
		if err := s.Save(nil, benchEntries(uint64(i+1), 1000), nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		index uint64
	}{{"recent", 9_990}, {"old", 10}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := s.Term(tc.index); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSnapshot writes (CreateSnapshot, with fsync) and reads back
// (OpenSnapshot, checksum verified) a 16 MiB snapshot.
func BenchmarkSnapshot(b *testing.B) {
	const size = 16 << 20
	chunk := bytes.Repeat([]byte("snapshot"), 64<<10/8)
	write := func(w io.Writer) error {
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	}
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Save(nil, benchEntries(1, 1), nil); err != nil {
		b.Fatal(err)
	}
	var snap *raftpb.Snapshot
	next := uint64(2)
	b.Run("write", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if err := s.Save(nil, benchEntries(next, 1), nil); err != nil {
				b.Fatal(err)
			}
			if snap, err = s.CreateSnapshot(next, nil, write); err != nil {
				b.Fatal(err)
			}
			next++
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 256<<10)
		for i := 0; i < b.N; i++ {
			rc, _, err := s.OpenSnapshot(snap)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, rc, buf); err != nil {
				b.Fatal(err)
			}
			rc.Close()
		}
	})
}

// BenchmarkCodec compares the entry record with protobuf, for one 256-byte
// entry: why the store does not use proto.Marshal.
func BenchmarkCodec(b *testing.B) {
	e := benchEntries(12345, 1)[0]
	rec := appendEntry(nil, e)
	pb, _ := proto.Marshal(e)
	b.Run("encode/record", func(b *testing.B) {
		buf := make([]byte, 0, 512)
		for i := 0; i < b.N; i++ {
			buf = appendEntry(buf[:0], e)
		}
	})
	b.Run("encode/proto", func(b *testing.B) {
		buf := make([]byte, 0, 512)
		opts := proto.MarshalOptions{}
		for i := 0; i < b.N; i++ {
			buf, _ = opts.MarshalAppend(buf[:0], e)
		}
	})
	b.Run("decode/record", func(b *testing.B) {
		var a entryAlloc
		for i := 0; i < b.N; i++ {
			if _, err := decodeEntry(12345, rec, &a, 64); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/proto", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var out raftpb.Entry
			if err := proto.Unmarshal(pb, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("size/entrySize", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = entrySize(e)
		}
	})
	b.Run("size/proto.Size", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = proto.Size(e)
		}
	})
}

// BenchmarkSaveDuringSnapshot measures the log's Save latency (one 256-byte
// entry, fsync) while 128 MiB snapshots are written back to back beside it,
// with the paced writeback of snapshot files (rangeSyncer) in chunks of
// several sizes and without it (chunk=0K): what a snapshot costs the writes
// of the member taking it. It reports the p50, p99 and maximum Save latency
// and the snapshot's write rate.
//
//	go test -run '^$' -bench SaveDuringSnapshot -benchtime 2000x -count 3 ./storage
func BenchmarkSaveDuringSnapshot(b *testing.B) {
	const size = 128 << 20
	chunk := bytes.Repeat([]byte("snapshot"), 64<<10/8)
	for _, chunkSize := range []int64{128 << 10, 256 << 10, 1 << 20, 0} {
		b.Run(fmt.Sprintf("chunk=%dK", chunkSize>>10), func(b *testing.B) {
			defer func(old bool, oldChunk int64) { rangeSync, syncChunk = old, oldChunk }(rangeSync, syncChunk)
			rangeSync, syncChunk = chunkSize > 0, max(chunkSize, 1)
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Save(nil, benchEntries(1, 1), nil); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			done := make(chan error, 1)
			var snapBytes, snapNanos atomic.Int64
			var saved atomic.Uint64 // the last index saved
			saved.Store(1)
			go func() {
				for prev := uint64(0); ; {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					index := saved.Load()
					if index <= prev {
						time.Sleep(time.Millisecond)
						continue
					}
					prev = index
					t0 := time.Now()
					_, err := s.CreateSnapshot(index, nil, func(w io.Writer) error {
						for n := 0; n < size; n += len(chunk) {
							if _, err := w.Write(chunk); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						done <- err
						return
					}
					snapBytes.Add(size)
					snapNanos.Add(int64(time.Since(t0)))
				}
			}()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := s.Save(nil, benchEntries(uint64(i+2), 1), nil); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				saved.Store(uint64(i + 2))
			}
			b.StopTimer()
			close(stop)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			reportLatencies(b, lat)
			if ns := snapNanos.Load(); ns > 0 {
				b.ReportMetric(float64(snapBytes.Load())/1e6/(float64(ns)/1e9), "snap-MB/s")
			}
		})
	}
}

// BenchmarkSaveDuringCompact is what compaction costs the log's writes: each
// op is one Save of a 64-entry batch of 1 KiB entries (a leader's batch
// under load, fsync on), while a goroutine compacts the log down to its last
// 5,000 entries whenever it holds 50,000 (an amortized snapshot's worth of
// log, ~50 MB, discarded at once). It reports the Saves' p50, p99 and max,
// and the compactions' own time (the deletions are the Saves' share).
func BenchmarkSaveDuringCompact(b *testing.B) {
	const batch, keep, every = 64, 5_000, 50_000
	data := bytes.Repeat([]byte{'d'}, 1024)
	entries := func(first uint64) []*raftpb.Entry {
		es := make([]*raftpb.Entry, batch)
		for i := range es {
			es[i] = &raftpb.Entry{Index: proto.Uint64(first + uint64(i)), Term: proto.Uint64(1),
				Type: raftpb.EntryNormal.Enum(), Data: data}
		}
		return es
	}
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	next := uint64(1)
	for next < every { // a log that is about to be compacted
		if err := s.Save(nil, entries(next), nil); err != nil {
			b.Fatal(err)
		}
		next += batch
	}
	var saved atomic.Uint64
	saved.Store(next - 1)
	stop := make(chan struct{})
	done := make(chan error, 1)
	var compactions, compactNanos atomic.Int64
	go func() {
		first := uint64(1)
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			last := saved.Load()
			if last-first+1 < every {
				time.Sleep(time.Millisecond)
				continue
			}
			t0 := time.Now()
			if err := s.Compact(last - keep); err != nil {
				done <- err
				return
			}
			compactNanos.Add(int64(time.Since(t0)))
			compactions.Add(1)
			first = last - keep + 1
		}
	}()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := s.Save(nil, entries(next), nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		next += batch
		saved.Store(next - 1)
	}
	b.StopTimer()
	close(stop)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	reportLatencies(b, lat)
	b.ReportMetric(float64(compactions.Load()), "compactions")
	if n := compactions.Load(); n > 0 {
		b.ReportMetric(float64(compactNanos.Load())/float64(n)/1e6, "ms/compaction")
	}
}

// reportLatencies sorts lat and reports its p50, p99 and max in µs.
func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}
