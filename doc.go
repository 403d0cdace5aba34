// Package understudy is a library for replicated state machines on etcd's Raft
// whose membership is learner-aware.
//
// The packages:
//
//   - raft: the Node, which owns etcd's RawNode, persists, replicates and applies
//     commands to the host's StateMachine.
//   - confchange: pure membership planning, learner readiness and the promotion policy.
//   - storage: the durable raft log, hard state and snapshots on bbolt.
//   - transport: the TCP (+mutual TLS) peer transport with snapshot streaming.
package understudy
