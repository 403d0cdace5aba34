package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/kv"
)

// TestPause: a paused member receives nothing (it falls behind while the
// others commit), and catches up once resumed.
func TestPause(t *testing.T) {
	c := New(t, Options{Members: 3})
	l := c.WaitLeader()
	var f *Member
	for _, m := range c.Running() {
		if m.ID != l.ID {
			f = m
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := l.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(ctx, st.Commit); err != nil {
		t.Fatal(err)
	}
	c.Net.Pause(f.ID)
	for i := range 20 {
		if _, err := l.Node.Propose(ctx, kv.Put(fmt.Sprint(i), "v")); err != nil {
			t.Fatal(err)
		}
	}
	// (Messages queued to it before the pause may still arrive; none of
	// these writes was sent to it before.)
	for i := range 20 {
		if v, err := f.Node.StaleRead([]byte(fmt.Sprint(i))); err != nil || len(v) != 0 {
			t.Fatalf("the paused member applied write %d: %q %v", i, v, err)
		}
	}
	if _, err := f.Node.Status(ctx); err != nil { // its own loop still runs
		t.Fatal(err)
	}
	c.Net.Resume(f.ID)
	st, err = l.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(ctx, st.Commit); err != nil {
		t.Fatalf("after resuming: %v", err)
	}
}
