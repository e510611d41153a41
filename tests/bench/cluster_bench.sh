#!/usr/bin/env bash
# Master benchmarks on private, short-lived masters (loopback only), as Markdown table rows:
#   - metrics ingestion (1,000 heartbeating agents, 200 simulated workers) for BENCH_SECONDS
#     (default 60) and `experiment list` latency under that load
#   - time from `create` to all ranks running, 1 and 8 slots, on a real det-agent
#   - master RSS with 1,000 agents and 100,000 trials
# Expects bazel-bin/deploy/bin and bazel-bin/tests/load/det-load built (run.sh builds them).
#
# With --db postgres: only the ingestion run, once on SQLite and once on a private PostgreSQL
# 15 (initdb into a temporary directory, run as 'nobody' when started as root, unix socket
# only, scram-sha-256 password read by the master from password_file), then one table side
# by side: rows/s, rows lost, list p50/p99, master CPU (and the PostgreSQL server's CPU).
#
# With --baseline DIR: the ingestion run, once on the masters of DIR (DIR/bin/det-master
# and DIR/bin/det, e.g. .det-local/baseline-COMMIT) and once on this tree's, both driven by
# this tree's det-load, then one table side by side: rows/s, rows lost, list p50/p99 (issue
# 27's target: under 50 ms), master and det-load CPU, and the load average before each run.
# Then the master's RSS with 1,000 agents and 100,000 queued trials, BENCH_RSS_RUNS times
# (default 3) for each master, alternating, each on a fresh master: RSS when the trials are
# queued and 10 s later, and whether this tree's is at or under the baseline's in each pair.
# BENCH_RSS_RUNS=0 skips it; BENCH_SECONDS=0 skips the ingestion run.
set -euo pipefail
cd "$(dirname "$0")/../.."
DB=sqlite
BASELINE=""
while (($# > 0)); do
  case "$1" in
    --db)
      [[ $# -ge 2 ]] || { echo "cluster_bench.sh: --db needs a value (sqlite or postgres)" >&2; exit 2; }
      DB="$2"
      shift 2
      ;;
    --db=*) DB="${1#--db=}"; shift ;;
    --baseline)
      [[ $# -ge 2 ]] || { echo "cluster_bench.sh: --baseline needs a directory" >&2; exit 2; }
      BASELINE="$2"
      shift 2
      ;;
    --baseline=*) BASELINE="${1#--baseline=}"; shift ;;
    *) echo "cluster_bench.sh: unknown argument '$1' (expected --db sqlite|postgres or --baseline DIR)" >&2; exit 2 ;;
  esac
done
if [[ -n "$BASELINE" ]]; then
  for tool in det-master det; do
    [[ -x "$BASELINE/bin/$tool" ]] || { echo "cluster_bench.sh: --baseline: $BASELINE/bin/$tool is not an executable" >&2; exit 2; }
  done
  BASELINE="$(cd "$BASELINE" && pwd)"
  [[ "$DB" == sqlite ]] || { echo "cluster_bench.sh: --baseline runs on SQLite only, not with --db $DB" >&2; exit 2; }
fi
case "$DB" in
  sqlite | postgres) ;;
  *) echo "cluster_bench.sh: --db: expected sqlite or postgres, got '$DB'" >&2; exit 2 ;;
esac
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
BIN="$(pwd)/bazel-bin/deploy/bin"
MASTER_BIN="$BIN"
LOAD="$(pwd)/bazel-bin/tests/load/det-load"
SECONDS_TO_RUN="${BENCH_SECONDS:-60}"
WORK="$(mktemp -d)"
PIDS=()
PG_DIR=""
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
  [[ -z "$PG_DIR" ]] || rm -rf "$PG_DIR"
}
trap cleanup EXIT

PASSWORD="bench-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
SECRET="bench-secret"

# start_master NAME [DB_YAML]: a fresh master of $MASTER_BIN in $WORK/NAME (DB_YAML: extra
# master.yaml lines, e.g. a `db:` block); sets MASTER_PID, MASTER, TOKEN.
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
${2:-}
YAML
  DET_ADMIN_PASSWORD="$PASSWORD" "$MASTER_BIN/det-master" --config "$dir/master.yaml" >"$dir/master.log" 2>&1 &
  MASTER_PID=$!
  PIDS+=("$MASTER_PID")
  for _ in $(seq 300); do [[ -s "$dir/addr" ]] && break; sleep 0.1; done
  [[ -s "$dir/addr" ]] || { echo "master $1 did not start:" >&2; tail -20 "$dir/master.log" >&2; exit 1; }
  MASTER="$(cat "$dir/addr")"
  HOME="$dir" DET_PASSWORD="$PASSWORD" "$MASTER_BIN/det" -m "$MASTER" user login admin >/dev/null
  TOKEN="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["masters"][sys.argv[2]]["token"])' \
    "$dir/.det/auth.json" "$MASTER")"
}

stop_master() {
  kill "$MASTER_PID" 2>/dev/null || true
  wait "$MASTER_PID" 2>/dev/null || true
}

# cpu_ticks PID: user + system CPU of PID (and of its reaped children), in clock ticks.
cpu_ticks() {
  awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"
}

INGEST_ARGS=(--mode ingest --agents "${BENCH_AGENTS:-1000}" --workers "${BENCH_WORKERS:-200}"
  --seconds "$SECONDS_TO_RUN" --rows-per-report 500 --readers 4)

# tree_ticks PID: cpu_ticks of PID and of its live children (PostgreSQL's backends).
tree_ticks() {
  local sum=0 p
  for p in "$1" $(pgrep -P "$1"); do sum=$((sum + $(cpu_ticks "$p" 2>/dev/null || echo 0))); done
  echo "$sum"
}

# cpu_share TICKS START END: "S s (P% of a core over D s)".
cpu_share() {
  awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v s="$2" -v e="$3" \
    'BEGIN { printf "%.1f s (%.0f%% of a core over %.0f s)\n", t / hz, 100 * t / hz / (e - s), e - s }'
}

# ingest NAME [DB_YAML]: the ingestion run on a fresh master; prints det-load's rows, and
# leaves them in $WORK/NAME/ingest.txt, the master's CPU seconds in $WORK/NAME/cpu, det-load's
# in $WORK/NAME/load_cpu and the load average before the run in $WORK/NAME/uptime. Fails as
# det-load does (rows acknowledged but not stored), after stopping the master.
ingest() {
  start_master "$1" "${2:-}"
  local before after start end load_before load_after rc=0
  uptime | sed 's/.*load average/load average/' >"$WORK/$1/uptime"
  before="$(cpu_ticks "$MASTER_PID")"
  # This shell's reaped children: det-load (and the grep and tee beside it) when it ends.
  load_before="$(cpu_ticks $$)"
  start="$(date +%s.%N)"
  "$LOAD" --master "$MASTER" --secret "$SECRET" --token "$TOKEN" "${INGEST_ARGS[@]}" \
    | grep '^|' | tee "$WORK/$1/ingest.txt" || rc=$?
  end="$(date +%s.%N)"
  after="$(cpu_ticks "$MASTER_PID")"
  load_after="$(cpu_ticks $$)"
  cpu_share "$((after - before))" "$start" "$end" >"$WORK/$1/cpu"
  cpu_share "$((load_after - load_before))" "$start" "$end" >"$WORK/$1/load_cpu"
  stop_master
  return "$rc"
}

# start_postgres: a private PostgreSQL in $WORK/pg with a role det (password in
# $WORK/pg/password) and a database det; sets PG_PID, PG_URL, PG_PASSWORD_FILE.
start_postgres() {
  for tool in initdb postgres createdb; do
    [[ -x "$PG_BIN/$tool" ]] || { echo "$PG_BIN/$tool is not installed (Debian: apt-get install postgresql-15)" >&2; exit 1; }
  done
  # Under /tmp: the server's user must reach it, and a socket path is limited to 107 bytes.
  local dir
  dir="$(mktemp -d /tmp/det-bench-pg-XXXXXX)"
  PG_DIR="$dir"
  local as=()
  if ((EUID == 0)); then
    # PostgreSQL will not run as root.
    chown nobody: "$dir"
    as=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)
  fi
  PG_PASSWORD_FILE="$WORK/pg-password"
  head -c 18 /dev/urandom | base64 | tr -d '/+=\n' >"$PG_PASSWORD_FILE"
  chmod 0600 "$PG_PASSWORD_FILE"
  install -m 0600 -o "$(stat -c %u "$dir")" "$PG_PASSWORD_FILE" "$dir/pwfile"
  env -i LC_ALL=C PATH=/usr/bin:/bin "${as[@]}" "$PG_BIN/initdb" -D "$dir/data" -U det \
    --pwfile="$dir/pwfile" --auth=scram-sha-256 -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/pwfile"
  # The server's defaults (fsync on, synchronous_commit on, shared_buffers 128 MB), as the
  # SQLite master runs with synchronous=FULL.
  env -i LC_ALL=C PATH=/usr/bin:/bin "${as[@]}" "$PG_BIN/postgres" -D "$dir/data" -k "$dir" \
    -c listen_addresses= -c max_connections=40 >"$dir/postgres.log" 2>&1 &
  PG_PID=$!
  PIDS+=("$PG_PID")
  for _ in $(seq 300); do
    PGPASSWORD="$(cat "$PG_PASSWORD_FILE")" "$PG_BIN/pg_isready" -q -h "$dir" -U det -d postgres && break
    kill -0 "$PG_PID" 2>/dev/null || { cat "$dir/postgres.log" >&2; exit 1; }
    sleep 0.1
  done
  PGPASSWORD="$(cat "$PG_PASSWORD_FILE")" "$PG_BIN/createdb" -h "$dir" -U det det
  PG_URL="postgresql:///det?host=$dir&user=det"
}

stop_postgres() {
  kill -INT "$PG_PID" 2>/dev/null || true
  wait "$PG_PID" 2>/dev/null || true
  rm -rf "$PG_DIR"
  PG_DIR=""
}

# field FILE ROW COLUMN: a cell of det-load's table (ROW: the first cell's text).
field() {
  awk -F'|' -v r="$2" -v c="$3" '$2 ~ r { gsub(/^ +| +$/, "", $(c + 1)); print $(c + 1) }' "$1"
}

# side_by_side A B LABEL_A LABEL_B: the rows of the ingestion runs $WORK/ingest-A and
# $WORK/ingest-B as one table, column A then B: rows/s (B's as a multiple of A's), rows
# lost, list p50/p99, master and det-load CPU, the load average before each run.
side_by_side() {
  local name f acked stored ratio
  declare -A rate lost list cpu load_cpu load_avg
  echo "| ${INGEST_ARGS[*]:2} | $3 | $4 |"
  echo "| --- | --- | --- |"
  for name in "$1" "$2"; do
    f="$WORK/ingest-$name/ingest.txt"
    rate[$name]="$(field "$f" 'metrics ingestion' 3)"
    acked="$(field "$f" 'metrics ingestion' 4 | awk '{ print $1 }')"
    stored="$(field "$f" 'metrics ingestion' 4 | awk '{ print $3 }')"
    lost[$name]="$((${acked:-0} - ${stored:-0})) of ${acked:-?} acked ($(field "$f" 'metrics ingestion' 4 | sed 's/.*stored, //'))"
    list[$name]="$(field "$f" 'experiment list' 3) ($(field "$f" 'experiment list' 4))"
    cpu[$name]="$(cat "$WORK/ingest-$name/cpu")"
    load_cpu[$name]="$(cat "$WORK/ingest-$name/load_cpu")"
    load_avg[$name]="$(cat "$WORK/ingest-$name/uptime")"
  done
  ratio="$(awk -v a="${rate[$1]%% *}" -v b="${rate[$2]%% *}" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "n/a" }')"
  echo "| rows/s | ${rate[$1]} | ${rate[$2]} ($ratio) |"
  echo "| rows lost | ${lost[$1]} | ${lost[$2]} |"
  echo "| experiment list | ${list[$1]} | ${list[$2]} |"
  local p99s=()
  for name in "$1" "$2"; do
    p99s+=("$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' <<<"${list[$name]}" | awk '{ print ($1 != "" && $1 < 50) ? "yes" : "NO" }')")
  done
  echo "| experiment list p99 under 50 ms (issue 27) | ${p99s[0]} | ${p99s[1]} |"
  echo "| master CPU | ${cpu[$1]} | ${cpu[$2]} |"
  echo "| det-load CPU | ${load_cpu[$1]} | ${load_cpu[$2]} |"
  echo "| before the run | ${load_avg[$1]} | ${load_avg[$2]} |"
}

# queue_rss NAME: a fresh master of $MASTER_BIN with 1,000 agents and 100,000 trials queued
# in an agentless pool; writes "RSS_MIB RSS_10S_LATER_MIB SECONDS_TO_QUEUE LOAD_AVERAGE" to
# $WORK/NAME/rss.
queue_rss() {
  start_master "$1"
  local load_avg start end now later
  load_avg="$(cut -d' ' -f1 /proc/loadavg)"
  start="$(date +%s.%N)"
  "$LOAD" --master "$MASTER" --secret "$SECRET" --token "$TOKEN" --mode queue --agents 1000 \
    --trials 100000 --pool idle >/dev/null
  end="$(date +%s.%N)"
  now="$(awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$MASTER_PID/status")"
  sleep 10  # The figure a while after the burst, too (what the allocator has handed back).
  later="$(awk '/VmRSS/ { print int($2 / 1024) }' "/proc/$MASTER_PID/status")"
  stop_master
  awk -v n="$now" -v l="$later" -v s="$start" -v e="$end" -v a="$load_avg" \
    'BEGIN { printf "%d %d %.0f %s\n", n, l, e - s, a }' >"$WORK/$1/rss"
}

if [[ -n "$BASELINE" ]]; then
  echo "| benchmark | setup | result | notes |"
  echo "| --- | --- | --- | --- |"
  if [[ "$SECONDS_TO_RUN" != 0 ]]; then
    echo "| baseline ($BASELINE) | ingestion and list latency |  |  |"
    MASTER_BIN="$BASELINE/bin"
    ingest ingest-baseline || true
    echo "| this tree | ingestion and list latency |  |  |"
    MASTER_BIN="$BIN"
    ingest ingest-tree || true
    echo
    side_by_side baseline tree baseline "this tree"
  fi
  RSS_RUNS="${BENCH_RSS_RUNS:-3}"
  if ((RSS_RUNS > 0)); then
    echo
    echo "| master RSS, 1,000 agents, 100,000 trials queued (run) | baseline: RSS, 10 s later, time to queue, load | this tree: RSS, 10 s later, time to queue, load | this tree at or under the baseline |"
    echo "| --- | --- | --- | --- |"
    for run in $(seq "$RSS_RUNS"); do
      MASTER_BIN="$BASELINE/bin"
      queue_rss "rss-baseline-$run"
      read -r b_now b_later b_s b_load <"$WORK/rss-baseline-$run/rss"
      MASTER_BIN="$BIN"
      queue_rss "rss-tree-$run"
      read -r t_now t_later t_s t_load <"$WORK/rss-tree-$run/rss"
      verdict="$( ((t_now <= b_now)) && echo yes || echo NO) ($((t_now - b_now)) MiB)"
      echo "| $run | $b_now MiB, $b_later MiB, $b_s s, load $b_load | $t_now MiB, $t_later MiB, $t_s s, load $t_load | $verdict |"
    done
  fi
  exit 0
fi

if [[ "$DB" == postgres ]]; then
  echo "| benchmark | setup | result | notes |"
  echo "| --- | --- | --- | --- |"
  echo "| SQLite | ingestion and list latency |  |  |"
  ingest ingest-sqlite || true
  start_postgres
  echo "| PostgreSQL | ingestion and list latency |  |  |"
  ingest ingest-postgres "db: {type: postgres, url: \"$PG_URL\", password_file: $PG_PASSWORD_FILE}" || true
  pg_cpu="$(awk -v t="$(tree_ticks "$PG_PID")" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f s", t / hz }')"
  stop_postgres
  echo
  side_by_side sqlite postgres SQLite "PostgreSQL 15"
  echo "| database server CPU | (in the master process) | $pg_cpu (server and backends, from its start) |"
  exit 0
fi

# 1. Ingestion and list latency.
ingest ingest

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
