package raft

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

var testLimits = sessionLimits{sessions: 3, results: 4, resultSize: 16}

// step is one request of a client in a session-table test: what the table
// decides, and, for a new request, the result the state machine gives.
type step struct {
	seq, acked uint64
	want       seqState
	result     Result // the state machine's answer (seqNew), or the answer expected (seqApplied)
}

// run applies steps to s at increasing indexes starting at idx, the way
// the apply path does, and checks every decision and answer.
func run(t *testing.T, tab *sessionTable, s *session, idx uint64, steps []step) {
	t.Helper()
	for i, st := range steps {
		tab.touch(s, idx+uint64(i))
		r, got := s.lookup(st.seq)
		if got != st.want {
			t.Fatalf("step %d (seq %d): %v, want %v", i, st.seq, got, st.want)
		}
		switch got {
		case seqNew:
			s.add(st.seq)
			s.ack(st.acked)
			res := st.result
			s.fill(st.seq, &res)
		case seqApplied:
			a := r.answer()
			if string(a.Value) != string(st.result.Value) || fmt.Sprint(a.Err) != fmt.Sprint(st.result.Err) {
				t.Fatalf("step %d (seq %d): answer %q %v, want %q %v", i, st.seq, a.Value, a.Err, st.result.Value, st.result.Err)
			}
			if st.result.Err != nil && !errors.Is(a.Err, st.result.Err) && !errors.Is(st.result.Err, ErrDuplicateRequest) {
				t.Fatalf("step %d: answer %v does not match %v", i, a.Err, st.result.Err)
			}
			s.ack(st.acked)
		case seqForgotten:
			s.ack(st.acked)
		}
	}
}

var errTestCAS = errors.New("cas failed")

func TestSessionDecisions(t *testing.T) {
	ok := func(v string) Result { return Result{Value: []byte(v)} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a retry gets its first answer", []step{
			{seq: 1, want: seqNew, result: ok("one")},
			{seq: 2, want: seqNew, result: Result{Value: []byte("cur"), Err: errTestCAS}},
			{seq: 1, want: seqApplied, result: ok("one")},
			{seq: 2, want: seqApplied, result: Result{Value: []byte("cur"), Err: errTestCAS}},
		}},
		{"requests applied out of order (pipelined) are each applied once", []step{
			{seq: 2, want: seqNew, result: ok("two")},
			{seq: 1, want: seqNew, result: ok("one")},
			{seq: 3, want: seqNew, result: ok("three")},
			{seq: 1, want: seqApplied, result: ok("one")},
			{seq: 2, want: seqApplied, result: ok("two")},
		}},
		{"beyond the results kept, the oldest is forgotten, never applied again", []step{
			{seq: 1, want: seqNew, result: ok("1")},
			{seq: 2, want: seqNew, result: ok("2")},
			{seq: 3, want: seqNew, result: ok("3")},
			{seq: 4, want: seqNew, result: ok("4")},
			{seq: 5, want: seqNew, result: ok("5")},
			{seq: 1, want: seqForgotten},
			{seq: 2, want: seqApplied, result: ok("2")},
			{seq: 5, want: seqApplied, result: ok("5")},
		}},
		{"a request below a forgotten one is refused even if never applied", []step{
			{seq: 10, want: seqNew, result: ok("10")},
			{seq: 11, want: seqNew, result: ok("11")},
			{seq: 12, want: seqNew, result: ok("12")},
			{seq: 13, want: seqNew, result: ok("13")},
			{seq: 14, want: seqNew, result: ok("14")},
			{seq: 3, want: seqForgotten},
		}},
		{"acknowledged results are dropped", []step{
			{seq: 1, want: seqNew, result: ok("1")},
			{seq: 2, acked: 1, want: seqNew, result: ok("2")},
			{seq: 1, want: seqForgotten},
			{seq: 2, want: seqApplied, result: ok("2")},
			{seq: 3, acked: 2, want: seqNew, result: ok("3")},
			{seq: 2, want: seqForgotten},
		}},
		{"a result too large is not kept: ErrDuplicateRequest", []step{
			{seq: 1, want: seqNew, result: ok("12345678901234567")},
			{seq: 2, want: seqNew, result: Result{Value: []byte("1234"), Err: errors.New("12345678901234")}},
			{seq: 3, want: seqNew, result: ok("1234567890123456")},
			{seq: 1, want: seqApplied, result: Result{Err: fmt.Errorf("%w: its result was larger than the session keeps", ErrDuplicateRequest)}},
			{seq: 2, want: seqApplied, result: Result{Err: fmt.Errorf("%w: its result was larger than the session keeps", ErrDuplicateRequest)}},
			{seq: 3, want: seqApplied, result: ok("1234567890123456")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab sessionTable
			tab.register(1, testLimits)
			run(t, &tab, tab.get(1), 2, tc.steps)
			// The table survives a snapshot: same bytes, same decisions.
			enc := tab.appendTo(nil)
			got, err := decodeSessions(&decoder{b: enc})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.appendTo(nil), enc) {
				t.Fatal("a decoded table encodes differently")
			}
			s, g := tab.get(1), got.get(1)
			for seq := uint64(0); seq < 20; seq++ {
				r1, st1 := s.lookup(seq)
				r2, st2 := g.lookup(seq)
				if st1 != st2 || (st1 == seqApplied && fmt.Sprint(r1.answer()) != fmt.Sprint(r2.answer())) {
					t.Fatalf("seq %d after a snapshot: %v, want %v", seq, st2, st1)
				}
			}
		})
	}
}

func TestSessionResultIsACopy(t *testing.T) {
	var tab sessionTable
	tab.register(1, testLimits)
	s := tab.get(1)
	s.add(1)
	v := []byte("abc")
	s.fill(1, &Result{Value: v})
	v[0] = 'X' // the state machine reuses its buffer
	r, _ := s.lookup(1)
	a := r.answer()
	if string(a.Value) != "abc" {
		t.Fatalf("kept result %q", a.Value)
	}
	a.Value[0] = 'Y' // the caller scribbles on its answer
	if b := r.answer(); string(b.Value) != "abc" {
		t.Fatalf("kept result %q after the caller changed its answer", b.Value)
	}
}

func TestSessionTableExpiresLeastRecentlyUsed(t *testing.T) {
	var tab sessionTable
	tab.register(10, testLimits)
	tab.register(11, testLimits)
	tab.register(12, testLimits)
	tab.touch(tab.get(10), 13) // 11 is now the least recently used
	if n := tab.register(14, testLimits); n != 1 || tab.get(11) != nil || tab.get(10) == nil || tab.get(12) == nil || tab.get(14) == nil {
		t.Fatalf("expired %d; sessions %v", n, ids(&tab))
	}
	// A registration with a lower bound expires down to it.
	if n := tab.register(15, sessionLimits{sessions: 2, results: 1, resultSize: 1}); n != 2 || tab.len() != 2 || tab.get(14) == nil || tab.get(15) == nil {
		t.Fatalf("expired %d; sessions %v", n, ids(&tab))
	}
	if got := ids(&tab); got != "14 15" {
		t.Fatalf("use order %s, want 14 15", got)
	}
}

func ids(t *sessionTable) string {
	var b strings.Builder
	for s := t.oldest; s != nil; s = s.newer {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, s.client)
	}
	return b.String()
}

func TestDecodeSessionsRefusesBrokenInvariants(t *testing.T) {
	good := func() *sessionTable {
		var tab sessionTable
		tab.register(1, testLimits)
		tab.register(2, testLimits)
		s := tab.get(2)
		tab.touch(s, 3)
		s.add(5)
		s.fill(5, &Result{Value: []byte("v"), Err: errTestCAS})
		return &tab
	}
	if _, err := decodeSessions(&decoder{b: good().appendTo(nil)}); err != nil {
		t.Fatal(err)
	}
	for name, breakIt := range map[string]func(*sessionTable){
		"use order":        func(t *sessionTable) { t.oldest.lastUse = 9 },
		"repeated client":  func(t *sessionTable) { t.oldest.client = 2 },
		"zero client":      func(t *sessionTable) { t.oldest.client = 0 },
		"result at floor":  func(t *sessionTable) { t.newest.floor = 5 },
		"too many results": func(t *sessionTable) { t.newest.maxResults = 0 },
		"result too large": func(t *sessionTable) { t.newest.maxResultSize = 2 },
		"huge bound":       func(t *sessionTable) { t.newest.maxResultSize = maxSessionResultSizeLimit + 1 },
	} {
		tab := good()
		breakIt(tab)
		if _, err := decodeSessions(&decoder{b: tab.appendTo(nil)}); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestRegisterRoundTrip(t *testing.T) {
	id := requestID{proposer: 3, seq: 9}
	b := appendSettingsKind(nil, entryRegisterClient, id, testLimits.encode())
	gotID, lim, err := decodeRegister(b)
	if err != nil || gotID != id || lim != testLimits {
		t.Fatalf("round trip: %v %v %v", gotID, lim, err)
	}
	bad := appendSettingsKind(nil, entryRegisterClient, id, sessionLimits{sessions: 0, results: 1}.encode())
	if gotID, _, err := decodeRegister(bad); !errors.Is(err, ErrCorruptEntry) || gotID != id {
		t.Fatalf("zero sessions: %v %v", gotID, err)
	}
}

func FuzzDecodeRegister(f *testing.F) {
	f.Add(appendSettingsKind(nil, entryRegisterClient, requestID{1, 2}, testLimits.encode()))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, lim, err := decodeRegister(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("error %v does not wrap ErrCorruptEntry", err)
			}
			return
		}
		if !bytes.Equal(appendSettingsKind(nil, entryRegisterClient, id, lim.encode()), b) {
			t.Fatalf("%x is not canonical", b)
		}
	})
}

func TestConfigBoundsSessionMemory(t *testing.T) {
	if err := (Config{ID: 1}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c := Config{ID: 1, MaxClientSessions: 1 << 20, MaxSessionResultSize: 1 << 20}.WithDefaults()
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "must be at most 256 MiB") {
		t.Fatalf("sessions that could keep 16 TiB: %v", err)
	}
}

// The apply path of a session command with a small result, for a client
// that acknowledges: no allocation once the session is warm.
func TestSessionCommandDoesNotAllocate(t *testing.T) {
	var tab sessionTable
	tab.register(1, sessionLimits{sessions: 8, results: sessionResultsKept, resultSize: 1024})
	s := tab.get(1)
	res := Result{Value: []byte("a result of some bytes")}
	seq, idx := uint64(0), uint64(1)
	step := func() {
		seq++
		idx++
		tab.touch(s, idx)
		if _, st := s.lookup(seq); st != seqNew {
			t.Fatalf("seq %d: %v", seq, st)
		}
		s.add(seq)
		s.ack(seq - 1)
		s.fill(seq, &res)
	}
	for range 2 * sessionResultsKept {
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%.1f allocations per session command", n)
	}
}
