package benchmarks

import (
	"os"
	"testing"
)

// TestMain runs a learner instead of the tests in a child process started
// by -understudy.learnerproc.
func TestMain(m *testing.M) {
	if RunLearnerChild() {
		return
	}
	os.Exit(m.Run())
}
