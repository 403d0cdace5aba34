package understudy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// Many groups per process: three hosts (here in one process, each with its
// own data dir and port) run two raft groups, each with a replica on every
// host. A host has one storage engine and one peer port whatever the
// number of groups; a group's replica IDs are its own.
func ExampleHost() {
	dir, _ := os.MkdirTemp("", "understudy-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var hosts []*understudy.Host
	var addrs []string
	for i := range 3 {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		h, err := understudy.NewHost(understudy.HostConfig{
			DataDir: filepath.Join(dir, fmt.Sprint(i)), Listener: ln, AdvertisePeer: ln.Addr().String(),
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer h.Close(ctx)
		hosts, addrs = append(hosts, h), append(addrs, ln.Addr().String())
	}
	leaders := map[uint64]*understudy.Group{}
	for _, gid := range []uint64{1, 2} {
		var members []raft.Member
		for i, a := range addrs {
			members = append(members, raft.Member{ID: uint64(i + 1), PeerAddr: a})
		}
		for i, h := range hosts {
			g, err := h.StartGroup(ctx, understudy.GroupConfig{GroupID: gid, ID: uint64(i + 1), InitialMembers: members}, kv.New())
			if err != nil {
				fmt.Println(err)
				return
			}
			if i == 0 {
				leaders[gid] = g // any replica: followers forward
			}
		}
	}
	_, _ = leaders[1].Propose(ctx, kv.Put("shard", "one"))
	_, _ = leaders[2].Propose(ctx, kv.Put("shard", "two"))
	for _, gid := range []uint64{1, 2} {
		g, _ := hosts[2].Group(gid)
		v, _ := g.Read(ctx, []byte("shard"))
		fmt.Printf("group %d on host 3: %s\n", gid, v)
	}
	fmt.Println("groups on host 3:", hosts[2].Groups())
	// Output:
	// group 1 on host 3: one
	// group 2 on host 3: two
	// groups on host 3: [1 2]
}
