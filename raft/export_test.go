package raft

// ErrSnapshotSuperseded is errSnapshotSuperseded, for the external tests.
var ErrSnapshotSuperseded = errSnapshotSuperseded
