// Package kv is the example state machine a host starts from: a key-value
// map that implements raft.StateMachine with put, delete and
// compare-and-swap commands (encoded by Put, Delete and CAS, the bytes a
// host hands to raft.Node.Propose, or appended to a buffer the caller reuses
// by AppendPut, AppendDelete and AppendCAS), lookups by key (the query of
// raft.Node.Read and StaleRead is the key; a missing key reads as empty),
// and snapshots that cost no copy when taken and are written while applying
// continues: the map is split in shards, a snapshot freezes them, and the
// first write to a frozen shard copies only that shard (copy-on-write), so
// applying never stalls for a copy of the whole state. The examples, the example server and the library's own tests
// use it; a host with other needs copies it and changes the commands.
//
// Results: a command's result is nil, or ErrCompareFailed for a
// compare-and-swap whose expected value did not match, or ErrBadCommand
// for bytes that do not decode (deterministic on every member, as
// raft.StateMachine requires).
package kv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/understudy-raft/understudy/raft"
)

// ErrCompareFailed is the result of a compare-and-swap whose expected value
// did not match.
var ErrCompareFailed = errors.New("kv: compare failed")

// ErrBadCommand is the result of a command that does not decode.
var ErrBadCommand = errors.New("kv: bad command")

// Operations.
const (
	opPut byte = iota + 1
	opDelete
	opCAS
)

// Put encodes a command that sets key to value.
func Put(key, value string) []byte { return encode(opPut, key, value, "") }

// Delete encodes a command that removes key.
func Delete(key string) []byte { return encode(opDelete, key, "", "") }

// CAS encodes a command that sets key to value if its current value is prev
// ("" matches a missing key); otherwise its result is ErrCompareFailed.
func CAS(key, prev, value string) []byte { return encode(opCAS, key, value, prev) }

// AppendPut appends the command Put(key, string(value)) encodes to b and
// returns the extended slice: a server that reads values as bytes encodes
// them into a buffer it reuses, without a copy into a string or a new
// command per request.
func AppendPut(b []byte, key string, value []byte) []byte {
	return appendCommand(b, opPut, key, value, "")
}

// AppendCAS appends the command CAS(key, prev, string(value)) encodes to b
// and returns the extended slice (see AppendPut).
func AppendCAS(b []byte, key, prev string, value []byte) []byte {
	return appendCommand(b, opCAS, key, value, prev)
}

// AppendDelete appends the command Delete(key) encodes to b and returns the
// extended slice (see AppendPut).
func AppendDelete(b []byte, key string) []byte {
	return appendCommand(b, opDelete, key, "", "")
}

func encode(op byte, key, value, prev string) []byte {
	return appendCommand(make([]byte, 0, commandSize(key, len(value), prev)), op, key, value, prev)
}

// commandSize is an upper bound of a command's encoded size.
func commandSize(key string, value int, prev string) int {
	return 1 + 3*binary.MaxVarintLen64 + len(key) + value + len(prev)
}

// appendCommand appends a command to b: op, then key, value and prev, each
// as its length (uvarint) and its bytes.
func appendCommand[V string | []byte](b []byte, op byte, key string, value V, prev string) []byte {
	b = slices.Grow(b, commandSize(key, len(value), prev))
	b = append(b, op)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	b = append(b, value...)
	b = binary.AppendUvarint(b, uint64(len(prev)))
	return append(b, prev...)
}

// decode decodes a command. key and value share one allocation (the
// command's bytes from the key to the end of the value: the map keeps them
// together, and a later put of the key replaces both, since a map updates
// a string key it overwrites); prev, compared only, aliases b.
func decode(b []byte) (op byte, key, value string, prev []byte, err error) {
	if len(b) == 0 {
		return 0, "", "", nil, ErrBadCommand
	}
	op = b[0]
	var parts [3][2]int // start and end in b
	off := 1
	for i := range parts {
		n, k := binary.Uvarint(b[off:])
		if k <= 0 || n > uint64(len(b)-off-k) {
			return 0, "", "", nil, ErrBadCommand
		}
		off += k
		parts[i] = [2]int{off, off + int(n)}
		off += int(n)
	}
	kv := string(b[parts[0][0]:parts[1][1]])
	key = kv[:parts[0][1]-parts[0][0]]
	value = kv[parts[1][0]-parts[0][0]:]
	return op, key, value, b[parts[2][0]:parts[2][1]], nil
}

// numShards is how many shards the map is split into: a write to a shard a
// snapshot froze copies 1/numShards of the state.
const numShards = 256

// shard is one part of the map. A frozen shard is shared with a snapshot
// and never modified again.
type shard struct {
	m      map[string]string
	frozen bool
}

// Store is the state machine. The zero value is not usable; call New.
type Store struct {
	mu   sync.RWMutex
	seed maphash.Seed
	// shards points to emptyShards until the first write (an idle store of
	// a host's many groups holds no array of its own).
	shards *[numShards]*shard
	n      int // keys
	// Applied counts applied commands, for tests.
	applied uint64
}

// emptyShard is every shard of a new store until its first write: shared,
// frozen, never written (a host of many groups has many idle stores).
var emptyShard = &shard{frozen: true}

// emptyShards is the shards of every new store until its first write.
var emptyShards = func() (a [numShards]*shard) {
	for i := range a {
		a[i] = emptyShard
	}
	return a
}()

// New returns an empty store.
func New() *Store {
	e := &emptyShards
	return &Store{seed: maphash.MakeSeed(), shards: e}
}

var _ raft.StateMachine = (*Store)(nil)

func (s *Store) shardOf(key string) int {
	return int(maphash.String(s.seed, key) % numShards)
}

// read returns key's value (under at least the read lock).
func (s *Store) read(key string) (string, bool) {
	v, ok := s.shards[s.shardOf(key)].m[key]
	return v, ok
}

// writable returns key's shard, copied first if a snapshot froze it (under
// the write lock).
func (s *Store) writable(key string) *shard {
	i := s.shardOf(key)
	if s.shards == &emptyShards {
		own := emptyShards
		s.shards = &own
	}
	sh := s.shards[i]
	if sh.frozen {
		m := maps.Clone(sh.m)
		if m == nil {
			m = make(map[string]string)
		}
		sh = &shard{m: m}
		s.shards[i] = sh
	}
	return sh
}

func (s *Store) put(key, value string) {
	sh := s.writable(key)
	if _, ok := sh.m[key]; !ok {
		s.n++
	}
	sh.m[key] = value
}

func (s *Store) del(key string) {
	if _, ok := s.read(key); !ok {
		return
	}
	delete(s.writable(key).m, key)
	s.n--
}

// Apply implements raft.StateMachine.
func (s *Store) Apply(cmds []raft.Command, results []raft.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range cmds {
		s.applied++
		op, key, value, prev, err := decode(c.Data)
		if err != nil {
			results[i] = raft.Result{Err: err}
			continue
		}
		switch op {
		case opPut:
			s.put(key, value)
		case opDelete:
			s.del(key)
		case opCAS:
			if cur, _ := s.read(key); cur != string(prev) {
				results[i] = raft.Result{Value: []byte(cur), Err: ErrCompareFailed}
				continue
			}
			s.put(key, value)
		default:
			results[i] = raft.Result{Err: ErrBadCommand}
		}
	}
}

// Lookup implements raft.StateMachine: the query is a key, the answer its
// value (empty if missing). It never fails.
func (s *Store) Lookup(query []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, _ := s.read(string(query))
	return []byte(v), nil
}

// Get returns key's value and whether it exists (a stale local read).
func (s *Store) Get(key string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.read(key)
}

// Len returns the number of keys.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.n
}

// Applied returns how many commands were applied since New or Restore.
func (s *Store) Applied() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// Clone returns a copy of the contents.
func (s *Store) Clone() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]string, s.n)
	for _, sh := range s.shards {
		maps.Copy(out, sh.m)
	}
	return out
}

// Snapshot implements raft.StateMachine: it freezes the shards (no copy:
// the next write to a frozen shard copies that shard) and writes them
// later, while applying continues. Taking one never fails; writing it
// returns the writer's error.
func (s *Store) Snapshot() (raft.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &snapshot{n: s.n}
	for i, sh := range s.shards {
		if !sh.frozen { // (emptyShard is shared: never written)
			sh.frozen = true
		}
		snap.shards[i] = sh.m
	}
	return snap, nil
}

// snapshot is a frozen view of the shards.
type snapshot struct {
	n      int
	shards [numShards]map[string]string
}

func (m *snapshot) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	var b []byte
	b = binary.AppendUvarint(b, uint64(m.n))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	for _, sh := range m.shards {
		for k, v := range sh {
			b = b[:0]
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
			if _, err := bw.Write(b); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

func (*snapshot) Release() {}

// Restore implements raft.StateMachine: it replaces the whole state with
// the snapshot read from r.
//
// Errors: an error starting "kv: restore" for a stream that is truncated,
// malformed or fails to read; the state is then left as it was.
func (s *Store) Restore(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	n, err := binary.ReadUvarint(br)
	if err == io.EOF {
		n, err = 0, nil // an empty snapshot: an empty store
	}
	if err != nil {
		return fmt.Errorf("kv: restore: %w", err)
	}
	var shards [numShards]*shard
	for i := range shards {
		shards[i] = emptyShard
	}
	readStr := func() (string, error) {
		l, err := binary.ReadUvarint(br)
		if err != nil {
			return "", err
		}
		if l > 1<<30 {
			return "", fmt.Errorf("string of %d bytes", l)
		}
		// Grow with the bytes that arrive, never by the length a
		// (possibly corrupt) prefix claims; copy straight from the
		// reader's buffer (one allocation and one copy per string).
		var sb strings.Builder
		sb.Grow(int(min(l, 64<<10)))
		for rem := int(l); rem > 0; {
			chunk, err := br.Peek(min(rem, br.Size()))
			if len(chunk) == 0 {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return "", err
			}
			sb.Write(chunk)
			_, _ = br.Discard(len(chunk))
			rem -= len(chunk)
		}
		return sb.String(), nil
	}
	for i := uint64(0); i < n; i++ {
		k, err := readStr()
		if err != nil {
			return fmt.Errorf("kv: restore: %w", err)
		}
		v, err := readStr()
		if err != nil {
			return fmt.Errorf("kv: restore: %w", err)
		}
		i := s.shardOf(k) // the seed never changes: no lock needed
		if shards[i] == emptyShard {
			shards[i] = &shard{m: make(map[string]string)}
		}
		shards[i].m[k] = v
	}
	keys := 0
	for _, sh := range shards {
		keys += len(sh.m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shards, s.n, s.applied = &shards, keys, 0
	return nil
}
