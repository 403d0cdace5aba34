// Command enginebench measures, for issue 29, the storage engine that many
// raft groups on one host share: understudy's storage.Engine (one bbolt file,
// one committer that writes every group's queued Saves in one transaction)
// against Pebble (one DB per data dir, whose WAL group-commits concurrent
// synced batches into one write and one fsync), both with fsync on, in
// one process, the two engines' runs interleaved (bbolt, pebble, bbolt, ...).
//
// The write is what raft's MsgStorageAppend asks of a group at steady state:
// one entry (-entry bytes of data, 256 by default) and the hard state. Two
// workloads:
//
//   - groups: for each G in -groups, G groups and W writers (-writers; 0
//     means one per group), writer w owning groups w, w+W, w+2W, ... and
//     saving to them in turn: one entry and the hard state, waiting until it
//     is durable, then the next. A group so has at most one Save in flight,
//     as a group's raft loop has. bbolt: Engine.Group then Store.Save.
//     Pebble: keys group(8 bytes, big-endian) 'l' index(8, big-endian) for
//     entries and group 'h' for the hard state, values the protobuf
//     encodings, each Save one pebble.Batch committed with pebble.Sync.
//   - onegroup: one group and -onegroup-writers proposers (64 by default),
//     each proposing one entry and waiting until it is durable, then the
//     next; the group's loop takes every proposal queued while its previous
//     Save ran and saves them as one append (with the hard state), as raft
//     batches proposals into one Ready. "pebble-direct" is the same load with
//     every proposer committing its own synced batch (no loop: Pebble's
//     commit pipeline batches them), which Store's API, one Save at a time
//     per group, does not allow today; it shows what pipelining would give.
//
// Each run uses a fresh data dir under a temp dir (removed afterwards), runs
// the load for -warmup, then measures it for -duration. Per run it prints,
// and per configuration it prints the medians over -runs runs of:
//
//	saves/s     Saves completed in the window (onegroup: proposals, i.e. entries)
//	p50, p99    latency of a Save (onegroup: of a proposal, queueing included)
//	cpu-us      process CPU time (getrusage: user+system, every goroutine,
//	            Pebble's flushes and compactions included) per save
//	wbytes      /proc/self/io write_bytes (pages this process dirtied, sent
//	            to the disk) per save
//	syncs/s     bbolt: 2 × commits/s (its pages, then its meta page, each
//	            fdatasynced; file growth adds a few more, not counted);
//	            Pebble: Sync, SyncData and full SyncTo calls on its files,
//	            counted through a vfs.FS wrapper (WAL, manifest, sstables,
//	            directories)
//	per-sync    saves per commit (bbolt) or per sync (Pebble)
//	ents/save   onegroup: entries per Save (pebble-direct: 1)
//	commit(io)  bbolt: the mean commit time (EngineMetrics.CommitDuration),
//	            and in brackets its part writing and fdatasyncing pages and
//	            meta (SyncDuration); the rest is CPU in the transaction
//
// Pebble (github.com/cockroachdb/pebble/v2, the version in this module's
// go.mod) runs with its default options (pebble.Options{}) but for two that
// change no behaviour: FS, the counting wrapper around vfs.Default, and
// Logger, which drops Pebble's informational lines; -pebble-memtable sets
// MemTableSize (default: Pebble's). Its WAL is on, every commit synced.
//
// The figures for issue 29 come from (2 cores, other work running, so short
// runs and medians of 3):
//
//	go build -o /tmp/enginebench ./cmd/enginebench
//	/tmp/enginebench -groups 1,10,100,1000 -onegroup-writers 64 -duration 4s -runs 3
//	/tmp/enginebench -groups 1000 -writers 256 -onegroup-writers 256 -duration 4s -runs 3
//	/tmp/enginebench -engines pebble -pebble-memtable 67108864 -groups 100,1000 -duration 4s -runs 3
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/storage"
)

var (
	groupsFlag  = flag.String("groups", "1,10,100,1000", "numbers of groups, comma-separated (empty: skip the groups workload)")
	writersFlag = flag.Int("writers", 0, "writers in the groups workload (0: one per group)")
	oneWriters  = flag.Int("onegroup-writers", 64, "proposers in the one-group workload (0: skip it)")
	enginesFlag = flag.String("engines", "bbolt,pebble", "engines, comma-separated, in the order each run takes them: bbolt, pebble (pebble-direct is added to onegroup when pebble is listed)")
	duration    = flag.Duration("duration", 4*time.Second, "measured time of a run")
	warmup      = flag.Duration("warmup", 500*time.Millisecond, "load before the measured time of a run")
	runs        = flag.Int("runs", 3, "runs of each engine per configuration (interleaved)")
	entrySize   = flag.Int("entry", 256, "bytes of data per entry")
	memtable    = flag.Int("pebble-memtable", 0, "Pebble's MemTableSize in bytes (0: its default, 4 MiB)")
	dirFlag     = flag.String("dir", "", "parent of the temp dir holding the data dirs (default: the system's temp dir)")
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("enginebench: ")
	flag.Parse()
	groups, err := parseInts(*groupsFlag)
	if err != nil {
		log.Fatalf("-groups: %v", err)
	}
	engines := strings.Split(*enginesFlag, ",")
	for _, e := range engines {
		if e != "bbolt" && e != "pebble" {
			log.Fatalf("-engines: unknown engine %q", e)
		}
	}
	top, err := os.MkdirTemp(*dirFlag, "enginebench-")
	if err != nil {
		log.Fatal(err)
	}
	code := run(top, groups, engines)
	if err := os.RemoveAll(top); err != nil {
		log.Print(err)
	}
	os.Exit(code)
}

func run(top string, groups []int, engines []string) int {
	fmt.Printf("enginebench: %s, GOMAXPROCS %d, %d runs of %v (after %v of warm-up) per engine and configuration, entry %d B, fsync on, Pebble MemTableSize %d (0: default)\n",
		runtime.Version(), runtime.GOMAXPROCS(0), *runs, *duration, *warmup, *entrySize, *memtable)
	type config struct {
		name    string
		engines []string
		run     func(dir, engine string) (result, error)
	}
	var configs []config
	for _, g := range groups {
		w := *writersFlag
		if w <= 0 || w > g {
			w = g
		}
		configs = append(configs, config{
			name:    fmt.Sprintf("groups=%d writers=%d", g, w),
			engines: engines,
			run:     func(dir, engine string) (result, error) { return runGroups(dir, engine, g, w) },
		})
	}
	if *oneWriters > 0 {
		es := slices.Clone(engines)
		if slices.Contains(es, "pebble") {
			es = append(es, "pebble-direct")
		}
		configs = append(configs, config{
			name:    fmt.Sprintf("onegroup writers=%d", *oneWriters),
			engines: es,
			run:     func(dir, engine string) (result, error) { return runOneGroup(dir, engine, *oneWriters) },
		})
	}
	var summary []string
	n := 0
	for _, c := range configs {
		fmt.Printf("\n%s\n%s\n", c.name, header)
		byEngine := map[string][]result{}
		for r := range *runs {
			for _, e := range c.engines {
				n++
				dir := filepath.Join(top, strconv.Itoa(n))
				res, err := c.run(dir, e)
				if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
					err = rerr
				}
				if err != nil {
					log.Printf("%s, %s, run %d: %v", c.name, e, r+1, err)
					return 1
				}
				runtime.GC()
				fmt.Println(res.line(fmt.Sprintf("%s #%d", e, r+1)))
				byEngine[e] = append(byEngine[e], res)
			}
		}
		for _, e := range c.engines {
			summary = append(summary, median(byEngine[e]).line(c.name+" "+e))
		}
	}
	fmt.Printf("\nmedians over %d runs\n%s\n%s\n", *runs, header, strings.Join(summary, "\n"))
	return 0
}

// result is one run's figures.
type result struct {
	saves      float64 // per second
	p50, p99   time.Duration
	cpuUS      float64       // per save
	wbytes     float64       // per save
	syncs      float64       // per second
	perSync    float64       // saves per commit or sync
	entsPerSav float64       // onegroup: entries per Save
	commit, io time.Duration // bbolt: mean commit time, and its write and sync part
}

const header = "engine                                   saves/s      p50      p99  cpu-us   wbytes  syncs/s  per-sync  ents/save  commit(io)"

func (r result) line(name string) string {
	eps := "-"
	if r.entsPerSav > 0 {
		eps = fmt.Sprintf("%.1f", r.entsPerSav)
	}
	ct := "-"
	if r.commit > 0 {
		ct = fmt.Sprintf("%s(%s)", r.commit.Round(10*time.Microsecond), r.io.Round(10*time.Microsecond))
	}
	return fmt.Sprintf("%-38s %9.0f %8s %8s %7.1f %8.0f %8.0f %9.1f %10s  %s", name, r.saves,
		r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.cpuUS, r.wbytes, r.syncs, r.perSync, eps, ct)
}

// median takes the median of each figure separately.
func median(rs []result) result {
	f := func(get func(result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		slices.Sort(vs)
		if len(vs)%2 == 1 {
			return vs[len(vs)/2]
		}
		return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return result{
		saves:      f(func(r result) float64 { return r.saves }),
		p50:        time.Duration(f(func(r result) float64 { return float64(r.p50) })),
		p99:        time.Duration(f(func(r result) float64 { return float64(r.p99) })),
		cpuUS:      f(func(r result) float64 { return r.cpuUS }),
		wbytes:     f(func(r result) float64 { return r.wbytes }),
		syncs:      f(func(r result) float64 { return r.syncs }),
		perSync:    f(func(r result) float64 { return r.perSync }),
		entsPerSav: f(func(r result) float64 { return r.entsPerSav }),
		commit:     time.Duration(f(func(r result) float64 { return float64(r.commit) })),
		io:         time.Duration(f(func(r result) float64 { return float64(r.io) })),
	}
}

// engine is one data dir's storage, seen by the workloads: a group's log
// that takes an append (entries and hard state) and returns once durable.
type engine interface {
	group(id uint64) (groupLog, error)
	// syncs returns the syncs (bbolt: 2 per commit) and the commits (bbolt)
	// or syncs (Pebble) so far, and bbolt's total commit time and its
	// write-and-sync part (Pebble: 0).
	syncs() (syncs, commits uint64, commitTime, ioTime time.Duration)
	close() error
}

type groupLog interface {
	save(hs *raftpb.HardState, ents []*raftpb.Entry) error
}

func openEngine(dir, name string) (engine, error) {
	if name == "bbolt" {
		e, err := storage.OpenEngine(dir, storage.EngineOptions{})
		if err != nil {
			return nil, err
		}
		return &boltEngine{e: e}, nil
	}
	n := new(atomic.Uint64)
	db, err := pebble.Open(dir, &pebble.Options{
		FS:           countingFS{FS: vfs.Default, n: n},
		Logger:       quietLogger{},
		MemTableSize: uint64(*memtable),
	})
	if err != nil {
		return nil, err
	}
	return &pebbleEngine{db: db, n: n}, nil
}

type boltEngine struct{ e *storage.Engine }

func (b *boltEngine) group(id uint64) (groupLog, error) {
	s, err := b.e.Group(id, storage.GroupOptions{})
	if err != nil {
		return nil, err
	}
	return boltGroup{s}, nil
}

func (b *boltEngine) syncs() (uint64, uint64, time.Duration, time.Duration) {
	m := b.e.Metrics()
	return 2 * m.Commits, m.Commits, m.CommitDuration.Sum, m.SyncDuration.Sum
}

func (b *boltEngine) close() error { return b.e.Close() }

type boltGroup struct{ s *storage.Store }

func (g boltGroup) save(hs *raftpb.HardState, ents []*raftpb.Entry) error {
	return g.s.Save(hs, ents, nil)
}

type pebbleEngine struct {
	db *pebble.DB
	n  *atomic.Uint64
}

func (p *pebbleEngine) group(id uint64) (groupLog, error) {
	return &pebbleGroup{db: p.db, id: id}, nil
}

func (p *pebbleEngine) syncs() (uint64, uint64, time.Duration, time.Duration) {
	n := p.n.Load()
	return n, n, 0, 0
}

func (p *pebbleEngine) close() error { return p.db.Close() }

type pebbleGroup struct {
	db  *pebble.DB
	id  uint64
	buf []byte
}

// logKey is group (8 bytes, big-endian), 'l', index (8 bytes, big-endian);
// the hard state's key is group, 'h'.
func logKey(buf []byte, group, index uint64) []byte {
	buf = binary.BigEndian.AppendUint64(buf, group)
	buf = append(buf, 'l')
	return binary.BigEndian.AppendUint64(buf, index)
}

func hardStateKey(buf []byte, group uint64) []byte {
	return append(binary.BigEndian.AppendUint64(buf, group), 'h')
}

func (g *pebbleGroup) save(hs *raftpb.HardState, ents []*raftpb.Entry) error {
	b := g.db.NewBatch()
	defer b.Close()
	if err := fillBatch(b, g.buf[:0], g.id, hs, ents); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// fillBatch puts ents and hs of group into b. The batch copies keys and
// values, so buf is only scratch.
func fillBatch(b *pebble.Batch, buf []byte, group uint64, hs *raftpb.HardState, ents []*raftpb.Entry) error {
	var err error
	for _, e := range ents {
		buf = logKey(buf[:0], group, e.GetIndex())
		n := len(buf)
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, e); err != nil {
			return err
		}
		if err := b.Set(buf[:n], buf[n:], nil); err != nil {
			return err
		}
	}
	buf = hardStateKey(buf[:0], group)
	n := len(buf)
	if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf, hs); err != nil {
		return err
	}
	return b.Set(buf[:n], buf[n:], nil)
}

// quietLogger drops Pebble's informational lines ("Found 0 WALs") and
// keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) { pebble.DefaultLogger.Errorf(format, args...) }

func (quietLogger) Fatalf(format string, args ...any) { pebble.DefaultLogger.Fatalf(format, args...) }

// countingFS counts the syncs of every file Pebble opens through it.
type countingFS struct {
	vfs.FS
	n *atomic.Uint64
}

func (fs countingFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, n: fs.n}, nil
}

func (fs countingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs countingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.Open(name, opts...))
}

func (fs countingFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs countingFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.FS.OpenDir(name)) }

func (fs countingFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

type countingFile struct {
	vfs.File
	n *atomic.Uint64
}

func (f countingFile) Sync() error {
	f.n.Add(1)
	return f.File.Sync()
}

func (f countingFile) SyncData() error {
	f.n.Add(1)
	return f.File.SyncData()
}

func (f countingFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if full {
		f.n.Add(1)
	}
	return full, err
}

// window is a run's measured time: a sample counts if its operation started
// and ended inside it.
type window struct {
	phase atomic.Int32 // 0 warm-up, 1 measuring, 2 stopped
}

func (w *window) measuring() bool { return w.phase.Load() == 1 }
func (w *window) stopped() bool   { return w.phase.Load() == 2 }

// counters are the process's and the engine's counts at one moment.
type counters struct {
	at             time.Time
	cpu            time.Duration
	wbytes         int64
	syncs, commits uint64
	commitTime     time.Duration
	ioTime         time.Duration
}

func snapshot(e engine) counters {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	s, c, ct, io := e.syncs()
	return counters{
		at:         time.Now(),
		cpu:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		wbytes:     writeBytes(),
		syncs:      s,
		commits:    c,
		commitTime: ct,
		ioTime:     io,
	}
}

// writeBytes reads write_bytes from /proc/self/io (-1 if unreadable).
func writeBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "write_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// measure runs the warm-up and the measured window while the load runs, and
// returns the counters at its start and end. stop ends the load and waits
// for it.
func measure(e engine, w *window, stop func()) (before, after counters) {
	time.Sleep(*warmup)
	before = snapshot(e)
	w.phase.Store(1)
	time.Sleep(*duration)
	w.phase.Store(2)
	after = snapshot(e)
	stop()
	return before, after
}

func summarize(before, after counters, lat []time.Duration, saves int) result {
	secs := after.at.Sub(before.at).Seconds()
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	r := result{saves: float64(len(lat)) / secs, p50: pct(0.50), p99: pct(0.99)}
	if len(lat) > 0 {
		r.cpuUS = float64((after.cpu - before.cpu).Microseconds()) / float64(len(lat))
		r.wbytes = float64(after.wbytes-before.wbytes) / float64(len(lat))
	}
	r.syncs = float64(after.syncs-before.syncs) / secs
	if c := after.commits - before.commits; c > 0 {
		r.perSync = float64(saves) / float64(c)
		r.commit = (after.commitTime - before.commitTime) / time.Duration(c)
		r.io = (after.ioTime - before.ioTime) / time.Duration(c)
	}
	return r
}

func entry(index uint64, data []byte) *raftpb.Entry {
	return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(1),
		Type: raftpb.EntryNormal.Enum(), Data: data}
}

func hardState(commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(commit)}
}

// openGroups opens groups 1..n, a few at a time (bbolt creates a new group's
// buckets in a commit: concurrent opens share commits).
func openGroups(e engine, n int) ([]groupLog, error) {
	logs := make([]groupLog, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range logs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			logs[i], errs[i] = e.group(uint64(i + 1))
		}()
	}
	wg.Wait()
	return logs, errors.Join(errs...)
}

// runGroups runs the groups workload: g groups, w writers.
func runGroups(dir, name string, g, w int) (res result, err error) {
	e, err := openEngine(dir, name)
	if err != nil {
		return result{}, err
	}
	defer func() {
		if cerr := e.close(); err == nil {
			err = cerr
		}
	}()
	logs, err := openGroups(e, g)
	if err != nil {
		return result{}, err
	}
	data := bytes.Repeat([]byte{'d'}, *entrySize)
	var win window
	lats := make([][]time.Duration, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for wi := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []groupLog
			for gi := wi; gi < g; gi += w {
				mine = append(mine, logs[gi])
			}
			next := make([]uint64, len(mine))
			for i := 0; !win.stopped(); i = (i + 1) % len(mine) {
				next[i]++
				idx := next[i]
				in := win.measuring()
				start := time.Now()
				if err := mine[i].save(hardState(idx-1), []*raftpb.Entry{entry(idx, data)}); err != nil {
					errs[wi] = err
					return
				}
				if in && win.measuring() {
					lats[wi] = append(lats[wi], time.Since(start))
				}
			}
		}()
	}
	before, after := measure(e, &win, wg.Wait)
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	lat := slices.Concat(lats...)
	return summarize(before, after, lat, len(lat)), nil
}

// proposal is one proposer's entry waiting for the group's loop.
type proposal struct {
	done chan struct{}
}

// runOneGroup runs the one-group workload: p proposers on one group, their
// entries saved by the group's loop in batches (bbolt, pebble), or by each
// proposer in its own synced batch (pebble-direct).
func runOneGroup(dir, name string, p int) (res result, err error) {
	ename := name
	if name == "pebble-direct" {
		ename = "pebble"
	}
	e, err := openEngine(dir, ename)
	if err != nil {
		return result{}, err
	}
	defer func() {
		if cerr := e.close(); err == nil {
			err = cerr
		}
	}()
	gl, err := e.group(1)
	if err != nil {
		return result{}, err
	}
	data := bytes.Repeat([]byte{'d'}, *entrySize)
	var win window
	lats := make([][]time.Duration, p)
	var (
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	var saves atomic.Uint64 // Saves (loop) completed while measuring
	var wg sync.WaitGroup

	var propose func() bool // returns false once the load is to stop
	if name == "pebble-direct" {
		db := e.(*pebbleEngine).db
		var mu sync.Mutex
		var last uint64
		propose = func() bool {
			mu.Lock()
			last++
			idx := last
			mu.Unlock()
			b := db.NewBatch()
			defer b.Close()
			if err := fillBatch(b, nil, 1, hardState(idx-1), []*raftpb.Entry{entry(idx, data)}); err != nil {
				fail(err)
				return false
			}
			if err := b.Commit(pebble.Sync); err != nil {
				fail(err)
				return false
			}
			if win.measuring() {
				saves.Add(1)
			}
			return true
		}
	} else {
		var (
			mu      sync.Mutex
			queue   []*proposal
			wake    = make(chan struct{}, 1)
			stopped = make(chan struct{})
		)
		loopDone := make(chan struct{})
		go func() { // the group's loop
			defer close(loopDone)
			var last uint64
			for {
				select {
				case <-wake:
				case <-stopped:
					return
				}
				mu.Lock()
				batch := queue
				queue = nil
				mu.Unlock()
				if len(batch) == 0 {
					continue
				}
				ents := make([]*raftpb.Entry, len(batch))
				for i := range batch {
					ents[i] = entry(last+1+uint64(i), data)
				}
				if err := gl.save(hardState(last), ents); err != nil {
					fail(err) // the proposers see it and stop
				} else {
					last += uint64(len(batch))
					if win.measuring() {
						saves.Add(1)
					}
				}
				for _, pr := range batch {
					close(pr.done)
				}
			}
		}()
		defer func() {
			close(stopped)
			<-loopDone
		}()
		propose = func() bool {
			pr := &proposal{done: make(chan struct{})}
			mu.Lock()
			queue = append(queue, pr)
			mu.Unlock()
			select {
			case wake <- struct{}{}:
			default:
			}
			<-pr.done
			errMu.Lock()
			defer errMu.Unlock()
			return firstErr == nil
		}
	}
	for pi := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !win.stopped() {
				in := win.measuring()
				start := time.Now()
				if !propose() {
					return
				}
				if in && win.measuring() {
					lats[pi] = append(lats[pi], time.Since(start))
				}
			}
		}()
	}
	before, after := measure(e, &win, wg.Wait)
	if firstErr != nil {
		return result{}, firstErr
	}
	lat := slices.Concat(lats...)
	// per-sync counts proposals per commit or sync; ents/save, entries per
	// Save of the group's loop (pebble-direct: one).
	r := summarize(before, after, lat, len(lat))
	if s := saves.Load(); s > 0 {
		r.entsPerSav = float64(len(lat)) / float64(s)
	}
	return r, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
