#!/usr/bin/env bash
# det's GPU check: one command on a machine with an NVIDIA GPU (tests/gpu/README.md).
#
#   bash tests/gpu/run.sh        (in a checkout that carries .det-local/gpu-bundle, made by
#                                 tests/gpu/bundle.sh; or bash .det-local/gpu-bundle/run.sh)
#
# Unpacks the bundle into /tmp/det-gpu (the fixed directory its binaries are patched for),
# then, each bounded by what is left of the time budget:
#   (a) the GPU test binaries (the gpu-tagged targets) with DET_REQUIRE_GPU=$REQUIRE;
#   (b) det's Python tests under the machine's torch (at the same time as (a));
#   (c) a real det-master + det-agent with a $SLOT slot (worker_python left unset: the agent
#       chooses), the Core API PyTorch example (with a pause and resume from its checkpoint)
#       and the plain DDP example, each to COMPLETED;
#   (d) det vs torchrun, the same DDP script on one device, alternating (gpu_bench.py).
# Writes $OUT/summary.txt (one line per check: PASSED / FAILED / SKIPPED, with figures),
# $OUT/gpu-run.log (everything) and $OUT/logs.tar.gz (the tests' and daemons' logs).
# Exit status 0 when nothing FAILED.
#
# Env: OUT (default /tmp/gpu-out), BUDGET (seconds, default 280), REQUIRE (DET_REQUIRE_GPU,
#   default 1), SLOT (cuda|cpu, default cuda), DET_TEST_PYTHON (the Python with torch;
#   default: the first of PATH's python3s, /opt/*/.venv, /opt/*/venv, conda, /usr/bin/python3
#   that imports torch), WORKER_PYTHON (auto: unset in agent.yaml; or a path), BUNDLE (the
#   carry folder), TORCH_LENGTH (Core API example, default "epochs: 1"), DDP_ARGS (default
#   "--epochs 1"), RESUME (1: pause and resume the Core API example; default 1), RESUME_LENGTH
#   (its length, default "epochs: 2"),
#   BENCH_STEPS (2000), BENCH_REPS (2), BENCH_MODEL (cnn), PY_JOBS (Python tests at once;
#   default 3 with 8+ cores, else 1), PY_TESTS (default: all six).
# CPU dry run (no GPU): REQUIRE=0 SLOT=cpu BUDGET=900 bash tests/gpu/run.sh
set -u
DEST=/tmp/det-gpu   # bundle.sh patches the binaries for this directory
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
LOG=$OUT/gpu-run.log
SUM=$OUT/summary.txt
: >"$SUM"

main() {
T0=$(date +%s)
BUDGET=${BUDGET:-280}
END=$((T0 + BUDGET))
REQUIRE=${REQUIRE:-1}
SLOT=${SLOT:-cuda}
TORCH_LENGTH=${TORCH_LENGTH:-"epochs: 1"}
DDP_ARGS=${DDP_ARGS:-"--epochs 1"}
RESUME=${RESUME:-1}
RESUME_LENGTH=${RESUME_LENGTH:-"epochs: 2"}
BENCH_STEPS=${BENCH_STEPS:-2000}
BENCH_REPS=${BENCH_REPS:-2}
BENCH_MODEL=${BENCH_MODEL:-cnn}
WORKER_PYTHON=${WORKER_PYTHON:-auto}
# The longest first (on an H200 machine: deterministic 80 s, trial 54 s, core 32 s with 3 at once).
PY_TESTS=${PY_TESTS:-"deterministic_test trial_test core_test torch_test sampler_test launch_test"}
if [[ ${PY_JOBS:-auto} == auto ]]; then PY_JOBS=$(( $(nproc) >= 8 ? 3 : 1 )); fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
NPASS=0 NFAIL=0 NSKIP=0

say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $((END - $(date +%s))); }
# result NAME STATUS DETAILS: one summary line (STATUS: PASSED, FAILED, SKIPPED, INFO)
result() {
  local name=$1 status=$2; shift 2
  case $status in PASSED) NPASS=$((NPASS + 1));; FAILED) NFAIL=$((NFAIL + 1));; SKIPPED) NSKIP=$((NSKIP + 1));; esac
  echo "$name: $status${*:+ $*}" >>"$SUM"
  say "RESULT $name: $status${*:+ $*}"
}
# budget CAP RESERVE: seconds for the next step, at most CAP, leaving RESERVE for what follows
budget() { local l=$(( $(left) - $2 )); echo $(( $1 < l ? $1 : l )); }

HERE=$(cd "$(dirname "$0")" && pwd)
say "det GPU check: BUDGET=${BUDGET}s REQUIRE=$REQUIRE SLOT=$SLOT OUT=$OUT"

# -- the bundle -----------------------------------------------------------------------------
CARRY=""
for c in "${BUNDLE:-}" "$HERE" "$HERE/../../.det-local/gpu-bundle" "$PWD/.det-local/gpu-bundle"; do
  [[ -n $c && -e $c/bundle.tar.gz ]] && { CARRY=$(cd "$c" && pwd); break; }
done
if [[ -n $CARRY ]]; then
  rm -rf "$DEST" && mkdir -p "$DEST" && tar xzf "$CARRY/bundle.tar.gz" -C "$DEST" &&
    cp -r "$CARRY/data" "$DEST/data" ||
    { result bundle FAILED "cannot unpack $CARRY/bundle.tar.gz into $DEST"; return; }
  say "bundle: $CARRY -> $DEST ($(du -sh "$DEST" | cut -f1)); $(cat "$DEST/BUILD_INFO")"
elif [[ -x $DEST/det/deploy/bin/det-master ]]; then
  say "bundle: using $DEST as it is"
else
  result bundle FAILED "no bundle: run tests/gpu/bundle.sh on the build machine and carry .det-local/gpu-bundle"
  return
fi
BIN=$DEST/det/deploy/bin
W=$(mktemp -d /tmp/det-gpu-run.XXXXXX)   # logs and work; tarred into $OUT at the end

# -- the machine ------------------------------------------------------------------------------
export PATH=$PATH:/usr/local/nvidia/bin:/usr/local/cuda/bin
say "== machine"
uname -a; grep PRETTY_NAME /etc/os-release 2>/dev/null; ldd --version 2>&1 | head -1; nproc
GPUS=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)
CUDAVER=$(timeout 20 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)
echo "GPUs: ${GPUS:-none}"; echo "${CUDAVER:-no nvidia-smi}"
[[ -n $GPUS ]] && timeout 20 nvidia-smi 2>&1 | head -20

find_python() {
  if [[ -n ${DET_TEST_PYTHON:-} ]]; then echo "$DET_TEST_PYTHON"; return; fi
  local cands=() d p
  local IFS=:
  for d in $PATH; do [[ -x $d/python3 ]] && cands+=("$d/python3"); done
  unset IFS
  for p in /opt/*/.venv/bin/python3 /opt/*/venv/bin/python3 /opt/conda/bin/python3 \
           /opt/miniconda3/bin/python3 /opt/miniforge3/bin/python3 /usr/bin/python3; do
    [[ -x $p ]] && cands+=("$p")
  done
  for p in "${cands[@]}"; do
    timeout 90 "$p" -c 'import torch' >/dev/null 2>&1 && { echo "$p"; return; }
  done
}
PY=$(find_python)
if [[ -z $PY ]]; then
  result python FAILED "no Python that imports torch (PATH, /opt/*/.venv, /opt/*/venv, conda, /usr/bin/python3); set DET_TEST_PYTHON"
  PYINFO="none"
else
  PYINFO=$(timeout 120 "$PY" -c "
import sys, torch
try:
    import grpc; g = grpc.__version__
except Exception as e: g = 'missing'
try:
    import google.protobuf as p; pb = p.__version__
except Exception as e: pb = 'missing'
c = torch.cuda.is_available()
print(f'{sys.executable} (Python {sys.version.split()[0]}): torch {torch.__version__}, cuda {c}'
      + (f' ({torch.cuda.get_device_name(0)}, torch CUDA {torch.version.cuda})' if c else '')
      + f', grpcio {g}, protobuf {pb}')" 2>&1 | tail -1)
fi
say "python with torch: $PYINFO"
HOSTDESC="$(hostname), $(grep PRETTY_NAME /etc/os-release 2>/dev/null | cut -d'"' -f2), $(ldd --version 2>&1 | head -1 | grep -o '[0-9.]*$' | sed 's/^/glibc /'), $(nproc) cores"
echo "det GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $HOSTDESC; GPU: ${GPUS:-none}${CUDAVER:+ ($CUDAVER)}; $(cat "$DEST/BUILD_INFO" 2>/dev/null)" >>"$SUM"
echo "python: $PYINFO; budget ${BUDGET}s, REQUIRE=$REQUIRE, SLOT=$SLOT" >>"$SUM"
if [[ -z $GPUS ]]; then
  if [[ $REQUIRE == 1 ]]; then result gpu FAILED "no GPU visible (nvidia-smi) and DET_REQUIRE_GPU=1"
  else say "no GPU visible (REQUIRE=0: a dry run)"; fi
fi

# -- CUDA libraries that load under the bundled glibc -------------------------------------------
say "== CUDA libraries"
NVPKG=$([[ -n $PY ]] && timeout 60 "$PY" -c "import nvidia, os; print(' '.join(nvidia.__path__))" 2>/dev/null)
echo "nvidia wheels: ${NVPKG:-none}"
ROOTS=()
for r in /usr/local/cuda/ /usr/local/cuda-13.0/ /usr/local/nvidia/ /usr/lib/x86_64-linux-gnu/ /usr/lib64/ /lib/x86_64-linux-gnu/ /usr/local/lib/ $NVPKG; do
  [[ -d $r ]] && ROOTS+=("$r")
done
namepat=( \( -name 'libcublasLt.so.13*' -o -name 'libcublas.so.13*' -o -name 'libnccl.so.2*' \
             -o -name 'libcuda.so.1*' -o -name 'libnvidia-ml.so.1*' -o -name 'libcudart.so.13*' \) )
ALL=$(timeout 60 find "${ROOTS[@]}" "${namepat[@]}" 2>/dev/null | sort -u)
if ! echo "$ALL" | grep -q '/libnccl\.so\.2$' || ! echo "$ALL" | grep -q '/libcublasLt\.so\.13$'; then
  echo "(not all found: searching /opt and /usr)"
  ALL=$( (echo "$ALL"; timeout 60 find /opt /usr \( -name 'libcublasLt.so.13*' -o -name 'libcublas.so.13*' -o -name 'libnccl.so.2*' \) 2>/dev/null) | grep . | sort -u)
fi
echo "$ALL"
rank_dir() {  # lower is better: driver dirs, then the system's, the toolkit; stubs and compat last
  case $1 in */stubs*|*/compat*) echo 9;; /usr/local/nvidia*) echo 0;; /usr/lib/x86_64-linux-gnu*|/lib/x86_64-linux-gnu*|/usr/lib64*) echo 1;; /usr/local/cuda*) echo 2;; *) echo 3;; esac
}
pick() {  # pick NAME: the best candidate file named exactly NAME
  local best="" br=99 f r
  for f in $(echo "$ALL" | grep "/$1\$"); do r=$(rank_dir "$f"); ((r < br)) && { best=$f; br=$r; }; done
  echo "$best"
}
D=$DEST
rm -rf $D/cuda; mkdir -p $D/cuda
for n in libcuda.so.1 libnvidia-ml.so.1; do
  f=$(pick $n); [[ -n $f ]] && ln -sf "$f" $D/cuda/$n
done
CUDADIR=$(dirname "$(pick libcuda.so.1)")
[[ $CUDADIR != . ]] && for f in "$CUDADIR"/libnvidia-*.so*; do [[ -e $f ]] && ln -sf "$f" $D/cuda/ 2>/dev/null; done
traceerr() { LD_TRACE_LOADED_OBJECTS=1 "$1" 2>&1 | grep -E "not found|error while loading|cannot open" | head -3; }
# choose NAME PROBE CANDIDATES...: the first candidate with which PROBE's libraries all resolve
choose() {
  local name=$1 probe=$2 f e; shift 2
  for f in "$@"; do
    ln -sf "$f" "$D/cuda/$name"
    e=$(traceerr "$probe")
    [[ -z $e ]] && { echo "  $name -> $f"; return 0; }
    echo "  $name: rejected $f: $e"
  done
  rm -f "$D/cuda/$name"; return 1
}
choose_all() {
  local cub=() d f ok=0
  for f in $(echo "$ALL" | grep '/libcublas\.so\.13$'); do
    d=$(dirname "$f"); [[ -e $d/libcublasLt.so.13 ]] && cub+=("$d")
  done
  for d in "${cub[@]}"; do
    ln -sf "$d/libcublasLt.so.13" $D/cuda/libcublasLt.so.13
    choose libcublas.so.13 $D/tests/model_test "$d/libcublas.so.13" && { ok=1; break; }
  done
  ((ok)) || return 1
  # NCCL: the pip wheel's first (manylinux: loads under the bundled glibc 2.36), then the system's
  choose libnccl.so.2 $D/det/common/worker/cpp/collective/collective_test_worker \
    $(echo "$ALL" | grep '/libnccl\.so\.2$' | grep site-packages) $(echo "$ALL" | grep '/libnccl\.so\.2$' | grep -v site-packages)
}
GLIBC_MODE="bundled (Debian 12, 2.36)"
if [[ ${FORCE_NATIVE_GLIBC:-0} == 1 ]] || ! choose_all; then
  # The device's own glibc instead of Debian's (links in place of the bundled files).
  GLIBC_MODE="the device's own"
  echo "switching to the device's glibc"
  ln -sf /lib64/ld-linux-x86-64.so.2 $D/lib/ld-linux-x86-64.so.2
  for n in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1 libstdc++.so.6 libgcc_s.so.1; do
    [[ -e /lib/x86_64-linux-gnu/$n ]] && ln -sf /lib/x86_64-linux-gnu/$n $D/lib/$n
  done
  choose_all || echo "NO WORKING CUDA LIBRARY SET"
fi
CUDALIBS=$(cd $D/cuda && for n in libcublas.so.13 libnccl.so.2 libcuda.so.1 libnvidia-ml.so.1; do echo -n "$n=$(readlink $n || echo none) "; done)
say "glibc: $GLIBC_MODE; $CUDALIBS"

# Every binary of the bundle runs with the bundled loader and finds every library in the
# bundle ($D/lib) or among the CUDA links ($D/cuda): the patchelf'd paths work here.
say "== bundle check"
EXES=("$BIN"/* "$D"/det/common/worker/cpp/collective/collective_test_worker
      "$D"/det/common/worker/python/det/pytorch/elastic_order_tool "$D"/tests/*)
bad=""; n=0
for e in "${EXES[@]}"; do
  n=$((n + 1))
  interp=$(readelf -l "$e" 2>/dev/null | grep -o 'interpreter: [^]]*' | cut -d' ' -f2)
  [[ $interp == "$D/lib/ld-linux-x86-64.so.2" ]] || bad+=" $(basename "$e"): interpreter $interp;"
  out=$(LD_TRACE_LOADED_OBJECTS=1 "$e" 2>&1)
  miss=$(echo "$out" | grep -E "not found|error while loading|cannot open" | head -2 | tr '\n' ' ')
  outside=$(echo "$out" | grep '=>' | grep -v -E "=> ($D/lib/|$D/cuda/)" | awk '{print $1 "=" $3}' | tr '\n' ' ')
  [[ -n $miss ]] && bad+=" $(basename "$e"): $miss;"
  [[ -n $outside ]] && bad+=" $(basename "$e") loads from outside: $outside;"
done
if [[ -z $bad ]]; then
  result bundle PASSED "$n binaries run from $D with the bundled loader; every library from $D/lib or $D/cuda (glibc: $GLIBC_MODE; $CUDALIBS)"
else
  result bundle FAILED "$bad (glibc: $GLIBC_MODE)"
fi
if ! "$BIN/det-master" --version >/dev/null 2>&1; then
  result bundle-run FAILED "det-master --version: $("$BIN/det-master" --version 2>&1 | head -2 | tr '\n' ' ')"
fi

# -- Fashion-MNIST where the C++ tests look for it ----------------------------------------------
FM=/usr/share/datasets/fashion-mnist
if [[ ! -e $FM/train-images-idx3-ubyte.gz ]]; then
  { mkdir -p /usr/share/datasets && ln -sfn "$D/data" $FM; } 2>/dev/null ||
    say "cannot put Fashion-MNIST at $FM (gpu_test reads it there)"
fi
ls -lL $FM 2>&1 | head -6

GPUMON=$W/gpumon
MON=""
if [[ -n $GPUS ]]; then
  ( while true; do echo "$(date +%s) $(timeout 5 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1 | tr '\n' ';')"; sleep 1; done ) >"$GPUMON" 2>&1 &
  MON=$!
fi
# gpu_seen FROM TO: the GPU processes nvidia-smi saw between two times
gpu_seen() {
  [[ -e $GPUMON ]] || { echo "no nvidia-smi"; return; }
  awk -v a="$1" -v b="$2" '
    $1 >= a && $1 <= b {
      total++; line = $0; sub(/^[0-9]+ /, "", line); any = 0
      n = split(line, apps, ";")
      for (i = 1; i <= n; i++) {
        if (split(apps[i], f, ", ") < 3) continue
        mem = f[3] + 0; any = 1
        if (mem > max[f[2]]) max[f[2]] = mem
      }
      if (any) seen++
    }
    END {
      out = ""
      for (name in max) out = out (out ? ", " : "") name " up to " max[name] " MiB"
      if (out == "") print "none"; else printf "%s (in %d of %d one-second samples)\n", out, seen, total
    }' "$GPUMON"
}

# -- (b) Python tests, in the background while (a) runs ----------------------------------------
pytest_one() {  # NAME CAP: one test file under $PY; writes $W/py-NAME.{out,rc}
  local name=$1 cap=$2 s rc args=()
  case $name in
    sampler_test) args=(pytorch/sampler_test.py "$D/det/common/worker/python/det/pytorch/elastic_order_tool");;
    deterministic_test) args=(pytorch/deterministic_test.py);;
    *) args=(tests/$name.py);;
  esac
  s=$(date +%s)
  (cd "$D/py" && PYTHONPATH="$D/det/deploy/python:$D/py" timeout -k 5 "$cap" "$PY" "${args[@]}") >"$W/py-$name.out" 2>&1
  rc=$?
  echo "$rc $(( $(date +%s) - s )) $cap" >"$W/py-$name.rc"
}
pytests() {
  local t running=0
  for t in $PY_TESTS; do
    local cap; cap=$(budget 240 100)
    if (( cap < 20 )); then echo "124 0 0" >"$W/py-$t.rc"; : >"$W/py-$t.out"; continue; fi
    pytest_one "$t" "$cap" &
    running=$((running + 1))
    if (( running >= PY_JOBS )); then wait -n; running=$((running - 1)); fi
  done
  wait
}
PYPID=""
if [[ -n $PY ]]; then
  say "== (b) Python tests under $PY, $PY_JOBS at a time: $PY_TESTS"
  pytests &
  PYPID=$!
fi

# -- (a) the GPU test binaries -------------------------------------------------------------------
export TEST_SRCDIR=$D TEST_WORKSPACE=det DET_REQUIRE_GPU=$REQUIRE NCCL_DEBUG=${NCCL_DEBUG:-WARN}
run_gtest() {  # NAME CAP
  local name=$1 cap=$2 t rc s dt o=$W/gtest-$1.out
  t=$(budget "$cap" 110)
  if (( t < 10 )); then result "gpu $name" SKIPPED "out of time"; return; fi
  rm -rf "$W/tmp-$name"; mkdir -p "$W/tmp-$name"
  say "== (a) $name (timeout ${t}s)"
  s=$(date +%s)
  TEST_TMPDIR=$W/tmp-$name timeout -k 5 "$t" "$D/tests/$name" --gtest_color=no >"$o" 2>&1
  rc=$?
  dt=$(( $(date +%s) - s ))
  tail -n 25 "$o"
  local np nf ns why
  np=$(grep -cE '^\[       OK \]' "$o"); nf=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$o")
  ns=$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$o")
  why=$(grep -m1 -A1 ': Skipped$' "$o" | tail -1 | head -c 160)
  if (( rc == 124 || rc == 137 )); then result "gpu $name" FAILED "timed out after ${dt}s ($np ok, $nf failed)"
  elif (( rc != 0 )); then
    result "gpu $name" FAILED "rc=$rc in ${dt}s: $np ok, $nf failed, $ns skipped; $(grep -m2 -E 'Failure|error|Error' "$o" | head -c 300 | tr '\n' ' ')"
  elif (( np == 0 && ns > 0 )); then result "gpu $name" SKIPPED "$ns case(s) skipped in ${dt}s: $why"
  else result "gpu $name" PASSED "$np case(s) ok$( ((ns > 0)) && echo ", $ns skipped: $why") in ${dt}s"; fi
}
run_gtest nvml_gpu_test 30
run_gtest model_test 60
run_gtest nccl_collective_gpu_test 60
run_gtest gpu_test 120
grep -hE 'validation accuracy|on cuda:|nccl collective' "$W/gtest-gpu_test.out" 2>/dev/null | head -4

if [[ -n $PYPID ]]; then
  say "waiting for the Python tests"
  wait "$PYPID"
  for t in $PY_TESTS; do
    read -r rc dt cap <"$W/py-$t.rc" 2>/dev/null || { rc=1; dt=0; cap=0; }
    o=$W/py-$t.out
    ran=$(grep -oE '^Ran [0-9]+ tests?' "$o" | tail -1 | grep -oE '[0-9]+')
    fin=$(grep -E '^(OK|FAILED)( \(.*\))?$' "$o" | tail -1)
    if [[ $cap == 0 ]]; then result "python $t" SKIPPED "out of time"
    elif (( rc == 124 || rc == 137 )); then result "python $t" FAILED "timed out after ${dt}s"; tail -n 30 "$o"
    elif (( rc != 0 )); then
      result "python $t" FAILED "rc=$rc in ${dt}s: ${ran:-?} tests, ${fin:-no unittest summary}; $(grep -m3 -E '^(FAIL|ERROR):|Error' "$o" | tr '\n' ' ' | head -c 300)"
      tail -n 40 "$o"
    else result "python $t" PASSED "${ran:-?} tests ${fin:-OK} in ${dt}s"; fi
  done
  grep -h "Warning" "$W"/py-*.out 2>/dev/null | sort | uniq -c | sort -rn | head -5
fi

# -- (c) the examples through a real master and agent ----------------------------------------
C=$W/cluster
mkdir -p "$C/home" "$C/checkpoints"
MPID="" APID=""
stop_pid() {  # PID: SIGTERM, then SIGKILL after 10 s
  local i
  kill "$1" 2>/dev/null || return 0
  for i in $(seq 20); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$1" 2>/dev/null
}
stop_daemons() {
  [[ -n $APID ]] && stop_pid "$APID"
  [[ -n $MPID ]] && stop_pid "$MPID"
  APID="" MPID=""
}
trap 'stop_daemons; [[ -n $MON ]] && kill $MON 2>/dev/null' EXIT
start_agent() {  # [WORKER_PYTHON path]
  local wp=""
  [[ -n ${1:-} ]] && wp="worker_python: $1"
  local slots=""; [[ $SLOT == cpu ]] && slots="slots: 1"
  cat >"$C/agent.yaml" <<EOF
master: "$ADDR"
agent_id: gpu-check-agent
slot_type: $SLOT
$slots
work_dir: $C/agent
worker_path: [$BIN]
$wp
cluster_secret: gpu-check-secret
heartbeat_interval: 1s
kill_grace: 3s
EOF
  "$BIN/det-agent" --config "$C/agent.yaml" >>"$C/agent.log" 2>&1 &
  APID=$!
  local i
  for i in $(seq 120); do grep -q 'worker_python:' "$C/agent.log" && break; kill -0 $APID 2>/dev/null || break; sleep 0.5; done
}
det() { timeout -k 5 "${DT:-60}" "$BIN/det" -m "$ADDR" "$@"; }
jq_py() {  # jq_py FILE EXPR: a Python expression over the JSON in FILE as d
  "${PY:-python3}" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null
}
CLUSTER_OK=0
if (( $(left) < 40 )); then
  result cluster SKIPPED "out of time"
else
  say "== (c) a det-master and a det-agent with a $SLOT slot"
  cat >"$C/master.yaml" <<EOF
grpc_listen: "127.0.0.1:0"
data_dir: $C/master
address_file: $C/master.addr
cluster_secret: gpu-check-secret
http_listen: "127.0.0.1:0"
http_address_file: $C/master.http_addr
checkpoint_storage: {type: shared_fs, host_path: $C/checkpoints}
checkpoint_storage_allowed_roots: [$C/checkpoints]
EOF
  DET_ADMIN_PASSWORD=det-gpu-check-pw "$BIN/det-master" --config "$C/master.yaml" >"$C/master.log" 2>&1 &
  MPID=$!
  for i in $(seq 100); do [[ -s $C/master.addr ]] && break; sleep 0.2; done
  ADDR=$(cat "$C/master.addr" 2>/dev/null)
  export HOME=$C/home DET_MASTER=$ADDR
  if [[ -z $ADDR ]]; then
    result cluster FAILED "det-master did not start: $(tail -n 5 "$C/master.log" | tr '\n' ' ')"
  else
    if [[ $WORKER_PYTHON == auto ]]; then start_agent; else start_agent "$WORKER_PYTHON"; fi
    chose=$(grep -m1 'worker_python:' "$C/agent.log" | sed 's/.*worker_python: //')
    if [[ $WORKER_PYTHON != auto ]]; then
      result worker_python INFO "set in agent.yaml: $chose"
    elif grep 'worker_python:' "$C/agent.log" | grep -q 'cannot run'; then
      result worker_python FAILED "worker_python unset: the agent found none with torch ($chose); restarted with worker_python: $PY"
      kill "$APID" 2>/dev/null; wait "$APID" 2>/dev/null; start_agent "$PY"
    elif [[ -z $chose ]]; then
      result worker_python FAILED "worker_python unset: the agent said nothing of its choice: $(tail -n 3 "$C/agent.log" | tr '\n' ' ')"
    else
      same=""; [[ -n $PY && $chose == *"$PY"* ]] && same=" (the same as the tests' Python)"
      result worker_python PASSED "worker_python unset: the agent chose $chose$same"
    fi
    DET_PASSWORD=det-gpu-check-pw det user login admin 2>&1
    for i in $(seq 60); do det slot list 2>/dev/null | grep -q gpu-check-agent && break; sleep 0.5; done
    det slot list 2>&1
    det agent list --json >"$C/agents.json" 2>&1; head -c 1500 "$C/agents.json"; echo
    if det slot list 2>/dev/null | grep -q gpu-check-agent; then CLUSTER_OK=1; else
      result cluster FAILED "the agent did not register: $(tail -n 5 "$C/agent.log" | tr '\n' ' ')"; fi
  fi
fi

# run_experiment NAME CONFIG CONTEXT CAP: creates it, waits for the end; sets EXP, EXP_RC, EXP_DT
run_experiment() {
  local name=$1 cfg=$2 ctx=$3 cap=$4 s
  s=$(date +%s)
  EXP=$(DT=60 det experiment create "$cfg" "$ctx" --json 2>"$W/$name.create.err" | "${PY:-python3}" -c 'import json,sys; print(json.load(sys.stdin)["experiment"]["id"])' 2>/dev/null)
  if [[ -z $EXP ]]; then EXP_RC=1; EXP_DT=0; cat "$W/$name.create.err"; return; fi
  say "experiment $EXP ($name), waiting up to ${cap}s"
  DT=$cap det experiment wait "$EXP" >"$W/$name.wait" 2>&1
  EXP_RC=$?
  EXP_DT=$(( $(date +%s) - s ))
  DT=30 det experiment describe "$EXP" --json >"$W/$name.describe.json" 2>&1
  kill_unfinished "$EXP" "$W/$name.describe.json"
  TRIAL=$(jq_py "$W/$name.describe.json" 'd["trials"][0]["id"]')
  [[ -n $TRIAL ]] && DT=30 det trial logs "$TRIAL" >"$W/$name.logs" 2>&1
}
kill_unfinished() {  # ID DESCRIBE_JSON: an experiment still running is killed (it would hold the slot)
  local est; est=$(jq_py "$2" 'd["experiment"]["state"]')
  case $est in *COMPLETED*|*ERROR*|*CANCELED*|*KILLED*) ;; *) say "killing experiment $1 ($est)"; DT=30 det experiment kill "$1" >/dev/null 2>&1;; esac
}
state_of() { jq_py "$W/$1.describe.json" 'd["trials"][0]["state"]'; }

if (( CLUSTER_OK )); then
  # The Core API example: one epoch (TORCH_LENGTH), data from the bundle.
  cap=$(budget 120 60)
  if (( cap < 30 )); then result "example torch-fashion-mnist" SKIPPED "out of time"; else
    sed -e "s/^    epochs: 3\$/    $TORCH_LENGTH/" \
        -e "s#^  dir: .*#  dir: $D/data#" "$D/cfg/torch-fashion-mnist.yaml" >"$C/torch-fm.yaml"
    say "== (c) Core API example: $(grep -A1 max_length "$C/torch-fm.yaml" | tail -1 | xargs), $SLOT slot"
    s=$(date +%s)
    run_experiment torch-fm "$C/torch-fm.yaml" "$D/examples/fashion_mnist_cnn" "$cap"
    st=$(state_of torch-fm)
    acc=$(jq_py "$W/torch-fm.describe.json" '"%.4f" % d["trials"][0]["validation_summary"]["accuracy"]["last"]')
    nb=$(jq_py "$W/torch-fm.describe.json" 'd["trials"][0].get("total_batches")')
    seen=$(gpu_seen "$s" "$(date +%s)")
    tail -n 15 "$W/torch-fm.logs" 2>/dev/null
    if [[ $st == STATE_COMPLETED ]]; then
      result "example torch-fashion-mnist" PASSED "COMPLETED on a $SLOT slot in ${EXP_DT}s: $nb batches, validation accuracy $acc; GPU processes seen: ${seen:-none}"
    else
      result "example torch-fashion-mnist" FAILED "state ${st:-unknown} after ${EXP_DT}s (wait rc=$EXP_RC); $(grep -m3 -E 'Error|error|Traceback' "$W/torch-fm.logs" 2>/dev/null | tr '\n' ' ' | head -c 400)"
      tail -n 40 "$W/torch-fm.logs" 2>/dev/null
    fi
  fi

  # The same example paused after its first report and activated again: it resumes from
  # the checkpoint it wrote when asked to stop (on a GPU: the RNG state must stay on the CPU).
  cap=$(budget 120 60)
  if [[ $RESUME != 1 ]]; then :
  elif (( cap < 40 )); then result "example torch-fashion-mnist resume" SKIPPED "out of time"; else
    sed -e "s/^    epochs: 3\$/    $RESUME_LENGTH/" \
        -e "s#^  dir: .*#  dir: $D/data#" "$D/cfg/torch-fashion-mnist.yaml" >"$C/torch-fm-resume.yaml"
    say "== (c) Core API example: pause after the first report, activate, to the end"
    s=$(date +%s)
    EXP=$(DT=60 det experiment create "$C/torch-fm-resume.yaml" "$D/examples/fashion_mnist_cnn" --json 2>&1 | "${PY:-python3}" -c 'import json,sys; print(json.load(sys.stdin)["experiment"]["id"])' 2>/dev/null)
    paused_at=""
    if [[ -n $EXP ]]; then
      for i in $(seq $((cap * 4))); do
        DT=20 det experiment describe "$EXP" --json >"$W/resume.describe.json" 2>/dev/null
        nb=$(jq_py "$W/resume.describe.json" 'd["trials"][0].get("total_batches", 0) if d.get("trials") else 0')
        [[ ${nb:-0} -gt 0 ]] && break
        (( $(date +%s) - s > cap / 2 )) && break
        sleep 0.25
      done
      DT=30 det experiment pause "$EXP" >/dev/null 2>&1
      for i in $(seq $((cap * 2))); do
        DT=20 det experiment describe "$EXP" --json >"$W/resume.describe.json" 2>/dev/null
        est=$(jq_py "$W/resume.describe.json" 'd["experiment"]["state"]')
        [[ $est == *PAUSED* || $est == *COMPLETED* || $est == *ERROR* ]] && break
        (( $(date +%s) - s > cap * 2 / 3 )) && break
        sleep 0.5
      done
      paused_at=$(jq_py "$W/resume.describe.json" 'd["trials"][0].get("total_batches", 0)')
      say "experiment $EXP: $est at batch $paused_at"
      DT=30 det experiment activate "$EXP" >/dev/null 2>&1
      DT=$(( cap - ($(date +%s) - s) > 5 ? cap - ($(date +%s) - s) : 5 )) det experiment wait "$EXP" >/dev/null 2>&1
      DT=30 det experiment describe "$EXP" --json >"$W/resume.describe.json" 2>&1
      kill_unfinished "$EXP" "$W/resume.describe.json"
      TRIAL=$(jq_py "$W/resume.describe.json" 'd["trials"][0]["id"]')
      [[ -n $TRIAL ]] && DT=30 det trial logs "$TRIAL" >"$W/resume.logs" 2>&1
    fi
    st=$(jq_py "$W/resume.describe.json" 'd["trials"][0]["state"]')
    resumed=$(grep -m1 -o 'resumed from checkpoint [^ ]* at batch [0-9]*' "$W/resume.logs" 2>/dev/null)
    dt=$(( $(date +%s) - s ))
    grep -E 'asked to stop|resumed|checkpoint|Error|error' "$W/resume.logs" 2>/dev/null | tail -n 8
    if [[ $st == STATE_COMPLETED && -n $resumed ]]; then
      result "example torch-fashion-mnist resume" PASSED "paused (${est:-?} at batch $paused_at), activated, $resumed, COMPLETED in ${dt}s"
    elif [[ $st == STATE_COMPLETED ]]; then
      result "example torch-fashion-mnist resume" SKIPPED "COMPLETED in ${dt}s but not resumed (${est:-?} at batch $paused_at: it finished before the pause took)"
    else
      result "example torch-fashion-mnist resume" FAILED "state ${st:-unknown} after ${dt}s (${est:-?} at batch $paused_at); $(grep -m3 -E 'Error|error|Traceback' "$W/resume.logs" 2>/dev/null | tr '\n' ' ' | head -c 400)"
      tail -n 40 "$W/resume.logs" 2>/dev/null
    fi
  fi

  # The plain DDP example (no det import): one rank on the slot.
  cap=$(budget 90 45)
  if (( cap < 30 )); then result "example torch-ddp" SKIPPED "out of time"; else
    sed -e "s#^entrypoint: .*#entrypoint: python3 train.py --data-dir $D/data $DDP_ARGS --hidden 128#" \
        -e "s/^  slots_per_trial: .*/  slots_per_trial: 1/" "$D/cfg/torch-ddp.yaml" >"$C/torch-ddp.yaml"
    say "== (c) plain DDP example, 1 rank, $SLOT slot"
    s=$(date +%s)
    run_experiment torch-ddp "$C/torch-ddp.yaml" "$D/examples/torch_ddp" "$cap"
    st=$(state_of torch-ddp)
    seen=$(gpu_seen "$s" "$(date +%s)")
    dev=$(grep -m1 -o 'backend=[a-z]* device=[a-z0-9:]*' "$W/torch-ddp.logs" 2>/dev/null)
    fin=$(grep -m1 -oE 'steps=[0-9]+ final_loss=[0-9.]+ .*test_accuracy=[0-9.]+' "$W/torch-ddp.logs" 2>/dev/null | sed 's/mean_final_loss=[0-9.]* //')
    secs=$(grep -m1 -oE 'seconds=[0-9.]+' "$W/torch-ddp.logs" 2>/dev/null)
    tail -n 6 "$W/torch-ddp.logs" 2>/dev/null
    want=$([[ $SLOT == cuda ]] && echo "backend=nccl device=cuda:0" || echo "backend=gloo device=cpu")
    if [[ $st == STATE_COMPLETED && $dev == "$want" ]]; then
      result "example torch-ddp" PASSED "COMPLETED on a $SLOT slot in ${EXP_DT}s: $dev, $fin, $secs"
    elif [[ $st == STATE_COMPLETED ]]; then
      result "example torch-ddp" FAILED "COMPLETED but ran with '${dev:-?}', not '$want' ($fin)"
    else
      result "example torch-ddp" FAILED "state ${st:-unknown} after ${EXP_DT}s (wait rc=$EXP_RC); $(grep -m3 -E 'Error|error|Traceback' "$W/torch-ddp.logs" 2>/dev/null | tr '\n' ' ' | head -c 400)"
      tail -n 40 "$W/torch-ddp.logs" 2>/dev/null
    fi
  fi

  # -- (d) det vs torchrun on one device -------------------------------------------------------
  if (( $(left) < 60 )); then result "bench det-vs-torchrun" SKIPPED "out of time ($(left)s left)"; else
    say "== (d) det vs torchrun: bench_train.py, 1 rank on $SLOT, $BENCH_REPS x $BENCH_STEPS steps each, alternating"
    timeout -k 5 $(( $(left) - 5 )) "$PY" "$D/gpu/gpu_bench.py" --python "$PY" --det "$BIN/det" \
      --master "$ADDR" --data-dir "$D/data" --device "$SLOT" --reps "$BENCH_REPS" \
      --steps "$BENCH_STEPS" --model "$BENCH_MODEL" --deadline $(( END - 8 )) \
      --json "$W/bench.json" --torch-run "$D/bench/torch_run.py" 2>&1 | tee "$W/bench.out"
    brc=${PIPESTATUS[0]}
    line=$(jq_py "$W/bench.json" '"%s %s, %d steps of 64: torchrun %.0f samples/s (%d runs), det %.0f samples/s (%d runs), det/torchrun %s; launch to first step torchrun %.2f s, det %.2f s; devices %s" % (d["model"], d["torch"], d["steps"], d["torchrun_sps"], d["runs"]["torchrun"], d["det_sps"], d["runs"]["det"], ("%.1f%%" % (100 * d["ratio"])) if d["ratio"] else "n/a", d["torchrun_launch_s"], d["det_launch_s"], "/".join(d["devices"]))')
    if (( brc == 0 )); then result "bench det-vs-torchrun" PASSED "$line"
    else result "bench det-vs-torchrun" FAILED "rc=$brc: ${line:-no result}; $(grep -m2 -E 'FAILED|error' "$W/bench.out" | tr '\n' ' ' | head -c 300)"; fi
  fi
else
  for x in "example torch-fashion-mnist" "example torch-ddp" "bench det-vs-torchrun"; do
    result "$x" FAILED "no cluster (see above)"
  done
fi
stop_daemons
[[ -n $MON ]] && kill "$MON" 2>/dev/null
say "--- tail of agent.log"; tail -n 25 "$C/agent.log" 2>/dev/null
say "--- tail of master.log"; tail -n 10 "$C/master.log" 2>/dev/null
tar czf "$OUT/logs.tar.gz" -C "$W" --exclude='checkpoints' --exclude='*.pt' --exclude='master' \
  --exclude='agent' --exclude='tmp-*' . 2>/dev/null
tar czf "$OUT/gtest-tmp.tar.gz" -C "$W" --exclude='*.pt' --exclude='*.gz' --exclude='*.db' $(cd "$W" && ls -d tmp-* 2>/dev/null) 2>/dev/null
rm -rf "$W"
echo "total: $NPASS passed, $NFAIL failed, $NSKIP skipped in $(( $(date +%s) - T0 ))s (budget ${BUDGET}s)" >>"$SUM"
say "== done"
cat "$SUM"
}

main "$@" 2>&1 | tee "$LOG"
exit $(grep -q ': FAILED' "$SUM" && echo 1 || echo 0)
