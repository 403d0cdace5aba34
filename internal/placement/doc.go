// Package placement holds a host's pure placement decisions across the
// hosts its groups span: which groups' leadership to move where
// (LeaderMoves). It does no I/O: the Host gathers the view (its groups,
// their voters' hosts, the hosts' liveness) and carries the moves out.
// See "Leaders spread over hosts" in docs/architecture.md.
package placement
