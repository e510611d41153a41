#!/usr/bin/env bash
# All-reduce busbw, det vs raw Gloo, between two hosts (network namespaces joined by veth
# pairs and a bridge) next to the loopback figures, and allreduce_bench's own loopback
# table. Needs root and iproute2 (prints why and exits 0 otherwise).
# Usage: tests/bench/multihost_allreduce.sh [--max-mib N]
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //tests/bench:allreduce_bench //tests/multihost:multihost_allreduce_bench >/dev/null 2>&1 ||
  bazel build //tests/bench:allreduce_bench //tests/multihost:multihost_allreduce_bench
BUILD_WORKSPACE_DIRECTORY="$PWD" bazel-bin/tests/multihost/multihost_allreduce_bench "$@"
