#!/usr/bin/env bash
# Makes the carry folder of det's GPU check (tests/gpu/README.md), on the build machine:
#
#   tests/gpu/bundle.sh [CARRY]      (default: .det-local/gpu-bundle in the checkout, which
#                                     git ignores through /.det-local/)
#
# CARRY/bundle.tar.gz holds, patched (patchelf) to run from $DEST (/tmp/det-gpu, fixed: the
# loader path is absolute), with every non-CUDA shared library they need (Debian 12's loader
# and glibc included, so that they run on any newer x86-64 Linux):
#   det/deploy/bin/            det, det-master, det-agent, det-fashion-mnist
#   det/deploy/python/         the `det` Python package (//deploy:python)
#   det/common/worker/...      collective_test_worker, elastic_order_tool (test helpers)
#   tests/                     the GPU test binaries (bazel query 'attr(tags, gpu, tests(//...))')
#   py/                        the Python package's tests (common/worker/python/tests,
#                              det/pytorch/*_test.py and their helpers)
#   examples/, cfg/            both PyTorch examples and their configs
#   gpu/, bench/               this folder's scripts (run.sh, the GPU bench) and torchrun's wrapper
#   lib/                       the libraries; cuda/ is filled on the device (run.sh)
# CARRY/data/ holds Fashion-MNIST (the gzipped IDX files, 30 MB, not compressible), CARRY/run.sh
# a copy of run.sh. The NVIDIA driver, cuBLAS and NCCL stay on the device (run.sh finds them).
#
# Builds the targets it takes first (bazel build, nothing to do after `bazel build //...`);
# SKIP_BUILD=1 takes bazel-bin as it is. Needs patchelf (Debian: apt-get install patchelf).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
CARRY=${1:-${CARRY:-$ROOT/.det-local/gpu-bundle}}
DEST=/tmp/det-gpu          # must match run.sh
SRC=$ROOT/bazel-bin
STAGE=$(mktemp -d /tmp/det-gpu-stage.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
LIMIT_MB=${LIMIT_MB:-64}

for tool in patchelf strip readelf ldd tar; do
  command -v $tool >/dev/null || { echo "bundle.sh: $tool is missing (Debian: apt-get install -y ${tool/ldd/libc-bin})" >&2; exit 2; }
done

GPU_TESTS=(//agent/gpu:nvml_gpu_test //common/worker/cpp/nn:model_test
           //common/worker/cpp/collective:nccl_collective_gpu_test //tests/integration:gpu_test)
HELPERS=(//common/worker/cpp/collective:collective_test_worker
         //common/worker/python/det/pytorch:elastic_order_tool)
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  echo "== bazel build"
  bazel build //deploy:bin //deploy:python "${GPU_TESTS[@]}" "${HELPERS[@]}"
fi
# The GPU tests of the tree now: warn when the list above falls behind.
if [[ ${SKIP_QUERY:-0} != 1 ]]; then
  now=$(bazel query 'attr(tags, gpu, tests(//...))' 2>/dev/null | sort)
  want=$(printf '%s\n' "${GPU_TESTS[@]}" | sort)
  [[ -z $now || $now == "$want" ]] || { echo "bundle.sh: the gpu-tagged tests are now:"; echo "$now"; echo "(update GPU_TESTS)"; exit 2; }
fi

label_path() { local l=${1#//}; echo "$SRC/${l/://}"; }

B=$STAGE/b
mkdir -p "$B"/{lib,cuda,tests,cfg,examples,gpu,bench,py/pytorch,py/tests} "$B"/det/deploy/bin \
         "$B"/det/common/worker/cpp/collective "$B"/det/common/worker/python/det/pytorch
ORIGS=()
for n in det det-master det-agent det-fashion-mnist; do
  cp "$SRC/deploy/bin/$n" "$B/det/deploy/bin/"; ORIGS+=("$SRC/deploy/bin/$n")
done
cp "$(label_path //common/worker/cpp/collective:collective_test_worker)" "$B/det/common/worker/cpp/collective/"
cp "$(label_path //common/worker/python/det/pytorch:elastic_order_tool)" "$B/det/common/worker/python/det/pytorch/"
ORIGS+=("$(label_path //common/worker/cpp/collective:collective_test_worker)"
        "$(label_path //common/worker/python/det/pytorch:elastic_order_tool)")
for t in "${GPU_TESTS[@]}"; do cp "$(label_path "$t")" "$B/tests/"; ORIGS+=("$(label_path "$t")"); done
cp -rL "$SRC/deploy/python" "$B/det/deploy/python"
find "$B/det/deploy/python" -name __pycache__ -prune -exec rm -rf {} +
chmod -R u+w "$B"
EXES=("$B"/det/deploy/bin/* "$B"/det/common/worker/cpp/collective/collective_test_worker
      "$B"/det/common/worker/python/det/pytorch/elastic_order_tool "$B"/tests/*)

echo "== libraries"
# Left to the device: the driver's libraries and the big CUDA ones (cudart travels).
skip_re='^(libcuda\.so|libnvidia-ml\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|linux-vdso)'
declare -A seen
for exe in "${ORIGS[@]}"; do
  while read -r line; do
    # "name => /path (0x..)" or "/lib64/ld-linux-x86-64.so.2 (0x..)"
    if [[ $line =~ ^([^[:space:]]+)\ =\>\ ([^[:space:]]+)\ \( ]]; then
      name=${BASH_REMATCH[1]}; path=${BASH_REMATCH[2]}
    elif [[ $line =~ ^(/[^[:space:]]+)\ \( ]]; then
      path=${BASH_REMATCH[1]}; name=$(basename "$path")
    else
      [[ $line == *"not found"* ]] && { echo "bundle.sh: MISSING in $exe: $line" >&2; exit 1; }
      continue
    fi
    [[ $name =~ $skip_re ]] && continue
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    cp -L "$path" "$B/lib/$name"
  done < <(ldd "$exe")
done
# glibc pieces a dlopen'ed driver library may still ask for (stubs since 2.34).
for n in libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1; do
  [[ -e $B/lib/$n ]] || cp -L /lib/x86_64-linux-gnu/$n "$B/lib/$n"
done
chmod -R u+w "$B"

echo "== patchelf (interpreter and RPATH: $DEST/lib:$DEST/cuda)"
RPATH=$DEST/lib:$DEST/cuda
glibc_re='^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1)$'
for f in "$B"/lib/*; do
  n=$(basename "$f")
  [[ $n =~ $glibc_re ]] && continue
  strip --strip-debug "$f" 2>/dev/null || true
  patchelf --force-rpath --set-rpath "$RPATH" "$f"
done
for f in "${EXES[@]}"; do
  strip --strip-debug "$f"
  patchelf --set-interpreter "$DEST/lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$RPATH" "$f"
  # Loaded first, so that CUDA libraries (RUNPATH $ORIGIN) reuse these instead of the device's.
  for n in libpthread.so.0 libdl.so.2 librt.so.1; do
    readelf -d "$f" | grep -q "Shared library: \[$n\]" || patchelf --add-needed $n "$f"
  done
done
# The Python package's native library is loaded by the device's Python: stripped, not patched.
find "$B/det/deploy/python" -name '*.so' -exec strip --strip-debug {} \;

echo "== Python tests, examples, scripts"
PYSRC=common/worker/python
cp $PYSRC/tests/*.py "$B/py/tests/"
cp $PYSRC/det/pytorch/*_test.py $PYSRC/det/pytorch/ddp_test_worker.py "$B/py/pytorch/"
mkdir -p "$B/examples/fashion_mnist_cnn" "$B/examples/torch_ddp"
cp $PYSRC/examples/fashion_mnist_cnn/*.py "$B/examples/fashion_mnist_cnn/"
cp $PYSRC/examples/torch_ddp/train.py "$B/examples/torch_ddp/"
cp configs/examples/torch-fashion-mnist.yaml configs/examples/torch-ddp.yaml "$B/cfg/"
cp "$HERE"/*.sh "$HERE"/*.py "$HERE"/README.md "$B/gpu/" 2>/dev/null || true
cp tests/bench/torch_run.py "$B/bench/"
( cd "$ROOT" && echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) from $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo '+changes')" ) >"$B/BUILD_INFO"
find "$B" -name __pycache__ -prune -exec rm -rf {} +

du -sh "$B" | sed 's/^/unpacked: /'
mkdir -p "$CARRY"
rm -rf "$CARRY"/bundle.tar.gz "$CARRY"/run.sh "$CARRY"/data.tmp
tar czf "$CARRY"/bundle.tar.gz --owner=0 --group=0 -C "$B" .
cp "$HERE/run.sh" "$CARRY/run.sh"
# Fashion-MNIST, whole (the C++ example, gpu_test and both PyTorch examples read it).
FM=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
mkdir -p "$CARRY/data"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [[ -e $FM/$f ]] || { echo "bundle.sh: $FM/$f is missing (Debian: dataset-fashion-mnist)" >&2; exit 1; }
  cmp -s "$FM/$f" "$CARRY/data/$f" || cp "$FM/$f" "$CARRY/data/$f"
done
size_kb=$(du -sk "$CARRY" | cut -f1)
ls -la "$CARRY" "$CARRY/data"
echo "carry folder: $CARRY, $((size_kb / 1024)) MiB (limit ${LIMIT_MB} MiB)"
if (( size_kb > LIMIT_MB * 1024 )); then echo "bundle.sh: $CARRY is over ${LIMIT_MB} MiB" >&2; exit 1; fi
echo "on the device: bash tests/gpu/run.sh   (carry: ${CARRY#$ROOT/})"
