#!/usr/bin/env bash
# Master benchmarks on private, short-lived masters (loopback only), as Markdown table rows:
#   - metrics ingestion (1,000 heartbeating agents, 200 simulated workers) for BENCH_SECONDS
#     (default 60) and `experiment list` latency under that load
#   - time from `create` to all ranks running, 1 and 8 slots, on a real det-agent
#   - master RSS with 1,000 agents and 100,000 trials
# Expects bazel-bin/deploy/bin and bazel-bin/tests/load/det-load built (run.sh builds them).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="$(pwd)/bazel-bin/deploy/bin"
LOAD="$(pwd)/bazel-bin/tests/load/det-load"
SECONDS_TO_RUN="${BENCH_SECONDS:-60}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

PASSWORD="bench-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
SECRET="bench-secret"

# start_master NAME: a fresh master in $WORK/NAME; sets MASTER_PID, MASTER, TOKEN.
start_master() {
  local dir="$WORK/$1"
  mkdir -p "$dir"
  cat >"$dir/master.yaml" <<YAML
grpc_listen: "127.0.0.1:0"
data_dir: $dir/data
address_file: $dir/addr
cluster_secret: $SECRET
log_level: warn
resource_pools:
  - pool_name: default
  - pool_name: load
  - pool_name: idle
YAML
  DET_ADMIN_PASSWORD="$PASSWORD" "$BIN/det-master" --config "$dir/master.yaml" >"$dir/master.log" 2>&1 &
  MASTER_PID=$!
  PIDS+=("$MASTER_PID")
  for _ in $(seq 100); do [[ -s "$dir/addr" ]] && break; sleep 0.1; done
  MASTER="$(cat "$dir/addr")"
  HOME="$dir" DET_PASSWORD="$PASSWORD" "$BIN/det" -m "$MASTER" user login admin >/dev/null
  TOKEN="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["masters"][sys.argv[2]]["token"])' \
    "$dir/.det/auth.json" "$MASTER")"
}

stop_master() {
  kill "$MASTER_PID" 2>/dev/null || true
  wait "$MASTER_PID" 2>/dev/null || true
}

# 1. Ingestion and list latency.
start_master ingest
"$LOAD" --master "$MASTER" --secret "$SECRET" --token "$TOKEN" --mode ingest \
  --agents 1000 --workers 200 --seconds "$SECONDS_TO_RUN" --rows-per-report 500 --readers 4 \
  | grep '^|'
stop_master

# 2. Create to running, on a real agent with 8 CPU slots.
start_master latency
cat >"$WORK/latency/agent.yaml" <<YAML
master: "$MASTER"
agent_id: bench-agent
slot_type: cpu
slots: 8
work_dir: $WORK/latency/agent
cluster_secret: $SECRET
log_level: warn
YAML
"$BIN/det-agent" --config "$WORK/latency/agent.yaml" >"$WORK/latency/agent.log" 2>&1 &
PIDS+=("$!")
sleep 1
"$LOAD" --master "$MASTER" --secret "$SECRET" --token "$TOKEN" --mode latency | grep '^|'
stop_master

# 3. Memory with 1,000 agents and 100,000 trials.
start_master queue
"$LOAD" --master "$MASTER" --secret "$SECRET" --token "$TOKEN" --mode queue --agents 1000 \
  --trials 100000 --pool idle >/dev/null
rss_kb="$(awk '/VmRSS/ {print $2}' "/proc/$MASTER_PID/status")"
db_mb="$(du -cm "$WORK/queue/data/"det.db* | tail -1 | cut -f1)"
echo "| master RSS | 1000 agents, 100000 trials (queued), database $db_mb MiB | $((rss_kb / 1024)) MiB | |"
stop_master
