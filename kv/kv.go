// Package kv is the example state machine a host starts from: a key-value
// map that implements raft.StateMachine with put, delete and
// compare-and-swap commands (encoded by Put, Delete and CAS, the bytes a
// host hands to raft.Node.Propose), lookups by key (the query of
// raft.Node.Read and StaleRead is the key; a missing key reads as empty),
// and snapshots that copy the map at once and are written while applying
// continues. The examples, the example server and the library's own tests
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
	"io"
	"maps"
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

func encode(op byte, key, value, prev string) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen32+len(key)+len(value)+len(prev))
	b = append(b, op)
	for _, s := range []string{key, value, prev} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decode(b []byte) (op byte, key, value, prev string, err error) {
	if len(b) == 0 {
		return 0, "", "", "", ErrBadCommand
	}
	op, b = b[0], b[1:]
	var parts [3]string
	for i := range parts {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return 0, "", "", "", ErrBadCommand
		}
		parts[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	return op, parts[0], parts[1], parts[2], nil
}

// Store is the state machine. The zero value is not usable; call New.
type Store struct {
	mu   sync.RWMutex
	data map[string]string
	// Applied counts applied commands, for tests.
	applied uint64
}

// New returns an empty store.
func New() *Store { return &Store{data: make(map[string]string)} }

var _ raft.StateMachine = (*Store)(nil)

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
			s.data[key] = value
		case opDelete:
			delete(s.data, key)
		case opCAS:
			if s.data[key] != prev {
				results[i] = raft.Result{Value: []byte(s.data[key]), Err: ErrCompareFailed}
				continue
			}
			s.data[key] = value
		default:
			results[i] = raft.Result{Err: ErrBadCommand}
		}
	}
}

// Lookup implements raft.StateMachine: the query is a key, the answer its
// value (empty if missing).
func (s *Store) Lookup(query []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return []byte(s.data[string(query)]), nil
}

// Get returns key's value and whether it exists (a stale local read).
func (s *Store) Get(key string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.data[key]
	return v, ok
}

// Len returns the number of keys.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.data)
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
	return maps.Clone(s.data)
}

// Snapshot implements raft.StateMachine: it copies the map (under the read
// lock) and writes the copy later.
func (s *Store) Snapshot() (raft.Snapshot, error) {
	return snapshot(s.Clone()), nil
}

type snapshot map[string]string

func (m snapshot) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(m)))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	for k, v := range m {
		b = b[:0]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func (snapshot) Release() {}

// Restore implements raft.StateMachine.
func (s *Store) Restore(r io.Reader) error {
	br := bufio.NewReader(r)
	n, err := binary.ReadUvarint(br)
	if err == io.EOF {
		n, err = 0, nil // an empty snapshot: an empty store
	}
	if err != nil {
		return fmt.Errorf("kv: restore: %w", err)
	}
	data := make(map[string]string)
	readStr := func() (string, error) {
		l, err := binary.ReadUvarint(br)
		if err != nil {
			return "", err
		}
		if l > 1<<30 {
			return "", fmt.Errorf("string of %d bytes", l)
		}
		b := make([]byte, l)
		_, err = io.ReadFull(br, b)
		return string(b), err
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
		data[k] = v
	}
	s.mu.Lock()
	s.data = data
	s.applied = 0
	s.mu.Unlock()
	return nil
}
