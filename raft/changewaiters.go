package raft

import "sync"

// The waiters of membership changes: a change's caller waits on one until
// the change is applied, dropped, or its term or deadline passes.

// ChangeResult is the outcome of an accepted membership change.
type ChangeResult struct {
	// Index is the log index at which the change was applied (for a joint
	// change: at which the joint configuration was left). 0 for a dry run.
	// A member that a joint change removes (Replace of the leader that was
	// asked) and that learns its removal from the others before it applies
	// the leave gives the index at which the joint configuration was
	// entered: the leave's is not known there.
	Index uint64
	// Description is the plan in words, with the transition drawn, e.g.
	// "promote 4 5: (1 2 3)&&() → (1 2 3 4 5)&&(1 2 3) → (1 2 3 4 5)".
	Description string
}

// changeResult is delivered to a waiting membership change.
type changeResult struct {
	index uint64
	err   error
}

// changeWaiter is one membership change waiting to be applied.
type changeWaiter struct {
	term uint64 // the term it was proposed in
	tick uint64 // the loop's tick when it was proposed
	// entered: the change entered a joint configuration, and this member
	// applied that. Its outcome no longer depends on who leads: raft leaves
	// a joint configuration only towards its incoming half, and whoever
	// leads next leaves it (handOffBeforeLeave even hands leadership over
	// for that). A leader change does not fail it; applying the leave
	// resolves it.
	entered bool
	// enteredAt is the index of the entry that entered it.
	enteredAt uint64
	done      chan changeResult
}

// changeSet holds the membership changes proposed by this member (as
// leader) until they are applied or fail; keyed by change ID.
type changeSet struct {
	mu sync.Mutex
	m  map[uint64]*changeWaiter
}

func (s *changeSet) add(id uint64, w *changeWaiter) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[uint64]*changeWaiter)
	}
	s.m[id] = w
	s.mu.Unlock()
}

// remove forgets change id without telling its waiter (whose caller gets
// the error another way).
func (s *changeSet) remove(id uint64) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

func (s *changeSet) resolve(id uint64, r changeResult) {
	s.mu.Lock()
	w, ok := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	if ok {
		w.done <- r
	}
}

// enter records that change id entered its joint configuration here, at
// index.
func (s *changeSet) enter(id, index uint64) {
	s.mu.Lock()
	if w, ok := s.m[id]; ok {
		w.entered, w.enteredAt = true, index
	}
	s.mu.Unlock()
}

// resolveEntered answers the changes that entered their joint configuration
// as done, for a member that learned from the others that it was removed
// (before applying the leave): a member of a joint configuration is removed
// only by its leave or a later change, so the joint configuration was left;
// the leave's index is not known here, the one that entered it is given.
func (s *changeSet) resolveEntered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.m {
		if w.entered {
			delete(s.m, id)
			w.done <- changeResult{index: w.enteredAt}
		}
	}
}

// failOlder fails the changes proposed in a term before term, but those
// that entered their joint configuration: the next leader leaves it.
func (s *changeSet) failOlder(term uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.m {
		if w.term < term && !w.entered {
			delete(s.m, id)
			w.done <- changeResult{err: err}
		}
	}
}

// failExpired fails the changes proposed at or before tick.
func (s *changeSet) failExpired(tick uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.m {
		if w.tick <= tick {
			delete(s.m, id)
			w.done <- changeResult{err: err}
		}
	}
}

func (s *changeSet) failAll(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range s.m {
		delete(s.m, id)
		w.done <- changeResult{err: err}
	}
}
