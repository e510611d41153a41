#!/usr/bin/env bash
# Runs det's benchmarks and prints their figures as one Markdown table per benchmark.
# Usage: tests/bench/run.sh [NAME ...]   (default: all). Not part of tests/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/setup.sh

BENCHES=(scheduler_bench)
if (($# > 0)); then BENCHES=("$@"); fi

bazel build $(printf -- '//tests/bench:%s ' "${BENCHES[@]}") >/dev/null 2>&1 || {
  bazel build $(printf -- '//tests/bench:%s ' "${BENCHES[@]}")
  exit 1
}
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
for b in "${BENCHES[@]}"; do
  echo
  echo "## $b"
  echo
  echo "| benchmark | setup | result | notes |"
  echo "| --- | --- | --- | --- |"
  "bazel-bin/tests/bench/$b"
done
