package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The Pebble backend: an LSM whose write-ahead log takes every commit, so
// that a commit costs its bytes and one fsync whatever number of groups it
// carries (bbolt copies a few pages per group touched and syncs twice). The
// engine keeps its committer: one commit (one indexed batch) at a time,
// carrying every group's queued writes.
//
// Buckets become key prefixes:
//
//	'b' name              a bucket (empty value)
//	'k' name 0x00 key     a key of bucket name (bucket names hold no 0x00)
//
// so a bucket's keys are one contiguous range, deleted with one range
// deletion, and the buckets are listed without reading their keys.

// pebbleDirName is the Pebble database inside a data dir.
const pebbleDirName = "pebble"

// pebbleDB is an open Pebble database.
type pebbleDB struct {
	db   *pebble.DB
	path string

	// park: the engine's commits carry many groups' writes
	// (SyncWaitAuto parks the fsyncs while they do; noteGroups sets it).
	park atomic.Bool

	// buckets is the set of buckets committed, kept in memory so that a
	// transaction's Bucket is a map lookup, not a Pebble read (a Save looks
	// up two). Loaded at open; a commit applies its creations and
	// deletions once it is durable. Guarded by mu; commits run one at a
	// time.
	mu      sync.RWMutex
	buckets map[string]struct{}

	// liveIters and peakIters count the iterators open now and at most at
	// once: each pins memory (block buffers, a read state), so opening an
	// engine must not hold one per group.
	liveIters, peakIters atomic.Int64

	// bytesWritten counts the bytes of the batches committed (what the
	// write-ahead log took; EngineMetrics.BytesWritten).
	bytesWritten atomic.Uint64

	// utx is the write transaction update reuses (newUpdateTx).
	utx *pebbleTx
}

// newIter opens an iterator over r between lower and upper, counted.
func (p *pebbleDB) newIter(r pebble.Reader, lower, upper []byte) (*pebble.Iterator, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	live := p.liveIters.Add(1)
	for peak := p.peakIters.Load(); live > peak && !p.peakIters.CompareAndSwap(peak, live); peak = p.peakIters.Load() {
	}
	return it, nil
}

// closeIter closes an iterator newIter opened.
func (p *pebbleDB) closeIter(it *pebble.Iterator) error {
	p.liveIters.Add(-1)
	return it.Close()
}

// openPebble opens (creating it if needed) the Pebble database of a data dir.
func openPebble(path string, opts EngineOptions, log *slog.Logger) (*pebbleDB, error) {
	p := &pebbleDB{path: path, buckets: map[string]struct{}{}}
	po := &pebble.Options{
		Logger:       pebbleLogger{log},
		MemTableSize: 32 << 20,
		FS:           opts.pebbleFS,
	}
	switch {
	case opts.NoSync:
		if po.FS == nil {
			po.FS = vfs.Default
		}
		po.FS = noSyncFS{po.FS}
	case po.FS == nil && opts.SyncWait != SyncWaitBlocking:
		// The disk's own files (a test's file system injects its faults
		// in their syncs: it keeps them).
		fs := parkedSyncFS{FS: vfs.Default}
		if opts.SyncWait == SyncWaitAuto {
			fs.when = &p.park
		}
		po.FS = fs
	}
	db, err := pebble.Open(path, po)
	if errors.Is(err, pebble.ErrCorruption) {
		return nil, &CorruptError{File: path, Detail: "Pebble cannot open it", Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	p.db = db
	it, err := p.newIter(db, []byte{'b'}, []byte{'b' + 1})
	if err == nil {
		for ok := it.First(); ok; ok = it.Next() {
			p.buckets[string(it.Key()[1:])] = struct{}{}
		}
		err = errors.Join(it.Error(), p.closeIter(it))
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("storage: open %s: listing buckets: %w", path, err)
	}
	return p, nil
}

func (p *pebbleDB) close() error {
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", p.path, err)
	}
	return nil
}

// view runs fn over the database's committed state. The Store's locks, not
// a snapshot, keep a reader from keys a concurrent commit changes (see
// Store.mu), as they do with bbolt.
func (p *pebbleDB) view(fn func(kvTx) error) error {
	t := &pebbleTx{p: p, r: p.db}
	return t.finish(fn(t))
}

// update runs fn in an indexed batch (it sees its own writes) and commits it,
// synced unless NoSync. It returns the time the commit took.
func (p *pebbleDB) update(fn func(kvTx) error) (time.Duration, error) {
	b := p.db.NewIndexedBatch()
	defer b.Close()
	t := p.newUpdateTx(b)
	defer t.endUpdate()
	if err := t.finish(fn(t)); err != nil {
		return 0, err
	}
	p.bytesWritten.Add(uint64(len(b.Repr())))
	start := time.Now()
	// Synced with NoSync too: its file system's fsyncs do nothing
	// (noSyncFS), and the commit returns once the WAL record is written.
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if len(t.changed) > 0 {
		p.mu.Lock()
		for name, exists := range t.changed {
			if exists {
				p.buckets[name] = struct{}{}
			} else {
				delete(p.buckets, name)
			}
		}
		p.mu.Unlock()
	}
	return d, nil
}

// newUpdateTx returns the write transaction over b: the one the database
// reuses (updates run one at a time: only the engine's committer makes
// them), with its slabs and key buffer from the previous update.
func (p *pebbleDB) newUpdateTx(b *pebble.Batch) *pebbleTx {
	t := p.utx
	if t == nil {
		t = &pebbleTx{}
		p.utx = t
	}
	*t = pebbleTx{p: p, r: b, b: b, buckets: t.buckets[:0], prefixes: t.prefixes[:0], key: t.key[:0]}
	return t
}

// endUpdate lets go of what the update referenced (its batch, closed after
// it; its buckets): nothing of a transaction outlives it.
func (t *pebbleTx) endUpdate() {
	clear(t.buckets)
	*t = pebbleTx{buckets: t.buckets[:0], prefixes: t.prefixes[:0], key: t.key[:0]}
}

// pebbleTx is a transaction: reads from r (the DB, or the batch, which
// reads through it), writes to b (nil in a view).
type pebbleTx struct {
	p *pebbleDB
	r pebble.Reader
	// changed is the buckets this transaction created (true) or deleted
	// (false), over p.buckets.
	changed map[string]bool
	b       *pebble.Batch
	// iters are the cursors' iterators, open until the transaction ends (a
	// kvCursor has no Close). ForEach, ForEachBucket and BucketsWithPrefix
	// close theirs when they return.
	iters []*pebble.Iterator
	// err is the first read error: a Get or a cursor that failed answers
	// like a missing key, and the transaction returns err (so a failed read
	// never passes for an absent record).
	err error
	// buckets and prefixes are slabs the transaction's buckets and their
	// key prefixes are made from (a commit opens two buckets per group it
	// carries); neither is ever appended past its capacity, so what was
	// handed out stays put. key is the buffer the buckets build keys in:
	// Pebble copies a key before a call returns.
	buckets  []pebbleBucket
	prefixes []byte
	key      []byte
}

// bucket returns a new bucket of name, made from the transaction's slabs.
func (t *pebbleTx) bucket(name []byte) *pebbleBucket {
	if len(t.buckets) == cap(t.buckets) {
		t.buckets = make([]pebbleBucket, 0, 16)
	}
	n := 2 + len(name)
	if cap(t.prefixes)-len(t.prefixes) < n {
		t.prefixes = make([]byte, 0, max(512, n))
	}
	start := len(t.prefixes)
	t.prefixes = append(append(append(t.prefixes, 'k'), name...), 0)
	t.buckets = append(t.buckets, pebbleBucket{t: t, prefix: t.prefixes[start:len(t.prefixes):len(t.prefixes)]})
	return &t.buckets[len(t.buckets)-1]
}

// readErr records a read error of the transaction, and returns it: damaged
// data that Pebble detected (a checksum) as ErrCorrupt, any other failure
// (an I/O error) as itself, wrapped — never as corruption.
func (t *pebbleTx) readErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pebble.ErrCorruption) {
		err = &CorruptError{File: t.p.path, Detail: "Pebble read a damaged block", Err: err}
	}
	err = fmt.Errorf("storage: pebble read in %s: %w", t.p.path, err)
	if t.err == nil {
		t.err = err
	}
	return err
}

// finish closes the transaction's iterators and returns its first error: a
// read's first — fn may have taken the failed read for a missing record and
// called that corruption — then fn's, then closing's.
func (t *pebbleTx) finish(err error) error {
	cerr := t.closeIters()
	if t.err != nil {
		return t.err
	}
	if err == nil {
		err = cerr
	}
	return err
}

var errReadOnly = errors.New("write in a read-only transaction")

func bucketKey(name []byte) []byte {
	k := make([]byte, 0, 1+len(name))
	return append(append(k, 'b'), name...)
}

// dataPrefix returns 'k' name 0x00, the prefix of bucket name's keys.
func dataPrefix(name []byte) []byte {
	k := make([]byte, 0, 2+len(name))
	return append(append(append(k, 'k'), name...), 0)
}

// prefixEnd returns the first key after every key with prefix p (p ends in
// a byte below 0xff, as dataPrefix's and bucketKey's do).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	end[len(end)-1]++
	return end
}

func (t *pebbleTx) get(key []byte) ([]byte, error) {
	v, closer, err := t.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := append(make([]byte, 0, len(v)), v...)
	return out, closer.Close()
}

func (t *pebbleTx) exists(name []byte) bool {
	if e, ok := t.changed[string(name)]; ok {
		return e
	}
	t.p.mu.RLock()
	_, ok := t.p.buckets[string(name)]
	t.p.mu.RUnlock()
	return ok
}

func (t *pebbleTx) change(name []byte, exists bool) {
	if t.changed == nil {
		t.changed = map[string]bool{}
	}
	t.changed[string(name)] = exists
}

func (t *pebbleTx) Bucket(name []byte) kvBucket {
	if !t.exists(name) {
		return nil
	}
	return t.bucket(name)
}

func (t *pebbleTx) CreateBucket(name []byte) (kvBucket, error) {
	if t.b == nil {
		return nil, errReadOnly
	}
	if t.exists(name) {
		return nil, fmt.Errorf("bucket %q exists", name)
	}
	if err := t.b.Set(bucketKey(name), []byte{}, nil); err != nil {
		return nil, err
	}
	t.change(name, true)
	return &pebbleBucket{t: t, prefix: dataPrefix(name)}, nil
}

func (t *pebbleTx) CreateBucketIfNotExists(name []byte) (kvBucket, error) {
	if b := t.Bucket(name); b != nil {
		return b, nil
	}
	return t.CreateBucket(name)
}

func (t *pebbleTx) DeleteBucket(name []byte) error {
	if t.b == nil {
		return errReadOnly
	}
	if !t.exists(name) {
		return errBucketNotFound
	}
	p := dataPrefix(name)
	if err := t.b.DeleteRange(p, prefixEnd(p), nil); err != nil {
		return err
	}
	if err := t.b.Delete(bucketKey(name), nil); err != nil {
		return err
	}
	t.change(name, false)
	return nil
}

func (t *pebbleTx) iter(lower, upper []byte) (*pebble.Iterator, error) {
	it, err := t.p.newIter(t.r, lower, upper)
	if err != nil {
		return nil, err
	}
	t.iters = append(t.iters, it)
	return it, nil
}

func (t *pebbleTx) closeIters() error {
	var first error
	for _, it := range t.iters {
		if err := t.p.closeIter(it); err != nil && first == nil {
			first = err
		}
	}
	t.iters = nil
	return first
}

// scan runs fn over a new iterator between lower and upper and closes it
// when fn returns: a scan holds no iterator past its call (opening a data
// dir scans every group's state bucket in one transaction). A read error is
// recorded (readErr) and returned unless fn's error came first.
func (t *pebbleTx) scan(lower, upper []byte, fn func(it *pebble.Iterator) error) error {
	it, err := t.p.newIter(t.r, lower, upper)
	if err != nil {
		return t.readErr(err)
	}
	err = fn(it)
	rerr := t.readErr(it.Error())
	if cerr := t.p.closeIter(it); rerr == nil {
		rerr = t.readErr(cerr)
	}
	if err == nil {
		err = rerr
	}
	return err
}

func (t *pebbleTx) ForEachBucket(fn func(name []byte, b kvBucket) error) error {
	return t.scan([]byte{'b'}, []byte{'b' + 1}, func(it *pebble.Iterator) error {
		for ok := it.First(); ok; ok = it.Next() {
			name := append([]byte(nil), it.Key()[1:]...)
			if err := fn(name, &pebbleBucket{t: t, prefix: dataPrefix(name)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func (t *pebbleTx) BucketsWithPrefix(prefix []byte, limit int) ([][]byte, error) {
	lower := bucketKey(prefix)
	var out [][]byte
	err := t.scan(lower, []byte{'b' + 1}, func(it *pebble.Iterator) error {
		for ok := it.First(); ok && hasPrefix(it.Key(), lower); ok = it.Next() {
			out = append(out, append([]byte(nil), it.Key()[1:]...))
			if limit > 0 && len(out) == limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// pebbleBucket is a bucket: the keys under prefix.
type pebbleBucket struct {
	t      *pebbleTx
	prefix []byte
}

// key returns the Pebble key of k, in the transaction's key buffer: valid
// until the next call.
func (b *pebbleBucket) key(k []byte) []byte {
	b.t.key = append(append(b.t.key[:0], b.prefix...), k...)
	return b.t.key
}

func (b *pebbleBucket) Get(key []byte) []byte {
	v, err := b.t.get(b.key(key))
	_ = b.t.readErr(err) // the transaction returns it
	return v
}

func (b *pebbleBucket) Put(key, value []byte) error {
	if b.t.b == nil {
		return errReadOnly
	}
	return b.t.b.Set(b.key(key), value, nil)
}

func (b *pebbleBucket) Delete(key []byte) error {
	if b.t.b == nil {
		return errReadOnly
	}
	return b.t.b.Delete(b.key(key), nil)
}

// DeleteRange implements kvRangeDeleter: one range tombstone.
func (b *pebbleBucket) DeleteRange(from, to []byte) error {
	if b.t.b == nil {
		return errReadOnly
	}
	lo := append(append(make([]byte, 0, len(b.prefix)+len(from)), b.prefix...), from...)
	hi := append(append(make([]byte, 0, len(b.prefix)+len(to)), b.prefix...), to...)
	return b.t.b.DeleteRange(lo, hi, nil)
}

func (b *pebbleBucket) Append() {}

func (b *pebbleBucket) Cursor() kvCursor {
	it, err := b.t.iter(b.prefix, prefixEnd(b.prefix))
	return &pebbleCursor{it: it, err: b.t.readErr(err), n: len(b.prefix), b: b}
}

func (b *pebbleBucket) ForEach(fn func(k, v []byte) error) error {
	t := b.t
	return t.scan(b.prefix, prefixEnd(b.prefix), func(it *pebble.Iterator) error {
		n := len(b.prefix)
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				return t.readErr(err)
			}
			if err := fn(it.Key()[n:], v); err != nil {
				return err
			}
		}
		return nil
	})
}

// pebbleCursor is a bucket's iterator; its keys are returned without the
// bucket's prefix.
type pebbleCursor struct {
	it  *pebble.Iterator
	err error
	n   int
	b   *pebbleBucket
	buf []byte
}

func (c *pebbleCursor) at(ok bool) ([]byte, []byte) {
	if !ok {
		_ = c.b.t.readErr(c.it.Error()) // the transaction returns it
		return nil, nil
	}
	v, err := c.it.ValueAndErr()
	if err != nil {
		_ = c.b.t.readErr(err) // the transaction returns it
		return nil, nil
	}
	return c.it.Key()[c.n:], v
}

func (c *pebbleCursor) First() ([]byte, []byte) {
	if c.err != nil {
		return nil, nil
	}
	return c.at(c.it.First())
}

func (c *pebbleCursor) Last() ([]byte, []byte) {
	if c.err != nil {
		return nil, nil
	}
	return c.at(c.it.Last())
}

func (c *pebbleCursor) Seek(key []byte) ([]byte, []byte) {
	if c.err != nil {
		return nil, nil
	}
	c.buf = append(append(c.buf[:0], c.b.prefix...), key...)
	return c.at(c.it.SeekGE(c.buf))
}

func (c *pebbleCursor) Next() ([]byte, []byte) {
	if c.err != nil {
		return nil, nil
	}
	return c.at(c.it.Next())
}

func (c *pebbleCursor) Prev() ([]byte, []byte) {
	if c.err != nil {
		return nil, nil
	}
	return c.at(c.it.Prev())
}

// pebbleLogger sends Pebble's log lines to the engine's logger: its
// informational lines (flushes, compactions) at debug level.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble: fatal: " + msg)
	panic("pebble: " + msg)
}
