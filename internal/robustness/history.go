package robustness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records the operations of a run (for porcupine) and the faults
// injected (the timeline printed on a failure and drawn on the
// visualization), with times relative to the run's start.
type History struct {
	start time.Time

	mu       sync.Mutex
	ops      []porcupine.Operation
	timeline []Event
}

// Event is one entry of the fault timeline.
type Event struct {
	At   time.Duration
	Kind string // the fault's kind, e.g. "crash", "partition"
	What string // what was done, e.g. "crash leader 2"
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Since is the time since the history started.
func (h *History) Since() time.Duration { return time.Since(h.start) }

// Op records an operation that started at call and returned at ret. An
// operation of unknown outcome never returned: porcupine may place it
// anywhere after its call.
func (h *History) Op(client int, in Input, out Output, call, ret time.Time) {
	r := ret.Sub(h.start).Nanoseconds()
	if out.Unknown {
		r = int64(1) << 62
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out,
		Call: call.Sub(h.start).Nanoseconds(), Return: r})
	h.mu.Unlock()
}

// Fault records a fault of kind, described by what.
func (h *History) Fault(kind, what string) {
	h.mu.Lock()
	h.timeline = append(h.timeline, Event{At: h.Since(), Kind: kind, What: what})
	h.mu.Unlock()
}

// Timeline returns the faults recorded so far.
func (h *History) Timeline() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.timeline...)
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// FormatTimeline prints the timeline one fault per line.
func FormatTimeline(tl []Event) string {
	var b strings.Builder
	for _, e := range tl {
		fmt.Fprintf(&b, "  %8.3fs  %s\n", e.At.Seconds(), e.What)
	}
	return b.String()
}

// Check runs porcupine over the history. On a violation it writes the
// visualization, with the fault timeline drawn as annotations, to a file
// named after name in dir, and returns an error naming it.
func (h *History) Check(name, dir string, timeout time.Duration) (porcupine.CheckResult, error) {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	tl := append([]Event(nil), h.timeline...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	if res != porcupine.Illegal {
		return res, nil
	}
	notes := make([]porcupine.Annotation, 0, len(tl))
	for _, e := range tl {
		notes = append(notes, porcupine.Annotation{Tag: "nemesis", Start: e.At.Nanoseconds(),
			Description: e.Kind, Details: e.What, BackgroundColor: "#fde2c8"})
	}
	info.AddAnnotations(notes)
	path := filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-", " ", "_").Replace(name)+".html")
	f, err := os.Create(path)
	if err == nil {
		err = porcupine.Visualize(Model, info, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return res, fmt.Errorf("history of %d operations is not linearizable (writing the visualization: %v)", len(ops), err)
	}
	return res, fmt.Errorf("history of %d operations is not linearizable; visualization: %s", len(ops), path)
}
