package raft

import "io"

// StateMachine is the host application's replicated state. The Node calls it
// with these rules:
//
//   - Apply, Snapshot and Restore are called from one goroutine (the apply
//     goroutine), never concurrently with each other.
//   - Lookup may be called from any goroutine, concurrently with Apply and with
//     other Lookups: the host synchronizes its own reads and writes (a
//     sync.RWMutex is the usual choice).
//   - Apply must be deterministic: the same commands in the same order give
//     the same state and results on every member. No clocks, no randomness, no
//     reads of local files or the network.
//   - The Node owns the byte slices it passes in; the host must copy what it
//     keeps beyond the call.
//   - A panic in any of its calls — Apply, Lookup, Snapshot, Restore, and a
//     Snapshot's Write and Release — stops this node with a *FatalError
//     (Node.Err) naming the call; the process and the other nodes of the
//     host run on. A Lookup that panicked returns ErrStopped to its caller.
type StateMachine interface {
	// Apply applies committed commands in log order. It must set results[i]
	// for cmds[i] (len(results) == len(cmds)); the result is returned to the
	// caller of Propose on the member that proposed it. An error in a Result
	// is that command's answer (e.g. a failed compare-and-swap) and must be
	// deterministic too. Apply panicking stops the node (Node.Err says why);
	// the entry is never skipped.
	Apply(cmds []Command, results []Result)

	// Lookup answers a read query against the current state.
	Lookup(query []byte) ([]byte, error)

	// Snapshot captures a consistent point-in-time view of the state. It is
	// called between Apply calls and should be quick (copy-on-write, an MVCC
	// revision, or a copy); the returned Snapshot's Write then runs on another
	// goroutine while Apply continues.
	Snapshot() (Snapshot, error)

	// Restore replaces the whole state with the one read from r, as written by
	// a Snapshot's Write (on this or another member). r is not held in memory
	// whole by the Node: read it as a stream.
	Restore(r io.Reader) error
}

// Snapshot is a point-in-time view of the state machine, returned by
// StateMachine.Snapshot.
type Snapshot interface {
	// Write streams the state to w. It may run concurrently with Apply.
	Write(w io.Writer) error
	// Release is called once the snapshot is written (or abandoned).
	Release()
}

// Command is one committed command handed to StateMachine.Apply.
type Command struct {
	// Index is the raft log index of the command.
	Index uint64
	// Data is the command as given to Propose. Do not keep it after Apply returns.
	Data []byte
}

// Result is the state machine's answer to one command.
type Result struct {
	// Value is returned to the proposer.
	Value []byte
	// Err is returned to the proposer as the command's error.
	Err error
}
