package storage

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The crash test runs a child process (this test binary, running
// TestCrashChild) that writes to a store as the node does, printing each
// acknowledged Save, and kills it with SIGKILL at a random point, several
// times on one data dir. After each kill the store must reopen to a
// consistent state holding every acknowledged write: the hard state (its
// commit is the last index written with it, in the same Save) matches the
// log, every entry decodes and carries its own index and term, and the
// recorded snapshot reads back.
const crashChildEnv = "UNDERSTUDY_STORAGE_CRASH_CHILD"

func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	var ackedLast uint64
	for round := range 6 {
		killAfter := 5 + round*17%60
		acks := 0
		runChild(t, "TestCrashChild", []string{crashChildEnv + "=" + dir}, func(line string) bool {
			var last, term uint64
			if _, err := fmt.Sscanf(line, "ack %d %d", &last, &term); err == nil {
				ackedLast = last
				acks++
			}
			return acks < killAfter
		})
		require.Equal(t, killAfter, acks, "round %d: child stopped early", round)

		s, err := Open(dir, Options{Backend: testBackend})
		require.NoError(t, err, "round %d", round)
		verifyCrashed(t, s, ackedLast)
		require.NoError(t, s.Close())
	}
}

// runChild runs test child of this test binary, with env added to its
// environment, and hands each line it prints to line until line returns
// false — then it kills the child (SIGKILL) — or the child exits.
func runChild(t *testing.T, child string, env []string, line func(string) bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v=false")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	for sc.Scan() && line(sc.Text()) {
	}
	_ = cmd.Process.Kill() // fails only for a child that exited already
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
}

func verifyCrashed(t *testing.T, s *Store, ackedLast uint64) {
	t.Helper()
	hs, _, err := s.InitialState()
	require.NoError(t, err)
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	require.GreaterOrEqual(t, last, ackedLast, "an acknowledged entry was lost")
	require.Equal(t, last, hs.GetCommit(), "hard state and entries of one Save must land together")
	es, err := s.Entries(first, last+1, raftNoLimit)
	require.NoError(t, err)
	prevTerm := uint64(0)
	for j, e := range es {
		require.Equal(t, first+uint64(j), e.GetIndex())
		require.Equal(t, crashData(e.GetIndex(), e.GetTerm()), string(e.GetData()))
		require.GreaterOrEqual(t, e.GetTerm(), prevTerm)
		prevTerm = e.GetTerm()
	}
	snap, err := s.Snapshot()
	require.NoError(t, err)
	if !raft.IsEmptySnap(snap) {
		b, err := readSnapshot(t, s, snap)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("snapshot at %d", snap.GetMetadata().GetIndex()), string(b))
	}
}

func crashData(index, term uint64) string { return fmt.Sprintf("entry %d of term %d", index, term) }

// TestCrashChild is the child of TestCrashRestart; it runs until killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestCrashRestart")
	}
	s, err := Open(dir, Options{Backend: testBackend})
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	t.Fatal(crashWrite(s, func(last, term uint64) {
		fmt.Fprintf(w, "ack %d %d\n", last, term)
		_ = w.Flush()
	}))
}

// crashWrite writes to s as the node does until an error, calling ack
// after each Save with the last index and term it wrote.
func crashWrite(s *Store, ack func(last, term uint64)) error {
	hs, _, _ := s.InitialState()
	term := hs.GetTerm() + 1
	last, _ := s.LastIndex()
	for i := 0; ; i++ {
		at := last + 1
		if i%7 == 6 && last >= 3 {
			term++
			at = last - 2 // a conflicting suffix
		}
		var es []*raftpb.Entry
		for j := at; j < at+4; j++ {
			es = append(es, &raftpb.Entry{Index: proto.Uint64(j), Term: proto.Uint64(term), Data: []byte(crashData(j, term))})
		}
		last = at + 3
		if err := s.Save(hardState(term, 1, last), es, nil); err != nil {
			return err
		}
		ack(last, term)
		if i%11 == 10 {
			idx := last - 1
			if _, err := s.CreateSnapshot(idx, confState(1), writeBytes([]byte(fmt.Sprintf("snapshot at %d", idx)))); err != nil {
				return err
			}
			if err := s.Compact(idx - 5); err != nil && err != raft.ErrCompacted {
				return err
			}
		}
	}
}

// TestEngineCrashRestart is TestCrashRestart with four groups in one
// Engine, each written from its own goroutine, so that commits carry
// several groups' Saves: after each SIGKILL every group reopens
// consistent, with every Save acknowledged to it.
func TestEngineCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const groups = 4
	dir := t.TempDir()
	acked := make([]uint64, groups+1)
	for round := range 4 {
		killAfter := 20 + round*37%80
		acks := 0
		runChild(t, "TestEngineCrashChild", []string{crashChildEnv + "=" + dir}, func(line string) bool {
			var g, last, term uint64
			if _, err := fmt.Sscanf(line, "ack %d %d %d", &g, &last, &term); err == nil {
				acked[g] = last
				acks++
			}
			return acks < killAfter
		})
		require.Equal(t, killAfter, acks, "round %d: child stopped early", round)

		e, err := OpenEngine(dir, EngineOptions{Backend: testBackend})
		require.NoError(t, err, "round %d", round)
		for g := uint64(1); g <= groups; g++ {
			s, err := e.Group(g, GroupOptions{})
			require.NoError(t, err, "round %d group %d", round, g)
			verifyCrashed(t, s, acked[g])
		}
		require.NoError(t, e.Close())
	}
}

// TestEngineCrashChild is the child of TestEngineCrashRestart; it runs
// until killed.
func TestEngineCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestEngineCrashRestart")
	}
	e, err := OpenEngine(dir, EngineOptions{Backend: testBackend})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	errs := make(chan error)
	for g := uint64(1); g <= 4; g++ {
		s, err := e.Group(g, GroupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			errs <- crashWrite(s, func(last, term uint64) {
				mu.Lock()
				fmt.Fprintf(w, "ack %d %d %d\n", g, last, term)
				_ = w.Flush()
				mu.Unlock()
			})
		}()
	}
	t.Fatal(<-errs)
}
