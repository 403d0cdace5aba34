package raft

import "io"

// ErrSnapshotSuperseded is errSnapshotSuperseded, for the external tests.
var ErrSnapshotSuperseded = errSnapshotSuperseded

// SnapshotSessions returns the client sessions in a snapshot's data (read
// from r), in their canonical encoding: two members hold the same sessions
// if and only if the bytes are equal.
func SnapshotSessions(r io.Reader) ([]byte, error) {
	h, err := readSnapHeader(r)
	if err != nil {
		return nil, err
	}
	return h.sessions, nil
}
