package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// diskHistograms are the storage-commit histograms each system exports on
// its client port's /metrics: one commit is one group of entries made
// durable (kvserver: a bbolt transaction, two fdatasyncs; etcd: a WAL
// fsync for the raft log, and a bbolt commit of the applied state, batched
// by time).
var diskHistograms = map[string][]string{
	"kvserver": {"understudy_disk_backend_commit_duration_seconds"},
	"etcd":     {"etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"},
}

// shortName is how the report names a histogram.
func shortName(h string) string {
	switch {
	case strings.Contains(h, "wal_fsync"):
		return "wal fsync"
	case strings.Contains(h, "backend_commit"):
		return "bbolt commit"
	}
	return h
}

// diskSample is each member's histogram counts and sums at one moment.
type diskSample []map[string]float64

// scrapeDisk reads the disk histograms' _count and _sum of every member;
// a member that cannot be read gives an empty map.
func scrapeDisk(ctx context.Context, c *cluster) diskSample {
	s := make(diskSample, len(c.clients))
	for i, a := range c.clients {
		s[i] = map[string]float64{}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, h := range diskHistograms[c.system] {
				for _, suf := range []string{"_count ", "_sum "} {
					if strings.HasPrefix(line, h+suf) {
						v, err := strconv.ParseFloat(strings.TrimSpace(line[len(h+suf):]), 64)
						if err == nil {
							s[i][h+strings.TrimSpace(suf)] = v
						}
					}
				}
			}
		}
		resp.Body.Close()
		cancel()
	}
	return s
}

// diskReport says, per member, how many storage commits per second the
// run made, how long one took on average, and how many requests one
// commit carried.
func diskReport(system string, before, after diskSample, elapsed time.Duration, ops int) string {
	var parts []string
	for _, h := range diskHistograms[system] {
		var ms []string
		for i := range after {
			if i >= len(before) {
				break
			}
			n := after[i][h+"_count"] - before[i][h+"_count"]
			sum := after[i][h+"_sum"] - before[i][h+"_sum"]
			if n <= 0 {
				ms = append(ms, fmt.Sprintf("m%d -", i+1))
				continue
			}
			ms = append(ms, fmt.Sprintf("m%d %.0f/s %.2fms %.1f req/commit", i+1, n/elapsed.Seconds(), 1000*sum/n, float64(ops)/n))
		}
		parts = append(parts, shortName(h)+": "+strings.Join(ms, ", "))
	}
	return strings.Join(parts, "; ")
}
