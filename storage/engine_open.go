package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Opening a data dir: the backend it holds, its lock, the format checks.

// OpenEngine opens (creating it if needed) the data dir dir for many groups.
// It takes the data dir's lock, checks the bbolt file (its page structure
// unless opts.NoOpenCheck, its format version, and that it holds only the
// buckets and keys this format writes), removes the temporary files that
// interrupted snapshot writes left (no group runs yet, so every group's go),
// Open the groups with Group.
//
// It returns an error wrapping ErrLocked if another process or Engine holds
// dir, ErrVersion for a newer format, and ErrCorrupt (a *CorruptError naming
// the file) when the file fails a check. On error nothing stays open.
func OpenEngine(dir string, opts EngineOptions) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	e := &Engine{
		dir:     dir,
		dbPath:  filepath.Join(dir, dbFileName),
		snapDir: filepath.Join(dir, snapDirName),
		opts:    opts,
		log:     opts.Logger,
		groups:  map[uint64]*Store{},
		closed:  make(chan struct{}),
	}
	if opts.TailCacheBytes > 0 {
		e.tails = &tailBudget{max: opts.TailCacheBytes}
	}
	if err := os.MkdirAll(e.snapDir, 0o750); err != nil {
		return nil, fmt.Errorf("storage: create data dir: %w", err)
	}
	// The bbolt file is always there: it holds the records (BackendBolt),
	// or only a marker saying they are in the Pebble database. Either way
	// it is the data dir's lock, and a release that knows only bbolt
	// refuses a Pebble data dir with ErrVersion instead of starting afresh
	// beside it.
	db, file, err := openBolt(e.dbPath, opts)
	if err != nil {
		return nil, err
	}
	e.db, e.file = db, file
	if !opts.NoOpenCheck {
		if err := checkBoltStructure(file); err != nil {
			_ = e.closeDB()
			return nil, &CorruptError{File: e.dbPath, Detail: "damaged page structure", Err: err}
		}
	}
	mark, err := e.chooseBackend()
	if err != nil {
		_ = e.closeDB()
		return nil, err
	}
	if e.opts.Backend == BackendPebble {
		path := filepath.Join(dir, pebbleDirName)
		if e.pdb, err = openPebble(path, opts, e.log); err != nil {
			_ = e.closeDB()
			return nil, err
		}
		e.dbPath = path
		if mark {
			if err := e.writePebbleMarker(); err != nil {
				_ = e.closeDB()
				return nil, err
			}
		}
	}
	if err := e.check(); err != nil {
		_ = e.closeDB()
		return nil, err
	}
	if err := e.removeTempSnapshots(); err != nil {
		_ = e.closeDB()
		return nil, err
	}
	e.startCommitter()
	e.log.Debug("storage engine opened", "dir", dir)
	return e, nil
}

// formatVersionPebbleMarker, the format version in the bbolt file of a
// Pebble data dir, says that the records are in the Pebble database (whose
// own meta bucket holds their format version). It is above every version a
// release that knows only bbolt reads, so such a release refuses a Pebble
// data dir with ErrVersion instead of starting afresh beside its records;
// it is far above the bbolt format's versions, which future formats raise
// one at a time.
const formatVersionPebbleMarker = 100

// chooseBackend sets e.opts.Backend to the data dir's, from its bbolt file
// (open in e.db) and its Pebble directory, and reports whether the marker
// of a Pebble data dir is still to be written (a new one, or one whose
// creation a crash interrupted after Pebble's directory was made). Asking
// for the other backend than the dir's is ErrBackend.
func (e *Engine) chooseBackend() (mark bool, err error) {
	var marker, empty bool
	err = e.view(func(tx kvTx) error {
		mb := tx.Bucket(metaBucket)
		if mb == nil {
			empty = tx.ForEachBucket(func([]byte, kvBucket) error { return errNotEmpty }) == nil
			return nil
		}
		if v := mb.Get(versionKey); v != nil {
			vs, err := decodeUvarints(v, 1)
			marker = err == nil && vs[0] == formatVersionPebbleMarker
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	pebbleDir := filepath.Join(e.dir, pebbleDirName)
	_, serr := os.Stat(pebbleDir)
	hasPebble := serr == nil
	if serr != nil && !errors.Is(serr, os.ErrNotExist) {
		return false, fmt.Errorf("storage: open %s: %w", pebbleDir, serr)
	}
	asked := e.opts.Backend
	switch {
	case marker && !hasPebble:
		return false, e.corrupt("", "the data dir's records are in a Pebble database, and "+pebbleDir+" is missing", nil)
	case marker || (empty && hasPebble):
		if asked == BackendBolt {
			return false, fmt.Errorf("%w: %s holds a Pebble database (%s); open it with Backend %q", ErrBackend, e.dir, pebbleDirName, BackendPebble)
		}
		e.opts.Backend = BackendPebble
		return !marker, nil
	case empty:
		if asked == "" {
			e.opts.Backend = e.opts.NewBackend
			if e.opts.Backend == "" {
				e.opts.Backend = BackendBolt
			}
		}
		return e.opts.Backend == BackendPebble, nil
	case hasPebble:
		return false, e.corrupt("", "the data dir holds both bbolt records and a Pebble database ("+pebbleDir+")", nil)
	}
	if asked == BackendPebble {
		return false, fmt.Errorf("%w: %s holds a bbolt file (%s); open it with Backend %q", ErrBackend, e.dir, dbFileName, BackendBolt)
	}
	e.opts.Backend = BackendBolt
	return false, nil
}

// writePebbleMarker records in the bbolt file that the data dir's records
// are in the Pebble database (formatVersionPebbleMarker). It runs at
// OpenEngine, after Pebble created its directory.
func (e *Engine) writePebbleMarker() error {
	err := e.db.Update(func(tx *bolt.Tx) error {
		mb, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return mb.Put(versionKey, appendUvarints(nil, formatVersionPebbleMarker))
	})
	if err != nil {
		return fmt.Errorf("storage: mark %s as a Pebble data dir: %w", e.dir, err)
	}
	return nil
}

// openBolt opens the bbolt file, turning a held lock into ErrLocked and a
// bad file (including a bbolt panic) into a *CorruptError.
func openBolt(path string, opts EngineOptions) (db *bolt.DB, file *os.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			if file != nil { // release the flock bbolt took
				_ = unlockFile(file)
				_ = file.Close()
			}
			db, file, err = nil, nil, &CorruptError{File: path, Detail: fmt.Sprintf("bbolt panicked while opening: %v", r)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	timeout := opts.LockTimeout
	if timeout == 0 {
		timeout = time.Nanosecond // bbolt's 0 waits forever
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      timeout,
		NoSync:       opts.NoSync,
		FreelistType: bolt.FreelistMapType,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	switch {
	case err == nil:
		return db, file, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, nil, fmt.Errorf("%w: %s", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, nil, &CorruptError{File: path, Detail: "bbolt cannot open it", Err: err}
	default:
		return nil, nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
}

// check checks the format version and the names of every bucket and key in
// the file. A file without the format version must be empty (a new one).
func (e *Engine) check() error {
	return e.view(func(tx kvTx) error {
		mb := tx.Bucket(metaBucket)
		if mb == nil {
			if err := tx.ForEachBucket(func([]byte, kvBucket) error { return errNotEmpty }); err != nil {
				return e.corrupt(string(metaBucket), "missing format version in a non-empty file", nil)
			}
			return nil
		}
		version, err := e.readVersion(mb, FormatVersion)
		if err != nil {
			return err
		}
		if version >= formatVersionLazyBounds {
			if e.pdb == nil {
				return e.corrupt(string(metaBucket)+"/"+string(versionKey), fmt.Sprintf("format version %d is a Pebble database's, in a bbolt file", version), nil)
			}
			e.lazyBounds.Store(true)
		}
		return e.checkNames(tx)
	})
}

// readVersion reads the format version in mb and checks that a reader of
// versions up to newest knows it.
func (e *Engine) readVersion(mb kvBucket, newest uint64) (uint64, error) {
	v := mb.Get(versionKey)
	if v == nil {
		return 0, e.corrupt(string(metaBucket)+"/"+string(versionKey), "missing format version", nil)
	}
	vs, err := decodeUvarints(v, 1)
	if err != nil {
		return 0, e.corrupt(string(metaBucket)+"/"+string(versionKey), "", err)
	}
	if vs[0] < formatVersionOneGroup || vs[0] > newest {
		return 0, fmt.Errorf("%w: %s has format version %d, this code reads %d to %d",
			ErrVersion, e.dbPath, vs[0], formatVersionOneGroup, newest)
	}
	return vs[0], nil
}

var errNotEmpty = errors.New("not empty")

// checkNames checks that the file holds only the buckets and keys this
// format writes, for every group. bbolt has no page checksums, so a damaged
// key would otherwise make a record (the hard state, say) silently
// disappear.
func (e *Engine) checkNames(tx kvTx) error {
	err := tx.ForEachBucket(func(name []byte, b kvBucket) error {
		if string(name) == string(metaBucket) {
			return checkKeys(b, versionKey)
		}
		switch _, kind, ok := parseGroupBucket(name); {
		case ok && kind == "state":
			return checkKeys(b, hardStateKey, snapshotKey, boundsKey, identityKey, removedKey)
		case ok && kind == "log":
			return nil
		}
		return fmt.Errorf("unknown bucket %q", name)
	})
	if err != nil {
		return e.corrupt("", "", err)
	}
	return nil
}

func checkKeys(b kvBucket, known ...[]byte) error {
	return b.ForEach(func(k, _ []byte) error {
		for _, kk := range known {
			if string(k) == string(kk) {
				return nil
			}
		}
		return fmt.Errorf("unknown key %q", k)
	})
}
