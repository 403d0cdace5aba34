package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// errBadCommand is an Update's answer to bytes that do not decode as a put.
var errBadCommand = errors.New("dbload: bad command")

// Operations, as in understudy's kv package (kv.Put's encoding).
const opPut byte = 1

// put encodes a command that sets key to value, byte for byte as
// understudy's kv.Put: the op, then key, value and an empty previous value,
// each a uvarint length and the bytes.
func put(key, value string) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen32+len(key)+len(value))
	b = append(b, opPut)
	for _, s := range []string{key, value, ""} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// decodePut returns the key and value of a put.
func decodePut(b []byte) (key, value string, err error) {
	if len(b) == 0 || b[0] != opPut {
		return "", "", errBadCommand
	}
	b = b[1:]
	var parts [3]string
	for i := range parts {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", "", errBadCommand
		}
		parts[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	return parts[0], parts[1], nil
}

// store is the benchmark's state machine: a key-value map in memory, a
// dragonboat IStateMachine (the regular, in-memory kind), the match of
// understudy's kv.Store, which is a map in memory too (understudy's bbolt or
// Pebble engine holds the raft log, not the state). Dragonboat calls Update
// once per entry and never concurrently with SaveSnapshot or
// RecoverFromSnapshot; the mutex only guards Lookup.
type store struct {
	mu sync.RWMutex
	m  map[string]string
}

var _ sm.IStateMachine = (*store)(nil)

// newStore is the sm.CreateStateMachineFunc of every replica.
func newStore(shardID, replicaID uint64) sm.IStateMachine {
	return &store{m: make(map[string]string)}
}

// Update applies one put. A command that does not decode is answered with
// Value 0 and no error (an error would stop the replica), as kv answers
// ErrBadCommand in the result; a put's Value is 1.
func (s *store) Update(e sm.Entry) (sm.Result, error) {
	key, value, err := decodePut(e.Cmd)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		return sm.Result{Value: 0}, nil
	}
	s.m[key] = value
	return sm.Result{Value: 1}, nil
}

// Lookup returns the value of key (a string), "" if missing.
func (s *store) Lookup(q any) (any, error) {
	key, ok := q.(string)
	if !ok {
		return nil, fmt.Errorf("dbload: lookup of %T, want a string key", q)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[key], nil
}

// SaveSnapshot writes every key and value, each a uvarint length and the
// bytes, after their count. Dragonboat calls it between Updates.
func (s *store) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	bw := bufio.NewWriter(w)
	var buf [binary.MaxVarintLen64]byte
	writeString := func(v string) error {
		if _, err := bw.Write(buf[:binary.PutUvarint(buf[:], uint64(len(v)))]); err != nil {
			return err
		}
		_, err := bw.WriteString(v)
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, err := bw.Write(buf[:binary.PutUvarint(buf[:], uint64(len(s.m)))]); err != nil {
		return err
	}
	for k, v := range s.m {
		if err := writeString(k); err != nil {
			return err
		}
		if err := writeString(v); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// RecoverFromSnapshot replaces the map with the one SaveSnapshot wrote.
func (s *store) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	br := bufio.NewReader(r)
	readString := func() (string, error) {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return "", err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", err
		}
		return string(b), nil
	}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("dbload: snapshot: %w", err)
	}
	m := make(map[string]string, n)
	for range n {
		k, err := readString()
		if err != nil {
			return fmt.Errorf("dbload: snapshot: %w", err)
		}
		v, err := readString()
		if err != nil {
			return fmt.Errorf("dbload: snapshot: %w", err)
		}
		m[k] = v
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	return nil
}

// Close does nothing: the state is in memory.
func (s *store) Close() error { return nil }
