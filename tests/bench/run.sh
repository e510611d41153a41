#!/usr/bin/env bash
# Runs det's benchmarks and prints their figures as one Markdown table per benchmark.
# Usage: tests/bench/run.sh [NAME ...]   (default: all). Not part of tests/run.sh.
# cluster_bench_postgres (not in the default list): the ingestion run on SQLite and on a
# private PostgreSQL 15, side by side (tests/bench/cluster_bench.sh --db postgres).
# rest_read_bench: 20 REST readers during training (tests/bench/rest_read_bench.sh); with
# BENCH_BASELINE_BIN=DIR (e.g. .det-local/baseline-4679a96/bin) beside those binaries.
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/setup.sh

BENCHES=(scheduler_bench cluster_bench rest_read_bench allreduce_bench nccl_allreduce_bench scaling_bench resume_bench)
if (($# > 0)); then BENCHES=("$@"); fi

TARGETS=(//deploy:bin //deploy:python //tests/load:det-load)
for b in "${BENCHES[@]}"; do
  case "$b" in
    cluster_bench*) ;;
    rest_read_bench) TARGETS+=(//tests/bench:rest_reader) ;;
    *) TARGETS+=("//tests/bench:$b") ;;
  esac
done
bazel build "${TARGETS[@]}" >/dev/null 2>&1 || { bazel build "${TARGETS[@]}"; exit 1; }
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
for b in "${BENCHES[@]}"; do
  echo
  echo "## $b"
  echo
  case "$b" in
    allreduce_bench | nccl_allreduce_bench | scaling_bench | cluster_bench_postgres | rest_read_bench) ;;  # Own tables.
    *)
      echo "| benchmark | setup | result | notes |"
      echo "| --- | --- | --- | --- |"
      ;;
  esac
  if [[ "$b" == cluster_bench ]]; then
    tests/bench/cluster_bench.sh
  elif [[ "$b" == cluster_bench_postgres ]]; then
    tests/bench/cluster_bench.sh --db postgres
  elif [[ "$b" == rest_read_bench ]]; then
    tests/bench/rest_read_bench.sh ${BENCH_BASELINE_BIN:+--baseline "$BENCH_BASELINE_BIN"}
  else
    "bazel-bin/tests/bench/$b"
  fi
done
(($# > 0)) || { printf '\n## torch_ddp_bench\n\n'; "${DET_TEST_PYTHON:-/usr/bin/python3}" tests/bench/torch_ddp_bench.py; }
(($# > 0)) || { printf '\n## trial_runner_bench\n\n'; "${DET_TEST_PYTHON:-/usr/bin/python3}" tests/bench/trial_runner_bench.py; }
