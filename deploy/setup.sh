#!/usr/bin/env bash
# Installs every system package det needs to build, test and run. Idempotent and quiet:
# prints only on failure. Safe to run again; does nothing when all packages are present.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++ zlib1g-dev python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libsqlite3-dev sqlite3
  postgresql-15 libpq-dev  # the master's PostgreSQL store and its tests (master/store)
  slurm-wlm munge libslurm-dev  # the Slurm resource manager's tests (tests/slurm): slurmctld, slurmd, munged
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libibverbs1 libhiredis0.14
  libcli11-dev libcpp-httplib-dev nlohmann-json3-dev libsodium-dev libssl-dev
  dataset-fashion-mnist
  chromium  # headless browser for the web page's test (tests/integration/web/)
  openssl  # makes a test certificate for the master's HTTPS test
  dpkg-dev  # dpkg-shlibdeps for the Debian packages (deploy/package.sh, //deploy/debian:debs)
  iproute2  # ip netns / veth for the multi-host tests (tests/multihost)
  patchelf  # the GPU check's relocatable bundle (tests/gpu/bundle.sh), the portable release
  busybox-static  # the portable release's install test: the only program in its empty root
  clang-14  # Clang's -Wthread-safety over the annotated code (tests/build/thread_safety.sh)
  # PyTorch workers (the Python package det in common/worker/python): Debian's torch runs
  # under /usr/bin/python3; OpenBLAS makes its CPU math about 10x faster than the
  # reference BLAS.
  python3-torch python3-torchvision python3-grpcio python3-protobuf python3-numpy
  libopenblas0-pthread pybind11-dev
  # det's wheel (//deploy:wheel) into a venv with pip, offline (//tests/packaging:wheel_test:
  # python3-venv brings ensurepip's wheels); its Python tests under pytest, one JUnit case
  # per test; mypy over the package (//common/worker/python:mypy_test) and its users.
  python3-venv python3-pytest python3-mypy
)

# The CUDA toolkit with NCCL is not a Debian package: the build uses the one at
# /usr/local/cuda (nvcc for the example's kernels; CUDA runtime, cuBLAS and NCCL to link).
for f in bin/nvcc include/cuda_runtime.h include/cublas_v2.h include/nccl.h \
         lib64/libcudart.so lib64/libcublas.so lib64/libnccl.so; do
  if [[ ! -e /usr/local/cuda/$f ]]; then
    echo "deploy/setup.sh: /usr/local/cuda/$f is missing; det builds against the CUDA toolkit" \
         "and NCCL in /usr/local/cuda (see docs/building.md)" >&2
    exit 1
  fi
done

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -q && \
       DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
         "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "deploy/setup.sh: installing ${missing[*]} failed (output above)" >&2
  exit 1
fi
