package understudy

import "testing"

// LeaderViewAllocs is the allocations of one leader balancing view of h's
// groups, built in buffers reused as a balancer's rounds reuse them.
func LeaderViewAllocs(h *Host) float64 {
	var vb viewBufs
	h.leaderView(nil, &vb)
	vb.release()
	return testing.AllocsPerRun(20, func() {
		h.leaderView(nil, &vb)
		vb.release()
	})
}
