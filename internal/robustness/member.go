package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// memberEndpoint is one run of an in-process member, through the
// library's public calls.
type memberEndpoint struct {
	id       uint64
	node     *raft.Node
	sm       *kv.Store
	sessions *clientSessions
	// reads and writes count the linearizable reads and the writes this
	// run of the member completed (the fleet scenario's check).
	reads, writes atomic.Int64
}

// clientSessions maps each traffic client to its session (RegisterClient),
// shared by every endpoint: a session is the cluster's.
type clientSessions struct {
	mu sync.Mutex
	m  map[uint64]uint64
}

// get returns client's session, registering one through node if needed.
func (cs *clientSessions) get(ctx context.Context, node *raft.Node, client uint64) (uint64, error) {
	cs.mu.Lock()
	id, ok := cs.m[client]
	cs.mu.Unlock()
	if ok {
		return id, nil
	}
	id, err := node.RegisterClient(ctx)
	if err != nil {
		return 0, err
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[uint64]uint64{}
	}
	if have, ok := cs.m[client]; ok {
		return have, nil
	}
	cs.m[client] = id
	return id, nil
}

// expired forgets client's session.
func (cs *clientSessions) expired(client, session uint64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m[client] == session {
		delete(cs.m, client)
	}
}

func (e *memberEndpoint) Name() string { return fmt.Sprintf("member %d (run %p)", e.id, e.node) }

func (e *memberEndpoint) StaleGet(key string) (string, bool) {
	v, err := e.node.StaleRead([]byte(key))
	if err != nil {
		return "", false
	}
	return string(v), true
}

func (e *memberEndpoint) Do(ctx context.Context, id [2]uint64, in Input) (Output, Result) {
	var out Output
	if in.Op == "get" {
		v, err := e.node.Read(ctx, []byte(in.Key))
		if err != nil {
			return out, NoEffect
		}
		out.Value = string(v)
		e.reads.Add(1)
		return out, Done
	}
	var cmd []byte
	switch in.Op {
	case "put":
		cmd = kv.Put(in.Key, in.Value)
	case "delete":
		cmd = kv.Delete(in.Key)
	case "cas":
		cmd = kv.CAS(in.Key, in.Prev, in.Value)
	}
	session, err := e.sessions.get(ctx, e.node, id[0])
	if err != nil {
		return out, NoEffect // nothing proposed but a registration
	}
	_, err = e.node.ProposeWithID(ctx, raft.RequestID{Client: session, Seq: id[1]}, cmd)
	if errors.Is(err, raft.ErrSessionExpired) {
		e.sessions.expired(id[0], session)
	}
	switch {
	case err == nil:
		out.OK = true
		e.writes.Add(1)
		return out, Done
	case errors.Is(err, kv.ErrCompareFailed):
		e.writes.Add(1)
		return out, Done
	case errors.Is(err, raft.ErrDuplicateRequest) && in.Op != "cas":
		return out, Done // applied once, by an earlier attempt (its result was too large to keep)
	case errors.Is(err, raft.ErrProposalDropped) || errors.Is(err, raft.ErrNotProposed) || errors.Is(err, raft.ErrTooLarge):
		return out, NoEffect
	default:
		return out, Unknown
	}
}

// endpoints caches one endpoint per run of each member, so that stale
// reads are compared within one run (a restarted member replays its log
// and may briefly show less than before it stopped).
type endpoints struct {
	c        *cluster.Cluster
	mu       sync.Mutex
	runs     map[*raft.Node]*memberEndpoint
	sessions clientSessions
}

func (es *endpoints) pick(rng *rand.Rand) Endpoint {
	running := es.c.Running()
	if len(running) == 0 {
		return nil
	}
	m := running[rng.Intn(len(running))]
	return es.of(m)
}

func (es *endpoints) of(m *cluster.Member) *memberEndpoint {
	// The cluster swaps Node on restart; one endpoint per run.
	node := m.Node
	es.mu.Lock()
	defer es.mu.Unlock()
	if e, ok := es.runs[node]; ok {
		return e
	}
	e := &memberEndpoint{id: m.ID, node: node, sm: m.SM, sessions: &es.sessions}
	es.runs[node] = e
	return e
}
