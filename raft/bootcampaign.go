package raft

import etcdraft "go.etcd.io/raft/v3"

// A new cluster's first election. Left to raft's randomized election
// timeouts, the member that starts first wins it: a host that starts its
// groups a moment before the others leads nearly all of them (7,408 of
// 10,000 groups on one of three hosts), and its loss then costs most of the
// groups an election at once. Instead, the member that ranks first among
// the initial voters by a hash of the cluster and member IDs (voterOrder,
// the same on every member) campaigns as soon as the bootstrap's
// configuration is applied, so that leaders spread over the hosts as the
// hash spreads them. Its peers may not run yet (a host starting thousands
// of groups starts them over a minute): with PreVote it campaigns again on
// each tick until a leader is known, for at most bootCampaignElections
// election timeouts — a prevote changes no term, so a round into the void
// costs a message per peer; without PreVote, once. Campaign is a step raft
// may take at any time; whoever wins, raft's election rules hold.

// bootCampaignElections bounds, in election timeouts, how long the
// first-ranked member of a new cluster keeps campaigning for its first
// leader (PreVote on).
const bootCampaignElections = 10

// bootCampaign runs on each tick of a node that bootstrapped a new
// cluster, until a leader is known: once the bootstrap's configuration is
// applied (raft refuses to campaign with configuration entries unapplied),
// the first-ranked voter campaigns.
func (n *Node) bootCampaign() {
	l := &n.loop
	if !l.bootCampaign {
		return
	}
	st := l.rn.BasicStatus()
	if st.Lead != 0 || st.RaftState == etcdraft.StateLeader || st.RaftState == etcdraft.StateCandidate ||
		l.ticks > uint64(bootCampaignElections*n.cfg.ElectionTicks) {
		l.bootCampaign = false
		return
	}
	if n.applied.get() < st.GetCommit() {
		return // the bootstrap's entries are not applied yet
	}
	if n.rankAmongVoters(0, nil) != 0 {
		l.bootCampaign = false
		return
	}
	if n.cfg.DisablePreVote {
		l.bootCampaign = false // a vote raises the term: once
	}
	_ = l.rn.Campaign()
}
