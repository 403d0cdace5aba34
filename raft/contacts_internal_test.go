package raft

import (
	"testing"
	"time"
)

// TestContacts: the last-contact list answers by member ID whatever the
// order members are first heard from in, keeps the latest time set, and
// answers zero for a member never heard from.
func TestContacts(t *testing.T) {
	var c contacts
	base := time.Now()
	for i, id := range []uint64{5, 2, 9, 1, 7} {
		c.set(id, base.Add(time.Duration(i)*time.Second))
	}
	c.set(9, base.Add(time.Minute))
	want := map[uint64]time.Time{5: base, 2: base.Add(time.Second), 9: base.Add(time.Minute), 1: base.Add(3 * time.Second), 7: base.Add(4 * time.Second)}
	for id, at := range want {
		if got := c.get(id); !got.Equal(at) {
			t.Errorf("member %d: last contact %v, want %v", id, got, at)
		}
	}
	if got := c.get(3); !got.IsZero() {
		t.Errorf("member 3, never heard from: last contact %v, want zero", got)
	}
	if len(c) != len(want) {
		t.Errorf("%d entries, want %d", len(c), len(want))
	}
}
