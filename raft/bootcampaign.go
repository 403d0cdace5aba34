package raft

import etcdraft "go.etcd.io/raft/v3"

// A new cluster's first election. Left to raft's randomized election
// timeouts, the member that starts first wins it: a host that starts its
// groups a moment before the others leads nearly all of them (7,408 of
// 10,000 groups on one of three hosts), and its loss then costs most of the
// groups an election at once. Instead, the member that ranks first among
// the initial voters by a hash of the cluster and member IDs (campaignRank's
// order, the same on every member) campaigns as soon as the bootstrap's
// configuration is applied, so that leaders spread over the hosts as the
// hash spreads them. It is one Campaign — with PreVote a prevote first —
// which raft may do at any time: if the others are not up yet, raft's
// election timeouts elect someone as before.

// bootCampaign runs on a tick of a node that bootstrapped a new cluster:
// once the bootstrap's configuration is applied (raft refuses to campaign
// with configuration entries unapplied), the first-ranked voter campaigns,
// once, if no leader is known yet.
func (n *Node) bootCampaign() {
	l := &n.loop
	if !l.bootCampaign {
		return
	}
	st := l.rn.BasicStatus()
	if st.Lead != 0 || st.RaftState != etcdraft.StateFollower || st.GetTerm() > 1 {
		l.bootCampaign = false
		return
	}
	if n.applied.get() < st.GetCommit() {
		return // the bootstrap's entries are not applied yet
	}
	l.bootCampaign = false
	if n.rankAmongVoters(0, nil) == 0 {
		_ = l.rn.Campaign()
	}
}
