package benchmarks

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/raft"
)

// learnerProcess runs understudy's learner in a process of its own (the
// test binary, re-executed with GOMAXPROCS=1) instead of the benchmark's:
// a learner on its own machine does not receive, store, restore and replay
// the snapshot on the leader's CPUs, nor make the leader's process collect
// its garbage. The two processes still share this machine's cores and disk.
var learnerProcess = flag.Bool("understudy.learnerproc", false, "BenchmarkCatchUp: run understudy's learner in a process of its own (GOMAXPROCS=1)")

// learnerNice runs the learner's process at this nice value (through
// nice(1), so that every thread of it has it): a learner on a machine of
// its own takes no CPU from the leader's, and at 19 the learner here runs
// on what the cluster leaves idle rather than on its share of the cores.
// It still shares the disk.
var learnerNice = flag.Int("understudy.learnernice", 0, "BenchmarkCatchUp with -understudy.learnerproc: the learner process's nice value (0: not niced; 19: it runs on the cores the cluster leaves idle, as a learner on a machine of its own would)")

// learnerChildEnv, set in a child's environment, makes the test binary run
// a learner (RunLearnerChild) instead of its tests.
const learnerChildEnv = "BENCH_LEARNER_CHILD"

// learnerProc is a learner running in a child process. The child prints
// "addr A" once listening, then "applied N" and "restores N" as they
// change, and answers "state" with "state N H" (its applied index and a
// hash of its state); the parent sends "start ID=ADDR ..." (the seeds) and
// "stop".
type learnerProc struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	addr     string
	applied  atomic.Uint64
	restores atomic.Uint64
	states   chan string
	done     chan error
}

func startLearnerProc(dir string) (*learnerProc, error) {
	args := []string{os.Args[0], "-test.run", "^$", "-understudy.engine", *engineFlag}
	if *learnerNice != 0 {
		nice, err := exec.LookPath("nice")
		if err != nil {
			return nil, fmt.Errorf("-understudy.learnernice: %w", err)
		}
		args = append([]string{nice, "-n", strconv.Itoa(*learnerNice)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), learnerChildEnv+"="+dir, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &learnerProc{cmd: cmd, in: in, states: make(chan string, 1), done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), " ")
			switch k {
			case "addr":
				addr <- v
			case "applied":
				n, _ := strconv.ParseUint(v, 10, 64)
				p.applied.Store(n)
			case "restores":
				n, _ := strconv.ParseUint(v, 10, 64)
				p.restores.Store(n)
			case "state":
				p.states <- v
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-addr:
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("understudy: the learner process exited: %v", err)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, errors.New("understudy: the learner process did not say its address")
	}
}

func (p *learnerProc) send(line string) error {
	_, err := io.WriteString(p.in, line+"\n")
	return err
}

// state asks the child for its applied index and state hash.
func (p *learnerProc) state(ctx context.Context) (uint64, uint64, error) {
	if err := p.send("state"); err != nil {
		return 0, 0, err
	}
	select {
	case s := <-p.states:
		a, h, _ := strings.Cut(s, " ")
		applied, _ := strconv.ParseUint(a, 10, 64)
		hash, _ := strconv.ParseUint(h, 10, 64)
		return applied, hash, nil
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

// stop asks the child to stop its member and waits for it to exit.
func (p *learnerProc) stop(ctx context.Context) error {
	_ = p.send("stop")
	_ = p.in.Close()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("understudy: the learner process did not stop: %w", ctx.Err())
	}
}

// stateHash hashes a state's keys and values in key order.
func stateHash(m map[string]string) uint64 {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := fnv.New64a()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s=%d:%s;", len(k), k, len(m[k]), m[k])
	}
	return h.Sum64()
}

// RunLearnerChild runs a learner for a parent benchmark (see learnerProc)
// if this process is such a child, and returns whether it was.
func RunLearnerChild() bool {
	dir := os.Getenv(learnerChildEnv)
	if dir == "" {
		return false
	}
	if err := runLearnerChild(dir, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "learner process:", err)
		os.Exit(1)
	}
	return true
}

func runLearnerChild(dir string, stdin io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+"\n", args...)
	}
	say("addr %s", ln.Addr())
	lines := bufio.NewScanner(stdin)
	if !lines.Scan() {
		ln.Close()
		return errors.New("no start line")
	}
	var seeds []raft.Member
	for _, f := range strings.Fields(strings.TrimPrefix(lines.Text(), "start")) {
		id, addr, _ := strings.Cut(f, "=")
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			ln.Close()
			return fmt.Errorf("bad seed %q", f)
		}
		seeds = append(seeds, raft.Member{ID: n, PeerAddr: addr})
	}
	mem, err := startUnderstudyMember(understudyLearnerID, dir, ln, nil, Defaults, benchLogger(), seeds...)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		var applied, restores uint64
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if a := mem.node.AppliedIndex(); a != applied {
				applied = a
				say("applied %d", a)
			}
			if r := mem.sm.restores.Load(); r != restores {
				restores = r
				say("restores %d", r)
			}
		}
	}()
	for lines.Scan() {
		if lines.Text() == "stop" {
			break
		}
		if lines.Text() == "state" {
			a := mem.node.AppliedIndex()
			say("state %d %d", a, stateHash(mem.sm.Clone()))
		}
	}
	close(stop)
	<-reported
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mem.stop(ctx)
}
