package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

func TestMain(m *testing.M) {
	setLogger("") // dragonboat's logs off, once per process
	os.Exit(m.Run())
}

func TestCommandIsAPutOfCommandSize(t *testing.T) {
	for _, key := range []string{"w0-0", "w255-1023", strings.Repeat("k", 200)} {
		c := command(key)
		if len(c) != commandSize {
			t.Fatalf("command(%q) is %d bytes, want %d", key, len(c), commandSize)
		}
		k, v, err := decodePut(c)
		if err != nil || k != key || len(v) == 0 {
			t.Fatalf("decodePut(command(%q)) = %q, %d bytes, %v", key, k, len(v), err)
		}
	}
	for _, bad := range [][]byte{nil, {2}, {opPut, 5, 'a'}} {
		if _, _, err := decodePut(bad); err != errBadCommand {
			t.Errorf("decodePut(%v) = %v, want errBadCommand", bad, err)
		}
	}
}

func TestStoreAppliesAndRestoresFromItsSnapshot(t *testing.T) {
	s := newStore(1, 1)
	for i, cmd := range [][]byte{put("a", "1"), put("b", "2"), {9}, put("a", "3")} {
		res, err := s.Update(sm.Entry{Index: uint64(i + 1), Cmd: cmd})
		if err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
		want := uint64(1) // a put
		if cmd[0] != opPut {
			want = 0 // answered, not applied
		}
		if res.Value != want {
			t.Fatalf("Update %d: Value %d, want %d", i, res.Value, want)
		}
	}
	var snap bytes.Buffer
	if err := s.SaveSnapshot(&snap, nil, nil); err != nil {
		t.Fatal(err)
	}
	r := newStore(1, 2)
	if err := r.RecoverFromSnapshot(bytes.NewReader(snap.Bytes()), nil, nil); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"a": "3", "b": "2", "c": ""} {
		got, err := r.Lookup(key)
		if err != nil || got != want {
			t.Errorf("restored Lookup(%q) = %v, %v; want %q", key, got, err, want)
		}
	}
	if err := r.RecoverFromSnapshot(bytes.NewReader(snap.Bytes()[:snap.Len()-1]), nil, nil); err == nil {
		t.Error("a truncated snapshot restored without an error")
	}
	if got, _ := r.Lookup("a"); got != "3" {
		t.Errorf("a failed restore changed the state: a = %v", got)
	}
	if err := r.RecoverFromSnapshot(io.LimitReader(nil, 0), nil, nil); err == nil {
		t.Error("an empty snapshot restored without an error")
	}
}

func TestWriterShardsCoverTheActiveShardsOnly(t *testing.T) {
	for _, tc := range []struct{ writers, active int }{{256, 1}, {256, 10}, {256, 256}, {256, 1000}, {3, 7}} {
		count := make([]int, tc.active)
		for w := range tc.writers {
			for _, g := range writerShards(w, tc.writers, tc.active) {
				if g < 0 || g >= tc.active {
					t.Fatalf("%+v: writer %d writes shard %d", tc, w, g)
				}
				count[g]++
			}
		}
		lo, hi := count[0], count[0]
		for _, c := range count {
			lo, hi = min(lo, c), max(hi, c)
		}
		if lo < 1 || hi-lo > 1 {
			t.Errorf("%+v: writers per shard from %d to %d", tc, lo, hi)
		}
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := c.cluster
	// understudy's defaults: tick 100ms, election 10 ticks, heartbeat 1,
	// SnapshotCount 10,000, SnapshotCatchUpEntries 5,000.
	if o.rttMillisecond != 100 || o.electionRTT != 10 || o.heartbeatRTT != 1 || o.snapshotEntries != 10000 || o.compactionOverhead != 5000 {
		t.Errorf("defaults %+v", o)
	}
	if c.settle != 0 || c.writers != 256 || len(c.logdbs) != 1 || c.logdbs[0] != logdbPebble {
		t.Errorf("defaults: settle %s, writers %d, logdbs %v", c.settle, c.writers, c.logdbs)
	}
	if c, err = parseFlags([]string{"-quiesce"}); err != nil || c.settle != 22*time.Second {
		t.Errorf("-quiesce: settle %v, %v; want 22s (20 s to quiesce and 2 s)", c.settle, err)
	}
	c, err = parseFlags([]string{"-groups", "1, 1000", "-logdb", "tan,pebble", "-active", "10", "-logdb-mem", "tiny"})
	if err != nil || fmt.Sprintf("%v %v %v %v", c.groups, c.logdbs, c.active, c.cluster.logdbMem) != "[1 1000] [tan pebble] 10 tiny" {
		t.Errorf("parsed %v, %v", c, err)
	}
	if cfg := c.cluster.nodeHostConfig("d", "127.0.0.1:1"); cfg.Expert.LogDB.KVWriteBufferSize != 4<<20 {
		t.Errorf("-logdb-mem tiny: KVWriteBufferSize %d", cfg.Expert.LogDB.KVWriteBufferSize)
	}
	for _, bad := range [][]string{
		{"-groups", "0"}, {"-logdb", "rocksdb"}, {"-active", "-1"}, {"-writers", "0"},
		{"-election-rtt", "2"}, {"-heartbeat-rtt", "0"}, {"-logdb-mem", "huge"}, {"-log", "loud"}, {"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestSmoke runs one small configuration of each LogDB end to end: three
// NodeHosts, two shards, one active, writes through the leaders.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NodeHosts")
	}
	cfg, err := parseFlags([]string{"-groups", "2", "-active", "1", "-logdb", "pebble,tan", "-logdb-mem", "tiny",
		"-writers", "4", "-idle", "100ms", "-warmup", "200ms", "-duration", "500ms"})
	if err != nil {
		t.Fatal(err)
	}
	for _, logdb := range cfg.logdbs {
		r, err := runOne(context.Background(), cfg, logdb, 2)
		if err != nil {
			t.Fatalf("%s: %v", logdb, err)
		}
		if r.load.writes == 0 || r.errors != 0 || r.load.shardsWritten != 1 || r.active != 1 {
			t.Errorf("%s: writes %d, errors %d (%v), shards written %d, active %d", logdb, r.load.writes, r.errors, r.firstErr, r.load.shardsWritten, r.active)
		}
	}
}
