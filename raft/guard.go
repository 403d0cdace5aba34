package raft

import (
	"errors"
	"fmt"
	"io"
)

// Every call into the host's StateMachine (and its Snapshot) goes through
// these guards: a panic there stops the node it belongs to with a
// FatalError (Node.Err), never the process and never another node of the
// host. Apply's is in flushCommands.

// smPanic is a state machine's panic, as an error.
type smPanic struct {
	call string
	v    any
}

func (p *smPanic) Error() string { return fmt.Sprintf("state machine panicked in %s: %v", p.call, p.v) }

// Unwrap returns the panic's value when it is an error.
func (p *smPanic) Unwrap() error {
	if err, ok := p.v.(error); ok {
		return err
	}
	return nil
}

// isPanic reports whether err is a state machine's panic.
func isPanic(err error) bool {
	var p *smPanic
	return errors.As(err, &p)
}

// guard runs f, turning a panic into an *smPanic error.
func guard(call string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &smPanic{call: call, v: r}
		}
	}()
	return f()
}

// lookup is the state machine's Lookup; a panic stops the node and is
// returned as its stop error.
func (n *Node) lookup(query []byte) ([]byte, error) {
	var v []byte
	err := guard("Lookup", func() error {
		var err error
		v, err = n.sm.Lookup(query)
		return err
	})
	if isPanic(err) {
		n.fail("state machine Lookup", err)
		return nil, n.stopErr()
	}
	return v, err
}

// smSnapshot is the state machine's Snapshot (on the apply task).
func (n *Node) smSnapshot() (Snapshot, error) {
	var snap Snapshot
	err := guard("Snapshot", func() error {
		var err error
		snap, err = n.sm.Snapshot()
		return err
	})
	return snap, err
}

// smRestore is the state machine's Restore (on the apply task, or Start).
func (n *Node) smRestore(r io.Reader) error {
	return guard("Restore", func() error { return n.sm.Restore(r) })
}

// writeSnap is a snapshot's Write (on its writer goroutine).
func writeSnap(s Snapshot, w io.Writer) error {
	return guard("Snapshot.Write", func() error { return s.Write(w) })
}

// releaseSnap is a snapshot's Release; a panic stops the node.
func (n *Node) releaseSnap(s Snapshot) {
	if err := guard("Snapshot.Release", func() error { s.Release(); return nil }); err != nil {
		n.fail("state machine snapshot", err)
	}
}
