#!/usr/bin/env bash
# wheel_test: the det wheel (//deploy:wheel) installs as a user installs it, offline: pip in
# a fresh `python3 -m venv --system-site-packages` with --no-index (Debian's python3-grpcio,
# python3-protobuf and python3-torch satisfy its dependencies, so nothing is downloaded).
# From the venv, with no source tree in reach: det, det.core, det.pytorch and the generated
# stubs import from the venv's site-packages, the native library loads, the PEP 561 markers
# are there, and a Trainer-API script (wheel_trial.py) trains to the end in local mode (no
# DET_MASTER) with its validations and checkpoints; mypy sees det's type hints there (PEP
# 561). Last, pip uninstall removes every file the wheel installed (its RECORD).
#
#   wheel_test.sh WHEEL_DIR TRIAL_SCRIPT BUNDLE_DIR
#
# BUNDLE_DIR (//deploy:python, what agents put on workers' PYTHONPATH) must hold the same
# files, byte for byte, as the wheel's package (the wheel adds only its metadata and the
# py.typed markers).
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

wheel_dir=$1
trial_script=$2
bundle_dir=$3
python=/usr/bin/python3  # Debian's, with torch, grpcio and protobuf
tmp=${TEST_TMPDIR:?run me with bazel test}

shopt -s nullglob
wheels=("$wheel_dir"/det-*.whl)
((${#wheels[@]} == 1)) || fail "expected one det-*.whl in $wheel_dir, found ${#wheels[@]}"
wheel=$(cd "$(dirname "${wheels[0]}")" && pwd)/$(basename "${wheels[0]}")
echo "wheel: $(basename "$wheel") ($(stat -c %s "$wheel") bytes)"

"$python" - "$wheel" "$bundle_dir" <<'PY' || fail "the wheel and the agents' bundle differ"
import os, sys, zipfile
wheel, bundle = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    in_wheel = {n: z.read(n) for n in z.namelist()
                if ".dist-info/" not in n and not n.endswith("/py.typed")}
in_bundle = {}
for root, dirs, files in os.walk(bundle, followlinks=True):
    dirs[:] = [d for d in dirs if d != "__pycache__"]  # a worker may have run from there
    for f in files:
        path = os.path.join(root, f)
        with open(path, "rb") as fh:
            in_bundle[os.path.relpath(path, bundle)] = fh.read()
only_wheel = sorted(set(in_wheel) - set(in_bundle))
only_bundle = sorted(set(in_bundle) - set(in_wheel))
changed = sorted(n for n in set(in_wheel) & set(in_bundle) if in_wheel[n] != in_bundle[n])
assert not (only_wheel or only_bundle or changed), (only_wheel, only_bundle, changed)
print(f"the wheel holds the bundle's {len(in_bundle)} files")
PY

# Nothing of the caller's or of the runfiles tree may supply det; pip reads no config, keeps
# no cache and asks no index.
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
for v in $(compgen -e | grep -E '^(DET_|PIP_)' || true); do unset "$v"; done
export HOME=$tmp/home TMPDIR=$tmp/tmp PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 \
       PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$HOME" "$TMPDIR" "$tmp/work"

venv=$tmp/venv
"$python" -m venv --system-site-packages "$venv" ||
  fail "python3 -m venv failed: Debian's python3-venv is needed (deploy/setup.sh)"
[[ -x $venv/bin/pip ]] || fail "the venv has no pip (ensurepip: Debian's python3-venv)"

"$venv/bin/python" -m pip install --no-index "$wheel" || fail "pip install --no-index failed"
# The extra `torch` (det.pytorch's) is met by Debian's torch as well.
"$venv/bin/python" -m pip install --no-index "det[torch] @ file://$wheel" ||
  fail "pip install --no-index det[torch] failed"

# From a directory holding nothing but the script, with -I: no PYTHONPATH, no user site,
# not the current directory.
cp "$trial_script" "$tmp/work/train.py"
cd "$tmp/work"
"$venv/bin/python" -I - <<'PY' || fail "the installed package is not complete"
import importlib.metadata
import os
import sys
import sysconfig

import det
import det._proto.worker_pb2
import det._proto.worker_pb2_grpc
import det.core
import det.experimental.client  # the SDK, with det._proto.api_pb2(_grpc)
import det.launch.torch_distributed
import det.pytorch
from det.pytorch import deterministic

assert sys.prefix != sys.base_prefix, "not running in the venv"
site = os.path.realpath(sysconfig.get_paths()["platlib"])
for module in (det, det.core, det.pytorch, det._proto.worker_pb2, deterministic,
               det.experimental.client):
    path = os.path.realpath(module.__file__)
    assert path.startswith(site + os.sep), f"{module.__name__} comes from {path}, not {site}"
    print(f"{module.__name__}: {path}")
assert deterministic._load_native() is not None, "det/pytorch/_fixed_point.so does not load"
for marker in ("det/py.typed", "det/pytorch/py.typed"):
    assert os.path.isfile(os.path.join(site, marker)), f"no {marker} (PEP 561)"
dist = importlib.metadata.distribution("det")
print(f"det {dist.version}, requires {dist.requires}")
assert {"grpcio>=1.51", "protobuf>=3.20"} <= set(dist.requires), dist.requires
assert det.get_cluster_info() is None
PY

out=$tmp/train.out
"$venv/bin/python" -I train.py >"$out" 2>&1 || { cat "$out"; fail "train.py failed"; }
cat "$out"
summary=$(tail -1 "$out")
"$python" - "$summary" "$venv" <<'PY' || fail "train.py's result is not what local mode gives"
import json, os, sys
result, venv = json.loads(sys.argv[1]), os.path.realpath(sys.argv[2])
assert result["cluster_info"] is False, result
assert result["world_size"] == 1, result
for name in ("det", "det.pytorch"):
    assert os.path.realpath(result[name]).startswith(venv + os.sep), (name, result[name])
PY
grep -q "det (off-cluster, not reported): training metrics at batch 12: " "$out" ||
  fail "no training report at batch 12"
grep -q "det (off-cluster, not reported): validation metrics at batch 6: .*validation_loss" \
  "$out" || fail "no validation report at batch 6"
grep -q "det (off-cluster, not reported): validation metrics at batch 12: .*validation_loss" \
  "$out" || fail "no validation report at batch 12"
ckpts=("$TMPDIR"/det-checkpoints/*/metadata.json)
((${#ckpts[@]} == 2)) || fail "expected 2 checkpoints in $TMPDIR/det-checkpoints, got ${#ckpts[@]}"

# PEP 561: a user's type checker (Debian's mypy) finds det's hints in the venv through the
# py.typed markers (torch itself is not followed: slow, and not what is tested here).
cat >user_typed.py <<'PY'
import det
from det.pytorch.sampler import ElasticSampler
cluster: int = det.get_cluster_info()
sampler: int = ElasticSampler
PY
printf '[mypy]\n[mypy-torch.*]\nfollow_imports = skip\n' >mypy.ini
/usr/bin/python3 -c 'import mypy' 2>/dev/null || fail "no mypy: Debian's python3-mypy (deploy/setup.sh)"
typed=$(/usr/bin/python3 -m mypy --config-file mypy.ini --cache-dir "$tmp/mypy" \
          --python-executable "$venv/bin/python" user_typed.py 2>&1 || true)
echo "$typed"
grep -q 'user_typed.py:3: error: Incompatible types in assignment (expression has type "Optional\[ClusterInfo\]"' \
  <<<"$typed" || fail "mypy does not see det's types in the venv"
grep -q 'user_typed.py:4: error: Incompatible types in assignment (expression has type "Type\[ElasticSampler\]"' \
  <<<"$typed" || fail "mypy does not see det.pytorch's types in the venv"
[[ $(grep -c "error:" <<<"$typed") == 2 ]] || fail "mypy: other errors than the two expected"

"$venv/bin/python" -m pip uninstall -y det || fail "pip uninstall failed"
site=$("$venv/bin/python" -I -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
left=$(find "$site" -path "$site/det*" -print)
[[ -z $left ]] || fail "pip uninstall left files behind: $left"
echo "PASS"
