#!/usr/bin/env bash
# Starts a fleet on 127.0.0.1: 3 voters and 24 standbys (learners beyond the
# target voter count), every member its own kvserver process, the leader
# feeding the standbys through relays (--relay), then prints
# `kvctl member list` and keeps them running until Ctrl-C (or the script's
# exit), which stops them all and deletes their data.
#
#   examples/kvserver/fleet.sh [extra kvserver flags for every member…]
#
# Environment:
#   STANDBYS=24        how many standbys (1-61; --max-learners is set to it)
#   PORT_BASE=9000     member N listens on PORT_BASE+100+N (peers) and
#                      PORT_BASE+200+N (clients): 9101-9127, 9201-9227
#   KVSERVER, KVCTL    prebuilt binaries (default: built into the data dir)
#
# The voters fsync; the standbys run with --unsafe-no-fsync: on one machine
# they stand in for members on machines of their own, and 24 processes
# syncing one disk would measure the disk. Standbys join the way an
# operator adds a member (docs/operations.md, "Adding a member"): kvctl
# member add, then kvserver --join --peers, one at a time, each started
# once the previous one serves. See "A fleet of standbys with kvserver" in
# docs/operations.md for what to watch.
set -euo pipefail
cd "$(dirname "$0")/../.."
standbys=${STANDBYS:-24}
base=${PORT_BASE:-9000}
if ! [[ "$standbys" =~ ^[0-9]+$ ]] || [ "$standbys" -lt 1 ] || [ "$standbys" -gt 61 ]; then
  echo "fleet.sh: STANDBYS=$standbys: want 1 to 61" >&2
  exit 2
fi
last=$((3 + standbys))
for id in $(seq 1 "$last"); do
  for port in $((base + 100 + id)) $((base + 200 + id)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "fleet.sh: 127.0.0.1:$port is in use (another fleet.sh? set PORT_BASE)" >&2
      exit 1
    fi
  done
done
root=$(mktemp -d "${TMPDIR:-/tmp}/kvfleet.XXXXXX")
pids=()
stop() {
  trap - INT TERM EXIT
  if [ "${#pids[@]}" -gt 0 ]; then
    echo "fleet.sh: stopping ${#pids[@]} members" >&2
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  rm -rf "$root"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
kvserver=${KVSERVER:-}
kvctl=${KVCTL:-}
if [ -z "$kvserver" ]; then
  kvserver=$root/kvserver
  go build -o "$kvserver" ./examples/kvserver
fi
if [ -z "$kvctl" ]; then
  kvctl=$root/kvctl
  go build -o "$kvctl" ./examples/kvctl
fi
peer() { echo "127.0.0.1:$((base + 100 + $1))"; }
client() { echo "127.0.0.1:$((base + 200 + $1))"; }
# The timers are short so that a fleet forms in about a minute: a standby is
# ready after 2s caught up; a voter unreachable for 10s is swapped for one.
common=(--relay --stabilization 2s --failover-after 10s)
start() { # start ID FLAGS…: a member in the background, its log in the data dir
  local id=$1
  shift
  "$kvserver" --id "$id" --data-dir "$root/$id" --listen-peer "$(peer "$id")" --listen-client "$(client "$id")" \
    "${common[@]}" "$@" >"$root/$id.log" 2>&1 &
  pids+=("$!")
}
serves() { # serves ID: wait until member ID answers /healthz
  for _ in $(seq 1 300); do
    if curl -fs "$(client "$1")/healthz" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "fleet.sh: member $1 does not serve; the end of its log:" >&2
  tail -n 5 "$root/$1.log" >&2 || true
  return 1
}
cluster="1=$(peer 1),2=$(peer 2),3=$(peer 3)"
voters="$(client 1),$(client 2),$(client 3)"
for id in 1 2 3; do
  start "$id" --initial-cluster "$cluster" --max-learners "$standbys" --target-voters 3 "$@"
done
for id in 1 2 3; do serves "$id"; done
echo "fleet.sh: 3 voters serve; adding $standbys standbys one at a time (data and logs in $root)" >&2
for id in $(seq 4 "$last"); do
  "$kvctl" --endpoints "$voters" member add "$id" "$(peer "$id")" --client-addr "$(client "$id")" >/dev/null
  start "$id" --join --peers "$(peer 1),$(peer 2),$(peer 3)" --unsafe-no-fsync "$@"
  serves "$id"
done
# The standbys are relayed once caught up and in contact, ready once they
# stayed so for --stabilization: give them that (at most 15s) before the
# table.
for _ in $(seq 1 75); do
  if "$kvctl" --endpoints "$voters" member list | grep -q "^($standbys of $standbys learners fed through relays)" &&
    ! "$kvctl" --endpoints "$voters" -w json member list | grep -q '"ready":false'; then
    break
  fi
  sleep 0.2
done
"$kvctl" --endpoints "$voters" member list
echo "fleet.sh: $last members on 127.0.0.1 (clients $(client 1)-$(client "$last")); try: $kvctl --endpoints $voters member watch; Ctrl-C stops them all" >&2
wait
