package shared

import (
	"log/slog"
	"sync"
	"testing"
	"time"
)

type policy struct{ n int }

type sample struct {
	ID       uint64
	Timeout  time.Duration
	Name     string
	Tags     []string
	Limits   map[string]int
	Logger   *slog.Logger
	Policy   any
	OnStop   func()
	inner    struct{ a [2]uint16 }
	Interval time.Duration
}

func TestEqual(t *testing.T) {
	lg := slog.New(slog.DiscardHandler)
	pol := &policy{1}
	base := func() *sample {
		s := &sample{ID: 1, Timeout: time.Second, Name: "x", Tags: []string{"a"}, Limits: map[string]int{"k": 1}, Logger: lg, Policy: pol}
		s.inner.a = [2]uint16{3, 5}
		return s
	}
	if !Equal(base(), base()) {
		t.Fatal("equal values (distinct slices and maps of equal content) are not equal")
	}
	for name, change := range map[string]func(*sample){
		"number":               func(s *sample) { s.ID = 2 },
		"string":               func(s *sample) { s.Name = "y" },
		"slice content":        func(s *sample) { s.Tags = []string{"b"} },
		"nil slice":            func(s *sample) { s.Tags = nil },
		"map content":          func(s *sample) { s.Limits["k"] = 2 },
		"another logger":       func(s *sample) { s.Logger = slog.New(slog.DiscardHandler) },
		"an equal policy":      func(s *sample) { s.Policy = &policy{1} },
		"a value in the iface": func(s *sample) { s.Policy = policy{1} },
		"a function":           func(s *sample) { s.OnStop = func() {} },
		"unexported array":     func(s *sample) { s.inner.a[1] = 6 },
	} {
		s := base()
		change(s)
		if Equal(base(), s) {
			t.Errorf("%s: changed, still equal", name)
		}
	}
}

func TestSetShares(t *testing.T) {
	var s Set[sample]
	a, b := &sample{ID: 1}, &sample{ID: 1}
	if got := s.Share(a); got != a {
		t.Fatal("the first configuration is not kept")
	}
	if got := s.Share(b); got != a {
		t.Fatal("an equal configuration does not get the kept one")
	}
	c := &sample{ID: 2}
	if got := s.Share(c); got != c || s.Len() != 2 {
		t.Fatal("another configuration is not kept apart")
	}
	for i := range MaxKept + 5 {
		s.Share(&sample{ID: uint64(100 + i)})
	}
	if s.Len() != MaxKept {
		t.Fatalf("%d kept, want at most %d", s.Len(), MaxKept)
	}
	d := &sample{ID: 1000}
	if got := s.Share(d); got != d {
		t.Fatal("past the bound, a configuration is not its own")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { s.Share(&sample{ID: 1}) })
	}
	wg.Wait()
}
