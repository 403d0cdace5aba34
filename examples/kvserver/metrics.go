package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// metrics are the server's Prometheus metrics, on a registry of its own (no
// globals). Names follow etcd's where etcd has one, with understudy_ in
// place of etcd_.
type metrics struct {
	s          *server
	reg        *prometheus.Registry
	pending    prometheus.Gauge
	failed     prometheus.Counter
	leaderSeen prometheus.Counter
	promotions prometheus.Counter
	promoteErr *prometheus.CounterVec
	httpErrors *prometheus.CounterVec
}

// newMetrics makes s's metrics, registered, and starts counting the
// node's events.
func newMetrics(s *server) *metrics {
	m := newServerMetrics()
	m.s = s
	m.reg.MustRegister(m.pending, m.failed, m.leaderSeen, m.promotions, m.promoteErr, m.httpErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&nodeCollector{s: s})
	go m.watch()
	return m
}

// newServerMetrics makes the server's own metrics, not registered yet.
func newServerMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{Name: "understudy_server_proposals_pending",
		Help: "Proposals of this member's clients waiting to be applied."})
	m.failed = prometheus.NewCounter(prometheus.CounterOpts{Name: "understudy_server_proposals_failed_total",
		Help: "Proposals of this member's clients that failed (no leader, a leader change, a timeout)."})
	m.leaderSeen = prometheus.NewCounter(prometheus.CounterOpts{Name: "understudy_server_leader_changes_seen_total",
		Help: "Leader changes this member has seen."})
	m.promotions = prometheus.NewCounter(prometheus.CounterOpts{Name: "understudy_learner_promote_successes_total",
		Help: "Learners this member saw become voters (promoted by the policy or by hand)."})
	m.promoteErr = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "understudy_learner_promote_failures_total",
		Help: "Promotions asked of this member's API and refused, by reason (learner_not_ready, …)."}, []string{"reason"})
	m.httpErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "understudy_http_errors_total",
		Help: "Error answers of the client API, by code."}, []string{"code"})
	for _, reason := range []string{"learner_not_ready", "too_many_voters", "member_read_only", "quorum_at_risk", "unknown_member", "change_in_progress", "policy_would_undo"} {
		m.promoteErr.WithLabelValues(reason) // present at 0 from the start
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// watch counts leader changes and promotions (a learner that became a
// voter, by the policy or by hand) from the node's events.
func (m *metrics) watch() {
	ch, cancel := m.s.h.Subscribe(256)
	defer cancel()
	var learners []uint64
	if st, err := m.s.h.Status(context.Background()); err == nil {
		learners = st.Learners
	}
	for e := range ch {
		switch e.Type {
		case raft.EventLeaderChanged:
			m.leaderSeen.Inc()
		case raft.EventMembershipChanged:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := m.s.h.Status(ctx)
			cancel()
			if err != nil {
				continue
			}
			for _, id := range st.Voters {
				if slices.Contains(learners, id) {
					m.promotions.Inc()
				}
			}
			learners = append(slices.Clone(st.Learners), st.LearnersNext...)
		}
	}
}

var (
	descHasLeader = prometheus.NewDesc("understudy_server_has_leader", "1 if this member knows a leader.", nil, nil)
	descIsLeader  = prometheus.NewDesc("understudy_server_is_leader", "1 if this member leads.", nil, nil)
	descIsLearner = prometheus.NewDesc("understudy_server_is_learner", "1 if this member is a learner.", nil, nil)
	descCommitted = prometheus.NewDesc("understudy_server_proposals_committed_total", "The commit index this member knows.", nil, nil)
	descApplied   = prometheus.NewDesc("understudy_server_proposals_applied_total", "The index this member applied.", nil, nil)
	descTerm      = prometheus.NewDesc("understudy_server_term", "The current term.", nil, nil)
	descLag       = prometheus.NewDesc("understudy_member_lag_entries", "Entries a member is behind the leader's last index, as the leader sees it (every member that knows a leader exports the leader's view; the leader's own row is 0).", []string{"member"}, nil)
	descReady     = prometheus.NewDesc("understudy_member_ready", "1 if a member is ready (caught up and stable), as the leader sees it (every member that knows a leader exports the leader's view; the leader's own row is 1).", []string{"member", "role"}, nil)
	descStabil    = prometheus.NewDesc("understudy_member_stabilizing", "1 while a member is caught up and in contact but not yet for --stabilization (understudy_member_ready is then 0: not known to be ready yet, not lagging): after a leader change every member's clock starts again under the new leader, voters' included. As the leader sees it, like understudy_member_ready.", []string{"member", "role"}, nil)
	descCommits   = prometheus.NewDesc("understudy_disk_backend_commit_duration_seconds", "Duration of storage commits (fsyncs included).", nil, nil)
	descFsync     = prometheus.NewDesc("understudy_disk_wal_fsync_duration_seconds", "Duration of the disk part of each storage commit: on bbolt, writing the commit's pages and fdatasyncing, then its meta page and fdatasyncing again (bbolt's transaction write time; in-memory work excluded); on Pebble (--storage-engine, the default for a new data dir), the batch's commit: its log write, its one fdatasync and its memtable insert.", nil, nil)
	descSnapDur   = prometheus.NewDesc("understudy_disk_snapshot_save_duration_seconds", "Duration of writing a local snapshot file.", nil, nil)
	descSnapBytes = prometheus.NewDesc("understudy_disk_snapshot_bytes_total", "Bytes of snapshot files written or received.", nil, nil)
	descSnaps     = prometheus.NewDesc("understudy_disk_snapshots_total", "Local snapshots created.", nil, nil)
	descRTT       = prometheus.NewDesc("understudy_network_peer_round_trip_time_seconds", "Round trip to a peer (ping to pong).", []string{"to"}, nil)
	descDropped   = prometheus.NewDesc("understudy_network_peer_dropped_messages_total", "Messages to a peer dropped by the transport, by why.", []string{"to", "why"}, nil)
	descSent      = prometheus.NewDesc("understudy_network_peer_sent_bytes_total", "Bytes sent to a peer.", []string{"to"}, nil)
	descRecv      = prometheus.NewDesc("understudy_network_peer_received_bytes_total", "Bytes received from a peer.", []string{"to"}, nil)
	descSnapSent  = prometheus.NewDesc("understudy_network_snapshot_send_duration_seconds", "Duration of snapshot sends to a peer (successes).", []string{"to"}, nil)
	descQuiesced  = prometheus.NewDesc("understudy_group_quiesced", "1 while the group is quiesced on this member (--quiesce, the default): it neither ticks nor sends until something wakes it.", nil, nil)
	descWakes     = prometheus.NewDesc("understudy_group_wakes_total", "Quiesced groups of this member's host woken, by cause (proposal, read, call, message, refused, nudge, leaderDead, hostDown, leaderGone, policy, hostUp).", []string{"cause"}, nil)
	descHandedOn  = prometheus.NewDesc("understudy_relay_handed_on_total", "The leader's messages (appends, heartbeats) this member handed on to standbys as a relay.", nil, nil)
	descRelayed   = prometheus.NewDesc("understudy_relayed_standbys", "On the leader, the standbys it feeds through relays now (--relay); 0 on the other members.", nil, nil)
	descHostLive  = prometheus.NewDesc("understudy_peer_host_live", "1 if the host a peer runs on is live: its host link answers pings (0 also while that is not known).", []string{"peer"}, nil)
)

// nodeCollector reads the node, storage and transport at scrape time.
type nodeCollector struct {
	s    *server
	view memberView
}

// The member families (lag, ready) are the leader's view, which a follower
// or learner asks of the leader: a scrape waits for it at most
// memberViewWait, reuses a view younger than memberViewFresh, and falls back
// on one younger than memberViewStale when the leader does not answer in
// time. Without a view (no leader known, none recent) the families are
// left out rather than stale.
const (
	memberViewFresh = time.Second
	memberViewWait  = 500 * time.Millisecond
	memberViewStale = 10 * time.Second
)

// memberView caches the leader's view of the members for scrapes.
type memberView struct {
	mu sync.Mutex
	at time.Time
	m  raft.Membership
	ok bool
}

// membership returns the leader's view of the members, false without a
// leader or a recent view.
func (c *nodeCollector) membership() (raft.Membership, bool) {
	leader := c.s.h.Leader()
	if leader == 0 {
		return raft.Membership{}, false
	}
	v := &c.view
	v.mu.Lock() // one scrape asks at a time; the others then reuse its answer
	defer v.mu.Unlock()
	now := time.Now()
	if v.ok && v.m.Leader == leader && now.Sub(v.at) < memberViewFresh {
		return v.m, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), memberViewWait)
	defer cancel()
	if m, err := c.s.h.Membership(ctx); err == nil {
		v.m, v.at, v.ok = m, time.Now(), true
		return m, true
	}
	if v.ok && v.m.Leader == leader && now.Sub(v.at) < memberViewStale {
		return v.m, true
	}
	return raft.Membership{}, false
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHasLeader, descIsLeader, descIsLearner, descCommitted, descApplied, descTerm,
		descLag, descReady, descStabil, descCommits, descFsync, descSnapDur, descSnapBytes, descSnaps, descRTT, descDropped, descSent, descRecv, descSnapSent,
		descQuiesced, descWakes, descHostLive, descHandedOn, descRelayed} {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.s.h
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ch <- prometheus.MustNewConstMetric(descHasLeader, prometheus.GaugeValue, b2f(h.Leader() != 0))
	ch <- prometheus.MustNewConstMetric(descIsLeader, prometheus.GaugeValue, b2f(h.IsLeader()))
	if st, err := h.Status(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(descIsLearner, prometheus.GaugeValue, b2f(st.Role == raft.RoleLearner))
		ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.CounterValue, float64(st.Commit))
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(st.Applied))
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(st.Term))
		ch <- prometheus.MustNewConstMetric(descQuiesced, prometheus.GaugeValue, b2f(st.Quiesced))
		ch <- prometheus.MustNewConstMetric(descHandedOn, prometheus.CounterValue, float64(st.RelayedOn))
		ch <- prometheus.MustNewConstMetric(descRelayed, prometheus.GaugeValue, float64(relayedStandbys(st)))
	}
	if host := h.Host(); host != nil && host.Scheduler() != nil {
		wakes := host.Scheduler().Stats().Wakes
		causes := make([]string, 0, len(wakes))
		for c := range wakes {
			causes = append(causes, c)
		}
		slices.Sort(causes)
		for _, c := range causes {
			ch <- prometheus.MustNewConstMetric(descWakes, prometheus.CounterValue, float64(wakes[c]), c)
		}
	}
	if ms, ok := c.membership(); ok {
		for _, m := range ms.Members {
			id := fmt.Sprint(m.ID)
			role := "learner"
			if m.Role == confchange.RoleVoter {
				role = "voter"
			}
			lag, ready, stabilizing := float64(m.Lag), b2f(m.Readiness.Ready()), b2f(m.Readiness.Code == confchange.ReasonStabilizing)
			if m.ID == ms.Leader {
				lag, ready, stabilizing = 0, 1, 0 // the leader is its own reference
			}
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, lag, id)
			ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready, id, role)
			ch <- prometheus.MustNewConstMetric(descStabil, prometheus.GaugeValue, stabilizing, id, role)
		}
	}
	sm := h.Storage().Metrics()
	ch <- storageHistogram(descCommits, sm.CommitDuration)
	ch <- storageHistogram(descFsync, sm.SyncDuration)
	ch <- storageHistogram(descSnapDur, sm.SnapshotDuration)
	ch <- prometheus.MustNewConstMetric(descSnapBytes, prometheus.CounterValue, float64(sm.SnapshotBytes))
	ch <- prometheus.MustNewConstMetric(descSnaps, prometheus.CounterValue, float64(sm.Snapshots))
	ts := h.Transport().Stats()
	for _, p := range ts.Peers {
		to := fmt.Sprint(p.ID)
		ch <- transportHistogram(descRTT, p.RTTHistory, to)
		ch <- transportHistogram(descSnapSent, p.SnapshotSendDuration, to)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(p.DroppedQueueFull), to, "queue_full")
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(p.DroppedDisconnected), to, "disconnected")
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(p.DroppedTooLarge), to, "too_large")
		ch <- prometheus.MustNewConstMetric(descSent, prometheus.CounterValue, float64(p.BytesSent), to)
		ch <- prometheus.MustNewConstMetric(descRecv, prometheus.CounterValue, float64(p.BytesReceived), to)
		_, live := h.Transport().HostContact(p.ID)
		ch <- prometheus.MustNewConstMetric(descHostLive, prometheus.GaugeValue, b2f(live), to)
	}
}

func storageHistogram(d *prometheus.Desc, h storage.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Buckets))
	for _, b := range h.Buckets {
		buckets[b.UpperBound.Seconds()] = b.Count
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets)
}

func transportHistogram(d *prometheus.Desc, h transport.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Buckets))
	for _, b := range h.Buckets {
		buckets[b.UpperBound.Seconds()] = b.Count
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}
