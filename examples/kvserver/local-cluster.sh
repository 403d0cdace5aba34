#!/usr/bin/env bash
# Starts a three-member kvserver cluster on 127.0.0.1 (clients on 8001-8003,
# peers on 7001-7003, data in ./kvserver-data/<id>, logs in ./kvserver-data/<id>.log)
# and waits until every member serves. Stop it with: pkill -f kvserver-local
#
#   examples/kvserver/local-cluster.sh [extra kvserver flags…]
#
# The timers are short so that the README's walkthrough takes seconds:
# a learner is ready after 2s of being caught up; a voter unreachable for 5s
# is swapped for a ready standby.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p kvserver-data
go build -o kvserver-data/kvserver-local ./examples/kvserver
go build -o kvserver-data/kvctl ./examples/kvctl
cluster="1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"
for id in 1 2 3; do
  nohup kvserver-data/kvserver-local --id "$id" --initial-cluster "$cluster" \
    --stabilization 2s --failover-after 5s "$@" >"kvserver-data/$id.log" 2>&1 &
done
for id in 1 2 3; do
  for _ in $(seq 1 100); do
    if curl -fs "127.0.0.1:800$id/healthz" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
done
kvserver-data/kvctl --endpoints 127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003 status
