package storage

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// crashNoSyncEnv tells TestNoSyncCrashChild after how many Saves it kills
// itself.
const crashNoSyncEnv = "UNDERSTUDY_STORAGE_CRASH_NOSYNC_AFTER"

// TestNoSyncSurvivesProcessCrash: with NoSync, a process crash loses no
// acknowledged Save (only a machine crash may): every commit is written to
// the operating system before Save returns. The child kills itself with
// SIGKILL right after a Save returns, on one P, so that no other goroutine
// of it runs in between: a WAL record left in the process's buffers (Pebble
// committing with pebble.NoSync, as before noSyncFS) is lost. A member
// running NoSync (fleetload's standbys) that loses appends it acknowledged
// is taken for a wiped replica when it restarts.
func TestNoSyncSurvivesProcessCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	var ackedLast uint64
	for round := range 5 {
		after := 3 + round*7
		acks := 0
		env := []string{crashChildEnv + "=" + dir, crashNoSyncEnv + "=" + strconv.Itoa(after)}
		runChild(t, "TestNoSyncCrashChild", env, func(line string) bool {
			var last, term uint64
			if _, err := fmt.Sscanf(line, "ack %d %d", &last, &term); err == nil {
				ackedLast = last
				acks++
			}
			return true // until the child kills itself
		})
		require.Equal(t, after, acks, "round %d: the child did not kill itself where told", round)

		s, err := Open(dir, Options{Backend: testBackend, NoSync: true})
		require.NoError(t, err, "round %d", round)
		verifyCrashed(t, s, ackedLast)
		require.NoError(t, s.Close())
	}
}

// TestNoSyncCrashChild is the child of TestNoSyncSurvivesProcessCrash.
func TestNoSyncCrashChild(t *testing.T) {
	dir, after := os.Getenv(crashChildEnv), os.Getenv(crashNoSyncEnv)
	if dir == "" || after == "" {
		t.Skip("run by TestNoSyncSurvivesProcessCrash")
	}
	n, err := strconv.Atoi(after)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GOMAXPROCS(1)
	s, err := Open(dir, Options{Backend: testBackend, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	acks := 0
	t.Fatal(crashWrite(s, func(last, term uint64) {
		// One write straight to the pipe: nothing buffered to flush.
		fmt.Fprintf(os.Stdout, "ack %d %d\n", last, term)
		if acks++; acks == n {
			_ = self.Kill()
			select {} // SIGKILL is on its way
		}
	}))
}
