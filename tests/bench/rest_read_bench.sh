#!/usr/bin/env bash
# REST reads during training (issue 27): a private master and one real det-agent (1 CPU
# slot) on loopback train the C++ Fashion-MNIST example twice, once alone and once under
# 20 closed-loop readers (tests/bench/rest_reader: 10 on GET /api/v1/experiments, 10 on
# GET /api/v1/trials/ID/metrics?max_points=200, each with "Accept-Encoding: gzip" and
# If-None-Match as a browser sends), and prints per route p50/p99, mean response bytes and
# requests, and the training's time alone and under the readers (the slowdown).
#
# Usage: tests/bench/rest_read_bench.sh [--bin DIR] [--baseline DIR] [--batches N] [--pause-ms MS]
#   --bin DIR       det-master, det-agent, det and det-fashion-mnist (default
#                   bazel-bin/deploy/bin)
#   --baseline DIR  the same measurement on these binaries too, in the same run, printed
#                   side by side (e.g. .det-local/baseline-4679a96/bin)
#   --batches N     training length in batches of 64 (default 20000: about 60 s alone on
#                   the 2-core machine)
#   --pause-ms MS   each reader waits MS after each answer (default 0: closed loop, the
#                   load issue 27 measured; 3000 is one web page per reader)
# Expects bazel-bin/tests/bench/rest_reader built (run.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="$(pwd)/bazel-bin/deploy/bin"
BASELINE=""
BATCHES=20000
PAUSE_MS=0
READER="$(pwd)/bazel-bin/tests/bench/rest_reader"
while (($# > 0)); do
  case "$1" in
    --bin | --baseline | --batches | --pause-ms)
      [[ $# -ge 2 && -n "$2" ]] || { echo "rest_read_bench.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --bin) BIN="$(cd "$2" 2>/dev/null && pwd)" || { echo "rest_read_bench.sh: --bin: no directory '$2'" >&2; exit 2; } ;;
        --baseline) BASELINE="$(cd "$2" 2>/dev/null && pwd)" || { echo "rest_read_bench.sh: --baseline: no directory '$2'" >&2; exit 2; } ;;
        --batches) BATCHES="$2" ;;
        --pause-ms) PAUSE_MS="$2" ;;
      esac
      shift 2
      ;;
    *) echo "rest_read_bench.sh: unknown argument '$1' (expected --bin DIR, --baseline DIR, --batches N, --pause-ms MS)" >&2; exit 2 ;;
  esac
done
[[ "$BATCHES" =~ ^[1-9][0-9]*$ ]] || { echo "rest_read_bench.sh: --batches: expected a positive integer, got '$BATCHES'" >&2; exit 2; }
[[ "$PAUSE_MS" =~ ^[0-9]+$ ]] || { echo "rest_read_bench.sh: --pause-ms: expected a non-negative integer, got '$PAUSE_MS'" >&2; exit 2; }
for dir in "$BIN" ${BASELINE:+"$BASELINE"}; do
  for prog in det-master det-agent det det-fashion-mnist; do
    [[ -x "$dir/$prog" ]] || { echo "rest_read_bench.sh: $dir/$prog is missing (bazel build //deploy:bin)" >&2; exit 2; }
  done
done
[[ -x "$READER" ]] || { echo "rest_read_bench.sh: $READER is missing (bazel build //tests/bench:rest_reader)" >&2; exit 2; }
DATA=/usr/share/datasets/fashion-mnist  # configs/examples/fashion-mnist.yaml data.dir
[[ -d "$DATA" ]] || { echo "rest_read_bench.sh: $DATA is missing (apt-get install dataset-fashion-mnist)" >&2; exit 2; }

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

# The example (configs/examples/fashion-mnist.yaml), BATCHES long, validated once at the end.
EXPERIMENT=(configs/examples/fashion-mnist.yaml --config "searcher.max_length={batches: $BATCHES}"
  --config "min_validation_period={batches: $BATCHES}" --config "max_restarts=0")

# cpu_ticks PID: user + system CPU of PID and its reaped children, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"; }

# api PATH: GET PATH from the current master's REST API.
api() { curl -sf -H "Authorization: Bearer $TOKEN" "http://$HTTP$1"; }

# json EXPR: EXPR of the JSON object on stdin (python3: j is the object).
json() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

# start_cluster NAME BINDIR: a fresh master and agent in $WORK/NAME; sets MASTER, HTTP,
# TOKEN, MASTER_PID, DET.
start_cluster() {
  local dir="$WORK/$1" bin="$2"
  mkdir -p "$dir"
  cat >"$dir/master.yaml" <<YAML
grpc_listen: "127.0.0.1:0"
http_listen: "127.0.0.1:0"
data_dir: $dir/data
address_file: $dir/addr
http_address_file: $dir/http_addr
cluster_secret: $SECRET
log_level: warn
checkpoint_storage:
  type: shared_fs
  host_path: $dir/checkpoints
checkpoint_storage_allowed_roots:
  - $dir/checkpoints
YAML
  DET_ADMIN_PASSWORD="$PASSWORD" "$bin/det-master" --config "$dir/master.yaml" >"$dir/master.log" 2>&1 &
  MASTER_PID=$!
  PIDS+=("$MASTER_PID")
  for _ in $(seq 300); do [[ -s "$dir/addr" && -s "$dir/http_addr" ]] && break; sleep 0.1; done
  [[ -s "$dir/http_addr" ]] || { echo "master $1 did not start:" >&2; tail -20 "$dir/master.log" >&2; exit 1; }
  MASTER="$(cat "$dir/addr")"
  HTTP="$(cat "$dir/http_addr")"
  DET=(env HOME="$dir" "$bin/det" -m "$MASTER")
  HOME="$dir" DET_PASSWORD="$PASSWORD" "$bin/det" -m "$MASTER" user login admin >/dev/null
  TOKEN="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["masters"][sys.argv[2]]["token"])' \
    "$dir/.det/auth.json" "$MASTER")"
  cat >"$dir/agent.yaml" <<YAML
master: "$MASTER"
agent_id: bench-agent
slot_type: cpu
slots: 1
work_dir: $dir/agent
worker_path:
  - $bin
cluster_secret: $SECRET
log_level: warn
YAML
  "$bin/det-agent" --config "$dir/agent.yaml" >"$dir/agent.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 300); do
    [[ "$(api /api/v1/agents | json 'len(j["agents"])')" == 1 ]] && break
    sleep 0.1
  done
}

stop_cluster() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
}

# train NAME [READERS]: creates the experiment, waits for its trial to run (then starts
# the readers when READERS is "readers"), waits for it to end; writes
# $WORK/NAME.{time,sps,readers,cpu}.
train() {
  local out="$WORK/$1" exp trial state
  exp="$("${DET[@]}" experiment create "${EXPERIMENT[@]}" 2>&1 | grep -oE '[0-9]+' | head -1)"
  [[ -n "$exp" ]] || { echo "rest_read_bench.sh: experiment create failed" >&2; exit 1; }
  trial=""
  for _ in $(seq 600); do
    trial="$(api "/api/v1/experiments/$exp" 2>/dev/null \
      | json '" ".join(str(t["id"]) for t in j.get("trials", []) if t["state"] == "STATE_RUNNING")' || true)"
    [[ -n "$trial" ]] && break
    sleep 0.1
  done
  [[ -n "$trial" ]] || { echo "rest_read_bench.sh: the trial of experiment $exp did not start" >&2; exit 1; }
  local reader_pid="" before after
  before="$(cpu_ticks "$MASTER_PID")"
  if [[ "${2:-}" == readers ]]; then
    "$READER" --address "$HTTP" --token "$TOKEN" --pause-ms "$PAUSE_MS" --route "/api/v1/experiments=10" \
      --route "/api/v1/trials/$trial/metrics?max_points=200=10" >"$out.readers" 2>"$out.readers.err" &
    reader_pid=$!
  fi
  "${DET[@]}" experiment wait "$exp" --interval 0.5 >/dev/null 2>&1 || state=failed
  after="$(cpu_ticks "$MASTER_PID")"
  if [[ -n "$reader_pid" ]]; then
    kill -TERM "$reader_pid"
    wait "$reader_pid" || true
    cat "$out.readers.err" >&2
  fi
  [[ "${state:-}" != failed ]] || { echo "rest_read_bench.sh: experiment $exp did not complete" >&2; exit 1; }
  api "/api/v1/trials/$trial" | json \
    '"%.1f %.0f" % ((lambda t, s: (s, int(t["total_batches"]) * 64 / s))(j["trial"], (int(j["trial"]["end_time_ms"]) - int(j["trial"]["start_time_ms"])) / 1000))' \
    >"$out.time"
  awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f s", t / hz }' >"$out.cpu"
}

# measure NAME BINDIR: training alone, then under the readers, on one fresh cluster.
measure() {
  start_cluster "$1" "$2"
  train "$1-alone"
  train "$1-readers" readers
  stop_cluster
}

# cell NAME ROUTE COLUMN: a cell of rest_reader's table.
cell() {
  awk -F'|' -v r="$2" -v c="$3" 'index($2, r) == 2 { gsub(/^ +| +$/, "", $(c + 1)); print $(c + 1) }' "$WORK/$1-readers.readers"
}

NAMES=(current)
DIRS=("$BIN")
if [[ -n "$BASELINE" ]]; then
  NAMES=(baseline current)
  DIRS=("$BASELINE" "$BIN")
fi
for i in "${!NAMES[@]}"; do measure "${NAMES[$i]}" "${DIRS[$i]}"; done

printf '| %s batches of 64, 1 CPU slot, 20 readers (pause %s ms) |' "$BATCHES" "$PAUSE_MS"
for i in "${!NAMES[@]}"; do printf ' %s (%s) |' "${NAMES[$i]}" "${DIRS[$i]}"; done
echo
printf '| --- |'; for _ in "${NAMES[@]}"; do printf ' --- |'; done; echo
row() {  # row LABEL CMD...: one line, CMD run per name with $n set
  local label="$1"; shift
  printf '| %s |' "$label"
  for n in "${NAMES[@]}"; do printf ' %s |' "$("$@" "$n")"; done
  echo
}
alone_time() { awk '{ printf "%s s (%s samples/s)", $1, $2 }' "$WORK/$1-alone.time"; }
readers_time() { awk '{ printf "%s s (%s samples/s)", $1, $2 }' "$WORK/$1-readers.time"; }
slowdown() {
  awk -v a="$(cut -d' ' -f1 "$WORK/$1-alone.time")" -v r="$(cut -d' ' -f1 "$WORK/$1-readers.time")" \
    'BEGIN { printf "%+.1f%%", 100 * (r - a) / a }'
}
route_cells() {  # route_cells ROUTE NAME
  printf 'p50 %s ms, p99 %s ms; %s requests (%s 304, %s gzip, %s errors); mean %s bytes' \
    "$(cell "$2" "$1" 7)" "$(cell "$2" "$1" 8)" "$(cell "$2" "$1" 3)" "$(cell "$2" "$1" 4)" \
    "$(cell "$2" "$1" 5)" "$(cell "$2" "$1" 6)" "$(cell "$2" "$1" 9)"
}
list_cells() { route_cells "/api/v1/experiments " "$1"; }
metrics_cells() { route_cells "/api/v1/trials/" "$1"; }
reader_cpu() { cell "$1" "rest_reader CPU" 3; }
master_cpu() { printf '%s alone, %s under readers' "$(cat "$WORK/$1-alone.cpu")" "$(cat "$WORK/$1-readers.cpu")"; }
row "training alone" alone_time
row "training under readers" readers_time
row "training slowdown" slowdown
row "GET /api/v1/experiments" list_cells
row "GET /api/v1/trials/ID/metrics?max_points=200" metrics_cells
row "master CPU during training" master_cpu
row "rest_reader CPU" reader_cpu
