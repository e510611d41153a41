#!/usr/bin/env bash
# portable_test: det's portable release (//deploy/portable:tarball) installs and runs in an
# empty root: a directory holding only the tarball, a static busybox (/bin), the device
# nodes null, zero, random and urandom, an empty /proc and /tmp, and Fashion-MNIST (data,
# bound read-only at /data). No /lib, /lib64 or /usr: nothing of the build machine's
# libraries is there to find. Entered with chroot in new mount, PID and network namespaces
# (loopback only), it runs tests/packaging/portable_in_root.sh under busybox sh, which
# installs the release into a moved prefix and /opt/det, starts the installed det-master
# and det-agent, and trains the C++ example for 100 batches to COMPLETED with the installed
# det (the checks: that script's header). Then, where the build machine has CUDA 13
# (/usr/local/cuda/lib64, or CUDA_LIB_DIR), a second such root with those libraries bound
# read-only at /cuda: with DET_CUDA_LIB_DIR=/cuda in PREFIX/etc/cuda.env, the example's
# launcher takes them and each loads from /cuda next to the release's glibc.
#
#   portable_test.sh TARBALL_DIR EXPERIMENT_YAML IN_ROOT_SCRIPT
#
# TARBALL_DIR holds the one det-VERSION-linux-x86_64.tar.gz. Needs root (chroot, mount,
# namespaces): skipped, with the reason, otherwise (tag requires-root). Everything it
# makes goes away with the namespaces and the test's temporary directory.
set -euo pipefail

skip() {
  echo "SKIPPED: $1"
  if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
    cat >"$XML_OUTPUT_FILE" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" failures="0" skipped="1">
  <testsuite name="portable_test" tests="1" failures="0" skipped="1">
    <testcase name="install_and_train_in_empty_root" classname="packaging"><skipped message="$1"/></testcase>
  </testsuite>
</testsuites>
EOF
  fi
  exit 0
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

BUSYBOX=${BUSYBOX:-/bin/busybox}
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
CUDA=${CUDA_LIB_DIR:-/usr/local/cuda/lib64}

# Inside the new namespaces: bind the data and the log directory, then enter the root.
if [[ "${1:-}" == --enter ]]; then
  root=$2 logs=$3
  mount --bind "$DATA" "$root/data"
  mount -o remount,bind,ro "$root/data"
  mount --bind "$logs" "$root/logs"
  exec chroot "$root" /bin/busybox sh /portable_in_root.sh "/$(basename "$4")" /experiment.yaml
fi

# The second root: the same, with the build machine's CUDA libraries bound at /cuda.
if [[ "${1:-}" == --enter-cuda ]]; then
  root=$2
  mount --bind "$CUDA" "$root/cuda"
  mount -o remount,bind,ro "$root/cuda"
  exec chroot "$root" /bin/busybox sh -euc '
    /bin/busybox --install -s /bin
    mount -t proc proc /proc
    cd /tmp && tar -xzf /det-*-linux-x86_64.tar.gz && ./det-*-linux-x86_64/install.sh >/dev/null
    echo "DET_CUDA_LIB_DIR=/cuda" >>/opt/det/etc/cuda.env
    out=$(/opt/det/bin/det-fashion-mnist --cuda-libs) || { echo "$out"; exit 1; }
    echo "$out" | head -n 1
    for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
      echo "$out" | grep -q "$lib => /cuda/$lib " || { echo "$out"; echo "FAIL: $lib not from /cuda"; exit 1; }
    done
    echo "$out" | grep -q "libc.so.6 => /opt/det/[^ ]*lib/libc.so.6 " ||
      { echo "$out"; echo "FAIL: libc.so.6 not from /opt/det/lib"; exit 1; }
    ! echo "$out" | grep -q "not found" || { echo "$out"; echo "FAIL: a library is not found"; exit 1; }
    echo "the host CUDA libraries (DET_CUDA_LIB_DIR=/cuda from /opt/det/etc/cuda.env) load with the release'"'"'s glibc"
  '
fi

(($# == 3)) || fail "usage: portable_test.sh TARBALL_DIR EXPERIMENT_YAML IN_ROOT_SCRIPT"
tarball_dir=$1 experiment=$2 in_root=$3
[[ $(id -u) == 0 ]] || skip "not root: chroot and namespaces need root; CI runs as root"
for tool in unshare chroot mount mknod; do
  command -v "$tool" >/dev/null || fail "$tool is missing"
done
[[ -x $BUSYBOX ]] || fail "$BUSYBOX is missing (busybox-static; deploy/setup.sh)"
# A static busybox: no ELF interpreter, so it needs no library of this machine.
if LC_ALL=C readelf -lW "$BUSYBOX" | grep -q INTERP; then
  fail "$BUSYBOX is dynamically linked (install busybox-static, not busybox)"
fi
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [[ -e $DATA/$f ]] || fail "$DATA/$f is missing (dataset-fashion-mnist; deploy/setup.sh)"
done
tarballs=("$tarball_dir"/det-*-linux-x86_64.tar.gz)
((${#tarballs[@]} == 1)) && [[ -f ${tarballs[0]} ]] ||
  fail "expected one det-*-linux-x86_64.tar.gz in $tarball_dir, found: ${tarballs[*]}"
tarball=${tarballs[0]}

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/det-portable-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
logs=${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp/logs}
mkdir -p "$logs"
echo "logs: $logs"

root=$tmp/root
mkdir -p "$root"/{bin,dev,proc,data,logs}
mkdir -m 1777 "$root/tmp"
cp "$BUSYBOX" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
mknod -m 0666 "$root/dev/null" c 1 3
mknod -m 0666 "$root/dev/zero" c 1 5
mknod -m 0666 "$root/dev/random" c 1 8
mknod -m 0666 "$root/dev/urandom" c 1 9
cp "$tarball" "$root/"
cp "$in_root" "$root/portable_in_root.sh"
cp "$experiment" "$root/experiment.yaml"
echo "== empty root: $(cd "$root" && find . -mindepth 1 -maxdepth 1 | sort | tr '\n' ' ')"
echo "   tarball: $(basename "$tarball"), $(du -k "$tarball" | cut -f1) KiB"

rc=0
unshare --mount --pid --net --fork --propagation private -- \
  bash "$0" --enter "$root" "$logs" "$tarball" || rc=$?
((rc == 0)) || fail "exit code $rc; see the output above and the logs in $logs"

# The host's CUDA libraries (CUDA 13 in /usr/local/cuda on the build machines; not needed
# to pass): a fresh root with only the tarball, busybox and them.
if [[ -e $CUDA/libcudart.so.13 ]]; then
  echo "== a second root with $CUDA bound at /cuda"
  croot=$tmp/cuda-root
  mkdir -p "$croot"/{bin,dev,proc,cuda}
  mkdir -m 1777 "$croot/tmp"
  cp "$BUSYBOX" "$croot/bin/busybox"
  ln -s busybox "$croot/bin/sh"
  mknod -m 0666 "$croot/dev/null" c 1 3
  cp "$tarball" "$croot/"
  unshare --mount --pid --net --fork --propagation private -- bash "$0" --enter-cuda "$croot" ||
    fail "the host's CUDA libraries do not load (output above)"
else
  echo "== no $CUDA/libcudart.so.13: the host-CUDA case is not run"
fi
echo "PASSED"
