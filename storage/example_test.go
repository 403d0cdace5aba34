package storage_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/understudy-raft/understudy/storage"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The node's use of a Store: persist each MsgStorageAppend with one Save,
// read the log back, snapshot the state machine to a file and compact.
func Example() {
	dir, err := os.MkdirTemp("", "understudy-storage")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := storage.Open(dir, storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	var ents []*raftpb.Entry
	for i := uint64(1); i <= 5; i++ {
		ents = append(ents, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: fmt.Appendf(nil, "cmd %d", i)})
	}
	hs := &raftpb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(5)}
	if err := s.Save(hs, ents, nil); err != nil { // one bbolt commit
		log.Fatal(err)
	}

	got, err := s.Entries(2, 4, 1<<20)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range got {
		fmt.Printf("%d: %s\n", e.GetIndex(), e.GetData())
	}

	// Snapshot the state machine at index 4, streamed to a file, then
	// compact the log up to it.
	snap, err := s.CreateSnapshot(4, &raftpb.ConfState{Voters: []uint64{1}}, func(w io.Writer) error {
		_, err := io.WriteString(w, "state after cmd 4")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Compact(4); err != nil {
		log.Fatal(err)
	}
	first, _ := s.FirstIndex()
	fmt.Println("first index:", first)

	// Restore (or send) it: the reader verifies the checksum.
	rc, size, err := s.OpenSnapshot(snap)
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, rc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("snapshot at %d: %q (%d bytes)\n", snap.GetMetadata().GetIndex(), b.String(), size)
	// Output:
	// 2: cmd 2
	// 3: cmd 3
	// first index: 5
	// snapshot at 4: "state after cmd 4" (17 bytes)
}

// A host's engine on the Pebble backend: many groups, each a Store; the
// data dir keeps its backend, so a restart need not name it.
func ExampleOpenEngine_pebble() {
	dir, err := os.MkdirTemp("", "understudy-engine")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	e, err := storage.OpenEngine(dir, storage.EngineOptions{Backend: storage.BackendPebble})
	if err != nil {
		log.Fatal(err)
	}
	for g := uint64(1); g <= 3; g++ {
		s, err := e.Group(g, storage.GroupOptions{})
		if err != nil {
			log.Fatal(err)
		}
		ent := &raftpb.Entry{Index: proto.Uint64(1), Term: proto.Uint64(1), Data: fmt.Appendf(nil, "group %d", g)}
		if err := s.Save(nil, []*raftpb.Entry{ent}, nil); err != nil {
			log.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		log.Fatal(err)
	}

	e, err = storage.OpenEngine(dir, storage.EngineOptions{}) // the backend the dir holds
	if err != nil {
		log.Fatal(err)
	}
	groups, _ := e.Groups()
	fmt.Println(e.Backend(), groups)
	if err := e.Close(); err != nil {
		log.Fatal(err)
	}
	_, err = storage.OpenEngine(dir, storage.EngineOptions{Backend: storage.BackendBolt})
	fmt.Println(errors.Is(err, storage.ErrBackend))
	// Output:
	// pebble [1 2 3]
	// true
}
