#!/usr/bin/env bash
# The November 2026 re-run of the attack report's reproductions for issue 25's defects
# (../shared/reviews/reliability-security.md N1-N4, N6, N10-N13) against fresh
# `det deploy local cluster-up` clusters started as root, as the quick start does. Prints one
# "RESULT <defect> <held|FAILED>: what happened" line per attack; docs/security-review-2026-11.md
# records a run. Needs root, the built binaries (bazel build //deploy:bin) and Python's grpc.
# Usage: tests/security/review/rerun.sh [BIN_DIR]
set -uo pipefail
cd "$(dirname "$0")/../../.."
BIN=$(realpath "${1:-bazel-bin/deploy/bin}")
[[ $(id -u) == 0 ]] || { echo "rerun.sh: needs root (cluster-up's task user)" >&2; exit 2; }
W=$(mktemp -d /tmp/det-rerun-XXXXXX)
chmod 0755 "$W"
export HOME=$W/home DET_USER_TOKEN=
mkdir -p "$HOME" "$W/gen"
PORT=${DET_RERUN_PORT:-34100}
A=127.0.0.1:$PORT
D=$W/c1
det() { "$BIN/det" -m "$A" "$@"; }
result() { echo "RESULT $*"; }
cleanup() {
  "$BIN/det" deploy local cluster-down --data-dir "$D" >/dev/null 2>&1
  "$BIN/det" deploy local cluster-down --data-dir "$W/c3" >/dev/null 2>&1
}
trap cleanup EXIT

# Python stubs of the agent's protocol, for the impostor and the forged calls.
protoc -I. --python_out="$W/gen" --grpc_out="$W/gen" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" proto/*.proto
touch "$W/gen/proto/__init__.py"
# agent METHOD JSON: one AgentService call; prints "OK <reply>" or "CODE <details>".
agent() {
  PYTHONPATH=$W/gen /usr/bin/python3 - "$A" "$1" "$2" <<'EOF'
import json, sys, grpc
from google.protobuf import json_format
from proto import agent_pb2, agent_pb2_grpc
addr, method, body = sys.argv[1:]
stub = agent_pb2_grpc.AgentServiceStub(grpc.insecure_channel(addr))
req = getattr(agent_pb2, method + "Request")()
json_format.Parse(body, req)
try:
    print("OK", json_format.MessageToJson(getattr(stub, method)(req, timeout=10), indent=None))
except grpc.RpcError as e:
    print(e.code().name, e.details())
EOF
}

echo "== cluster-up as root (binaries in $BIN)"
"$BIN/det" deploy local cluster-up --data-dir "$D" --agents 1 --slots-per-agent 2 \
  --master-port "$PORT" --http-port $((PORT + 1)) --bin-dir "$BIN" | tee "$W/up.log"
S=$(cat "$D/cluster_secret")
MPID=$(cat "$D/run/master.pid")
grep -q "Trials run as the OS user nobody" "$W/up.log" &&
  result "N2a held: cluster-up as root runs trials as nobody ($(grep -o 'Trials run as the OS user [^,]*' "$W/up.log"))" ||
  result "N2a FAILED: cluster-up did not say trials run as nobody"

echo "== N2: a non-admin's trial reads the cluster's secrets"
DET_NEW_PASSWORD=bobs-password det user create bob >/dev/null
BOBHOME=$W/home-bob; mkdir -p "$BOBHOME"
bob() { HOME=$BOBHOME DET_PASSWORD=bobs-password "$BIN/det" -m "$A" "$@"; }
bob user login bob >/dev/null
mkdir -p "$W/peek"
PATHS=("$D/cluster_secret" "$D/admin_password" "$D/master.yaml" "$D/agent-0.yaml"
       "$D/master/det.db" "$HOME/.det/auth.json" "$D/agent-0/run/agent_credential"
       "/proc/$MPID/environ" "/proc/$(cat "$D/run/agent-0.pid")/environ")
{
  echo '#!/bin/sh'
  echo 'echo "uid $(id -u)"'
  for p in "${PATHS[@]}"; do echo "head -c 100 '$p' >/dev/null 2>&1 && echo 'READ $p' || echo 'DENIED $p'"; done
  echo "ls '$D/agent-0/contexts' >/dev/null 2>&1 && echo 'LISTED contexts' || echo 'DENIED contexts'"
  echo "ls '$D/checkpoints' >/dev/null 2>&1 && echo 'LISTED checkpoints' || echo 'DENIED checkpoints'"
} >"$W/peek/peek.sh"
chmod 0755 "$W/peek" "$W/peek/peek.sh"
cat >"$W/peek.yaml" <<EOF
name: peek
entrypoint: ["./peek.sh"]
searcher: {name: single, metric: loss, max_length: {batches: 1}}
max_restarts: 0
EOF
bob experiment create "$W/peek.yaml" "$W/peek" --follow >"$W/peek.out" 2>&1
read_n=$(grep -c '^\[rank 0\] READ\|LISTED' "$W/peek.out")
denied_n=$(grep -c 'DENIED' "$W/peek.out")
if [[ $read_n == 0 && $denied_n == $(( ${#PATHS[@]} + 2 )) ]]; then
  result "N2b held: bob's trial ($(grep -o 'uid [0-9]*' "$W/peek.out" | head -1)) was refused all $denied_n secrets, environments and listings"
else
  result "N2b FAILED: bob's trial read $read_n, was refused $denied_n: $(grep -E 'READ|LISTED' "$W/peek.out" | tr '\n' ' ')"
fi
if tr '\0' '\n' <"/proc/$MPID/environ" | grep -q '^DET_ADMIN_PASSWORD='; then
  result "N2c FAILED: the master keeps DET_ADMIN_PASSWORD in its environment"
else
  result "N2c held: the master's /proc/$MPID/environ holds no DET_ADMIN_PASSWORD"
fi

echo "== N11: Register with no secret and an unknown pool"
r=$(agent Register '{"agent_id":"x2","hostname":"e","resource_pool":"rogue"}')
[[ $r == UNAUTHENTICATED* ]] && result "N11 held: $r" || result "N11 FAILED: $r"

echo "== N1: impostor registrations of local-agent-0"
IMP='{"agent_id":"local-agent-0","hostname":"evil","cluster_secret":"'$S'","slots":[{"id":"0","type":"cpu"}],"running_allocations":["1.0"]}'
r=$(agent Register "$IMP")
[[ $r == ALREADY_EXISTS* || $r == PERMISSION_DENIED* ]] && result "N1a held (agent connected): $r" || result "N1a FAILED (agent connected): $r"
APID=$(cat "$D/run/agent-0.pid")
kill -STOP "$APID"
for i in $(seq 60); do
  det agent list --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; sys.exit(0 if not json.load(sys.stdin)["agents"][0]["connected"] else 1)' && break
  sleep 1
done
r=$(agent Register "$IMP")
[[ $r == PERMISSION_DENIED* ]] && result "N1b held (agent stopped ${i}s, disconnected): $r" || result "N1b FAILED (agent disconnected): $r"
kill -CONT "$APID"
kill -9 "$MPID"
while kill -0 "$MPID" 2>/dev/null; do sleep 0.1; done
(cd "$D" && setsid "$BIN/det-master" --config "$D/master.yaml" >>"$D/logs/master.log" 2>&1 </dev/null &)
for i in $(seq 100); do det master info >/dev/null 2>&1 && break; sleep 0.2; done
r=$(agent Register "$IMP")
[[ $r == ALREADY_EXISTS* || $r == PERMISSION_DENIED* ]] && result "N1c held (after kill -9 and restart of the master): $r" || result "N1c FAILED (after master restart): $r"
echo "master log: $(grep -c 'registration as agent local-agent-0 refused' "$D/logs/master.log") refusals logged, e.g.:"
grep -m1 'registration as agent local-agent-0 refused' "$D/logs/master.log" | cut -c1-300
for i in $(seq 120); do
  det agent list --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["agents"][0]["connected"] else 1)' && break
  sleep 0.5
done
det agent list --json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["agents"][0]["connected"] else 1)' &&
  result "N1d held: the real agent reconnected $((i / 2))s after the master restart" ||
  result "N1d FAILED: the real agent is not connected 60s after the master restart"
MPID=$(pgrep -f "det-master --config $D/master.yaml" | head -1)

echo "== N6: checkpoint storage outside the cluster's root"
cat >"$W/etc.yaml" <<EOF
name: etc
entrypoint: det-fashion-mnist
searcher: {name: single, metric: validation_loss, max_length: {batches: 20}}
hyperparameters: {global_batch_size: 32, learning_rate: 0.05, hidden_size: 16}
records_per_epoch: 60000
checkpoint_storage: {type: shared_fs, host_path: /etc}
data: {dir: /usr/share/datasets/fashion-mnist}
EOF
r=$(bob experiment create "$W/etc.yaml" 2>&1)
[[ $r == *"not under a checkpoint storage root this cluster allows"* ]] &&
  result "N6a held: host_path /etc refused: $(echo "$r" | tail -1)" || result "N6a FAILED: $r"
sed -e '/^checkpoint_storage/d' -e 's/batches: 20}}$/batches: 20}}\nmin_checkpoint_period: {batches: 10}/' \
  "$W/etc.yaml" >"$W/ckpt.yaml"
bob experiment create "$W/ckpt.yaml" --follow >"$W/ckpt.out" 2>&1
uuid=$(grep -m1 -o 'checkpoint [0-9a-f-]\{36\} at batch' "$W/ckpt.out" | cut -d' ' -f2)
if [[ -n $uuid ]]; then
  modes=$(stat -c '%a %U' "$D/checkpoints/$uuid" "$D/checkpoints/$uuid"/* | sort -u | tr '\n' ',')
  result "N6b: bob's checkpoint $uuid in the default storage: modes/owners $modes storage $(stat -c %a "$D/checkpoints")"
else
  result "N6b FAILED: no checkpoint: $(tail -5 "$W/ckpt.out" | tr '\n' ' ')"
fi

echo "== N10: a 9,000-byte form-encoded body"
T=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["masters"][sys.argv[2]]["token"])' "$HOME/.det/auth.json" "$A")
/usr/bin/python3 -c 'print("{\"config\": \"" + "x" * 8980 + "\"}", end="")' >"$W/form9000.json"
r=$(curl -s -w ' HTTP %{http_code}' -H "Authorization: Bearer $T" -X POST "http://127.0.0.1:$((PORT + 1))/api/v1/experiments" -d @"$W/form9000.json")
[[ $r != *"larger than 128 MiB"* ]] && result "N10 held: $(echo "$r" | head -c 300)" || result "N10 FAILED: $r"

echo "== N13: .inf as a const hyperparameter"
sed -e 's/hidden_size: 16}/hidden_size: 16, x: .inf}/' "$W/ckpt.yaml" >"$W/inf.yaml"
r=$(bob experiment create "$W/inf.yaml" 2>&1)
[[ $r == *inf* && $r != *malformed* && $r != *"Created experiment"* ]] && result "N13 held: $(echo "$r" | tail -1)" || result "N13 FAILED: $r"

echo "== N12: a checkpoint id another trial already has ($uuid)"
mkdir -p "$W/dup"; chmod 0755 "$W/dup"
cat >"$W/dup/dup.py" <<'EOF'
import os
import det
with det.core.init() as core:
    host = core.checkpoint._require_storage('dup')
    for i in range(2):
        try:
            u = os.environ['UUID']
            core.checkpoint._client.report_checkpoint(u, host + '/' + u, 1, {}, '{}')
            print('report', i, 'OK', flush=True)
        except Exception as e:
            print('report', i, 'refused:', str(e).splitlines()[0][:200], flush=True)
    core.train.report_training_metrics(steps_completed=1, metrics={'loss': 1.0})
    for op in core.searcher.operations():
        op.report_completed(1.0)
EOF
sed -e 's/^name: peek/name: dup/' -e 's#^entrypoint: .*#entrypoint: python3 dup.py#' "$W/peek.yaml" >"$W/dup.yaml"
printf 'environment:\n  environment_variables:\n    - UUID=%s\n' "$uuid" >>"$W/dup.yaml"
bob experiment create "$W/dup.yaml" "$W/dup" --follow >"$W/dup.out" 2>&1
line=$(grep -m1 'report 0' "$W/dup.out")
[[ $line == *ALREADY_EXISTS* || $line == *"already exists"* ]] && result "N12 held: $line" || result "N12 FAILED: ${line:-$(tail -3 "$W/dup.out" | tr '\n' ' ')}"

echo "== N3: 32 parallel unauthenticated 120 MB POSTs"
head -c 125829120 /dev/zero | tr '\0' A >"$W/body120m.bin"
idle=$(awk '/VmRSS/ {print $2}' "/proc/$MPID/status")
hwm0=$(awk '/VmHWM/ {print $2}' "/proc/$MPID/status")
for k in $(seq 32); do
  curl -s -o /dev/null -w '%{http_code}\n' -H 'Content-Type: application/json' -X POST \
    -T "$W/body120m.bin" "http://127.0.0.1:$((PORT + 1))/api/v1/experiments" >>"$W/n3.codes" &
done
wait
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$MPID/status")
after=$(awk '/VmRSS/ {print $2}' "/proc/$MPID/status")
codes=$(sort "$W/n3.codes" | uniq -c | tr -s ' ' | tr '\n' ',')
if (( hwm - idle < 65536 )); then
  result "N3 held: RSS idle ${idle} KiB, peak ${hwm} KiB (+$(( (hwm - idle) / 1024 )) MiB; peak before ${hwm0}), after ${after} KiB; replies:${codes}"
else
  result "N3 FAILED: RSS idle ${idle} KiB, peak ${hwm} KiB (+$(( (hwm - idle) / 1024 )) MiB), after ${after} KiB; replies:${codes}"
fi
rm -f "$W/body120m.bin"

echo "== N4: a det.core PyTorch trial on a --tls cluster"
"$BIN/det" deploy local cluster-up --tls --data-dir "$W/c3" --agents 1 --master-port $((PORT + 200)) \
  --http-port $((PORT + 201)) --bin-dir "$BIN" >"$W/up3.log" 2>&1
CNN=common/worker/python/examples/fashion_mnist_cnn
# The shipped example config (the cluster's default checkpoint storage), 40 batches.
DET_MASTER_CERT_FILE=$W/c3/tls/ca.crt "$BIN/det" -m "https://127.0.0.1:$((PORT + 200))" \
  experiment create configs/examples/torch-fashion-mnist.yaml "$CNN" \
  --config 'searcher.max_length={batches: 40}' --config 'min_validation_period={batches: 40}' \
  --follow >"$W/tls.out" 2>&1
st=$(DET_MASTER_CERT_FILE=$W/c3/tls/ca.crt "$BIN/det" -m "https://127.0.0.1:$((PORT + 200))" trial describe 1 --json 2>/dev/null |
  /usr/bin/python3 -c 'import json,sys; t=json.load(sys.stdin)["trial"]; print(t["state"], "validation_loss", t["validation_summary"]["validation_loss"]["last"])' 2>&1)
[[ $st == STATE_COMPLETED* ]] && result "N4 held: the PyTorch Core API example on cluster-up --tls (as nobody): $st" ||
  result "N4 FAILED: $st $(tail -5 "$W/tls.out" | tr '\n' ' ')"
echo "scratch: $W"
