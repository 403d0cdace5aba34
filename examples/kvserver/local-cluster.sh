#!/usr/bin/env bash
# Starts a three-member kvserver cluster on 127.0.0.1 (clients on 8001-8003,
# peers on 7001-7003, data in ./kvserver-data/local/<id>, logs in
# ./kvserver-data/local/<id>.log) and waits until every member serves. Stop it
# with: pkill -f kvserver-local
#
#   examples/kvserver/local-cluster.sh [extra kvserver flags…]
#
# Its data dirs are its own (not kvserver-data/<id>, which a plain
# "go run ./examples/kvserver" uses for a one-member cluster of its own): run
# again, it resumes the same cluster; to start over, stop it and delete
# kvserver-data/local.
#
# The timers are short so that the README's walkthrough takes seconds:
# a learner is ready after 2s of being caught up; a voter unreachable for 5s
# is swapped for a ready standby.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=kvserver-data/local
if pgrep -f "kvserver-local --id" >/dev/null 2>&1; then
  echo "local-cluster.sh: kvserver-local members are already running; stop them first: pkill -f kvserver-local" >&2
  exit 1
fi
for port in 8001 8002 8003 7001 7002 7003; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "local-cluster.sh: 127.0.0.1:$port is in use (another kvserver, e.g. 'go run ./examples/kvserver'?); stop it first" >&2
    exit 1
  fi
done
mkdir -p "$root"
if ls "$root"/[0-9]* >/dev/null 2>&1; then
  echo "local-cluster.sh: resuming the cluster in $root (to start over: pkill -f kvserver-local; rm -rf $root)" >&2
fi
go build -o kvserver-data/kvserver-local ./examples/kvserver
go build -o kvserver-data/kvctl ./examples/kvctl
cluster="1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"
for id in 1 2 3; do
  nohup kvserver-data/kvserver-local --id "$id" --data-dir "$root/$id" --initial-cluster "$cluster" \
    --stabilization 2s --failover-after 5s "$@" >"$root/$id.log" 2>&1 &
done
failed=0
for id in 1 2 3; do
  for _ in $(seq 1 100); do
    if curl -fs "127.0.0.1:800$id/healthz" >/dev/null 2>&1; then continue 2; fi
    sleep 0.1
  done
  failed=1
  echo "local-cluster.sh: member $id does not serve; the end of $root/$id.log:" >&2
  tail -n 3 "$root/$id.log" >&2 || true
done
if [ "$failed" = 1 ]; then
  echo "local-cluster.sh: if its data dirs hold an older or another cluster, start over: pkill -f kvserver-local; rm -rf $root" >&2
  exit 1
fi
kvserver-data/kvctl --endpoints 127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003 status
