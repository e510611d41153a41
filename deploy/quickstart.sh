#!/usr/bin/env bash
# The main job on a fresh machine: install what det needs, build it, start a local master
# (SQLite in .det-local/) and one agent with CPU slots, train the PyTorch Fashion-MNIST
# example (a CNN using det's Python Core API, docs/pytorch.md) to the end while showing its
# progress, print its final validation metrics, and stop the daemons. Set DET_PORT to use
# another master port (default 8080); DET_EXAMPLE=cpp trains the C++ MLP example instead.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== installing system packages (deploy/setup.sh)"
./deploy/setup.sh

echo "== building det (bazel build //deploy:bin)"
bazel build //deploy:bin
BIN="$(pwd)/bazel-bin/deploy/bin"
DATA="$(pwd)/.det-local"
PORT="${DET_PORT:-8080}"
export DET_MASTER="127.0.0.1:${PORT}"

echo "== starting a local cluster in ${DATA}"
# As root, cluster-up runs trials as nobody, which cannot reach bazel-bin (under ~/.cache)
# nor, often, this checkout: the quick start's one example runs as the user running it.
TASK_USER=()
[[ "$(id -u)" == 0 ]] && TASK_USER=(--no-task-user)
"$BIN/det" deploy local cluster-up --agents 1 --slots-per-agent 1 --data-dir "$DATA" --master-port "$PORT" "${TASK_USER[@]}"
trap '"$BIN/det" deploy local cluster-down --data-dir "$DATA"' EXIT

if [[ "${DET_EXAMPLE:-torch}" == cpp ]]; then
  CONFIG=configs/examples/fashion-mnist.yaml
  CONTEXT=()
  MIN_ACCURACY=0.82
else
  CONFIG=configs/examples/torch-fashion-mnist.yaml
  CONTEXT=(common/worker/python/examples/fashion_mnist_cnn)
  MIN_ACCURACY=0.89
fi
echo "== training ${CONFIG}"
"$BIN/det" experiment create "$CONFIG" "${CONTEXT[@]}" --follow

echo "== result"
id=$("$BIN/det" experiment list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["experiments"][-1]["id"])')
"$BIN/det" experiment describe "$id"
"$BIN/det" experiment describe "$id" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
acc = d["trials"][0]["validation_summary"]["accuracy"]["last"]
print(f"final validation accuracy: {acc:.4f} (expected >= {sys.argv[1]})")
sys.exit(0 if acc >= float(sys.argv[1]) else 1)
' "$MIN_ACCURACY"
