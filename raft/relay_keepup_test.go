package raft_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestStandbyRelayKeptUnderLoad: a standby that relays for others keeps
// relaying while it keeps up, although under steady writes its Match is
// rarely the commit index at the very tick the leader looks (the messages
// to it take a moment: here up to 10 ms of delay on every link). The
// leader once required Match == commit at every tick, so standby relays
// were dropped and chosen again tick after tick, their standbys probed
// and fed directly in between.
func TestStandbyRelayKeptUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := relayOptions(true, 12)
	opts.RelayFanout = 3 // the two followers feed 6; standbys relay the rest
	c, lead, ids := withStandbys(ctx, t, opts, 12)
	waitStatus(ctx, t, lead.Node, "every standby fed through a relay or relaying", func(st raft.Status) bool {
		relays := relaysOf(st)
		for _, id := range ids {
			if st.Progress[id].RelayedBy == 0 && len(relays[id]) == 0 {
				return false
			}
		}
		return true
	})
	c.Net.SetDelay(10 * time.Millisecond)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; wctx.Err() == nil; i++ {
				_, _ = lead.Node.Propose(wctx, kv.Put(fmt.Sprint("load-", w, "-", i), "v"))
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	time.Sleep(300 * time.Millisecond) // the load under way

	// Over 60 looks, 20 ms apart (3 s, 150 ticks), the relays stay put.
	var last string
	changes, direct := 0, 0
	for range 60 {
		time.Sleep(20 * time.Millisecond)
		st, err := lead.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var assign []string
		relays := relaysOf(st)
		for _, id := range ids {
			via := st.Progress[id].RelayedBy
			if via == 0 && len(relays[id]) == 0 {
				direct++
			}
			assign = append(assign, fmt.Sprintf("%d<-%d", id, via))
		}
		slices.Sort(assign)
		if s := fmt.Sprint(assign); s != last {
			if last != "" {
				changes++
				if changes < 6 {
					t.Logf("%s", s)
				}
			}
			last = s
		}
	}
	t.Logf("relay assignment changed %d times in 60 looks; %d standby-looks fed directly", changes, direct)
	// Before the fix: 30-50 changes; after it 0 on a quiet machine, a few
	// under -race on a loaded one (a standby relay left a tick behind by a
	// held-up loop): the bound tells the two apart with room to spare.
	if changes > 15 {
		t.Fatalf("the relays changed %d times in 60 looks under a steady load (a standby relay dropped for being a moment behind?)", changes)
	}
}
