package storage

import (
	"errors"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The Store's records live in named buckets of keys, as bbolt has them (see
// the package comment for the layout). kvTx, kvBucket and kvCursor are the
// few bucket operations the Store and the Engine use, so that one Store runs
// on either backend the engine supports: bbolt (the wrappers below: the
// buckets are bbolt's) or Pebble (kv_pebble.go: a bucket is a key prefix). A write
// transaction (the committer's) sees its own writes, as bbolt's does.
//
// Slices a Get or a cursor returns are valid until the transaction ends and,
// for a cursor, until its next move: callers decode (copy) them at once.

// kvTx is a transaction: read-only (Engine.view) or the committer's.
type kvTx interface {
	// Bucket returns the bucket name, or nil if there is none.
	Bucket(name []byte) kvBucket
	// CreateBucket creates bucket name, which must not exist.
	CreateBucket(name []byte) (kvBucket, error)
	// CreateBucketIfNotExists returns bucket name, creating it if needed.
	CreateBucketIfNotExists(name []byte) (kvBucket, error)
	// DeleteBucket deletes bucket name and its keys; errBucketNotFound if
	// there is none.
	DeleteBucket(name []byte) error
	// ForEachBucket calls fn for every bucket, in name order.
	ForEachBucket(fn func(name []byte, b kvBucket) error) error
	// BucketsWithPrefix returns the names of the buckets that begin with
	// prefix, in order, at most limit of them (0: no limit).
	BucketsWithPrefix(prefix []byte, limit int) ([][]byte, error)
}

// kvBucket is a bucket of keys within a transaction.
type kvBucket interface {
	Get(key []byte) []byte
	Put(key, value []byte) error
	Delete(key []byte) error
	Cursor() kvCursor
	ForEach(fn func(k, v []byte) error) error
	// Append tells the backend that keys are only ever appended at the end
	// (bbolt packs the pages full).
	Append()
}

// kvRangeDeleter is a bucket that deletes a range of its keys at once:
// Pebble's (one range tombstone, where point deletions would cost a
// memtable insert and a tombstone to compact each). bbolt's is not: its
// compacted log entries are deleted a few at a time (deleteGarbage).
type kvRangeDeleter interface {
	// DeleteRange deletes the bucket's keys in [from, to).
	DeleteRange(from, to []byte) error
}

// kvCursor iterates a bucket's keys in order; a nil key is the end.
type kvCursor interface {
	First() (k, v []byte)
	Last() (k, v []byte)
	Seek(key []byte) (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
}

var errBucketNotFound = errors.New("bucket not found")

// The bbolt backend: single-pointer structs, so that making an interface
// value of one allocates nothing.

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) kvBucket {
	b := t.tx.Bucket(name)
	if b == nil {
		return nil
	}
	return boltBucket{b}
}

func (t boltTx) CreateBucket(name []byte) (kvBucket, error) {
	b, err := t.tx.CreateBucket(name)
	if err != nil {
		return nil, err
	}
	return boltBucket{b}, nil
}

func (t boltTx) CreateBucketIfNotExists(name []byte) (kvBucket, error) {
	b, err := t.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return boltBucket{b}, nil
}

func (t boltTx) DeleteBucket(name []byte) error {
	err := t.tx.DeleteBucket(name)
	if errors.Is(err, berrors.ErrBucketNotFound) {
		return errBucketNotFound
	}
	return err
}

func (t boltTx) ForEachBucket(fn func(name []byte, b kvBucket) error) error {
	return t.tx.ForEach(func(name []byte, b *bolt.Bucket) error { return fn(name, boltBucket{b}) })
}

func (t boltTx) BucketsWithPrefix(prefix []byte, limit int) ([][]byte, error) {
	var out [][]byte
	c := t.tx.Cursor()
	for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Next() {
		out = append(out, append([]byte(nil), k...))
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

type boltBucket struct{ b *bolt.Bucket }

func (b boltBucket) Get(key []byte) []byte                    { return b.b.Get(key) }
func (b boltBucket) Put(key, value []byte) error              { return b.b.Put(key, value) }
func (b boltBucket) Delete(key []byte) error                  { return b.b.Delete(key) }
func (b boltBucket) Cursor() kvCursor                         { return boltCursor{b.b.Cursor()} }
func (b boltBucket) ForEach(fn func(k, v []byte) error) error { return b.b.ForEach(fn) }
func (b boltBucket) Append()                                  { b.b.FillPercent = 1 }

type boltCursor struct{ c *bolt.Cursor }

func (c boltCursor) First() ([]byte, []byte)          { return c.c.First() }
func (c boltCursor) Last() ([]byte, []byte)           { return c.c.Last() }
func (c boltCursor) Seek(key []byte) ([]byte, []byte) { return c.c.Seek(key) }
func (c boltCursor) Next() ([]byte, []byte)           { return c.c.Next() }
func (c boltCursor) Prev() ([]byte, []byte)           { return c.c.Prev() }

func hasPrefix(b, prefix []byte) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == string(prefix)
}
