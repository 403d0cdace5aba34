package raft

import (
	"context"
	"testing"
	"time"
)

// TestSeedNeverOverridesAnUpdate: a seed of the settings that reaches the
// log after an update (the first leader proposed it before the update
// arrived, and it committed later) is ignored by every member.
func TestSeedNeverOverridesAnUpdate(t *testing.T) {
	n := startLone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	update := n.Settings()
	update.FailoverAfter = 41 * time.Second
	if err := n.UpdateSettings(ctx, update); err != nil {
		t.Fatal(err)
	}
	seed := update
	seed.TargetVoters, seed.FailoverAfter = 7, time.Minute
	var perr error
	if err := n.do(ctx, func() {
		perr = n.proposeOwn(func(id requestID) []byte { return appendSettingsKind(nil, entrySettingsSeed, id, seed.Encode()) })
	}); err != nil || perr != nil {
		t.Fatal(err, perr)
	}
	if err := n.ReadBarrier(ctx); err != nil { // the seed entry is applied
		t.Fatal(err)
	}
	if got := n.Settings(); got != update {
		t.Fatalf("settings %v after a late seed; want the update %v", got, update)
	}
}
