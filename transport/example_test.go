package transport_test

import (
	"context"
	"fmt"
	"log"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/transport"
)

// node stands for the raft node: it receives messages on a channel.
type node struct{ recv chan *raftpb.Message }

func (n node) Process(m *raftpb.Message)                  { n.recv <- m }
func (n node) ReportUnreachable(uint64)                   {}
func (n node) ReportSnapshot(uint64, raft.SnapshotStatus) {}
func (n node) ReportRefused(uint64, error)                {}
func (n node) ServeRequest(_ context.Context, from uint64, req []byte) ([]byte, error) {
	return []byte(fmt.Sprintf("hello %d, you said %q", from, req)), nil
}

func Example() {
	const cluster = 0x5eed
	n1, n2 := node{make(chan *raftpb.Message, 1)}, node{make(chan *raftpb.Message, 1)}
	t1, err := transport.New(transport.Config{ID: 1, ClusterID: cluster, ListenAddr: "127.0.0.1:0", Handler: n1})
	if err != nil {
		log.Fatal(err)
	}
	defer t1.Close()
	t2, err := transport.New(transport.Config{ID: 2, ClusterID: cluster, ListenAddr: "127.0.0.1:0", Handler: n2})
	if err != nil {
		log.Fatal(err)
	}
	defer t2.Close()
	t2.AddPeer(1, t1.Addr().String()) // t2 accepts t1's connections
	t1.AddPeer(2, t2.Addr().String()) // t1 connects to t2; messages queue meanwhile

	from, to, term := uint64(1), uint64(2), uint64(5)
	t1.Send([]*raftpb.Message{{Type: raftpb.MsgHeartbeat.Enum(), From: &from, To: &to, Term: &term}})
	m := <-n2.recv
	fmt.Println(m.GetType(), "from", m.GetFrom(), "term", m.GetTerm())

	resp, err := t2.Call(context.Background(), 1, []byte("ping"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(resp))
	// Output:
	// MsgHeartbeat from 1 term 5
	// hello 2, you said "ping"
}
