#!/usr/bin/env bash
# package_test: the Debian packages det-master, det-agent and det-cli install with dpkg -i,
# the installed daemons run a short trial of the Fashion-MNIST example to COMPLETED through
# the installed CLI, removal keeps /var/lib/det and purging deletes it.
# (tests/packaging/install_and_run.sh does and checks all of that.)
#
#   package_test.sh DET_MASTER_DEB DET_AGENT_DEB DET_CLI_DEB EXPERIMENT_YAML INSTALL_AND_RUN
#
# Needs root (dpkg -i): skipped, with the reason, otherwise. Where it can, it installs into
# a throwaway root: an overlay of / whose writes go to a tmpfs, mounted in a private mount
# namespace and entered with chroot. Nothing then reaches the machine, and all of it goes
# away with the namespace, also when the test fails or is killed. Where overlayfs cannot be
# mounted, it installs on the machine itself (CI's machines are throwaway) and purges the
# packages at the end, also after a failure; the system user `det` stays there.
set -euo pipefail

# skip REASON: reports the test as skipped (JUnit <skipped/>, which tests/run.sh counts).
skip() {
  echo "SKIPPED: $1"
  if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
    cat >"$XML_OUTPUT_FILE" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" failures="0" skipped="1">
  <testsuite name="package_test" tests="1" failures="0" skipped="1">
    <testcase name="install_run_remove_purge" classname="packaging"><skipped message="$1"/></testcase>
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

# The throwaway root: runs inside `unshare --mount`. Exit code 77: overlayfs cannot be
# mounted here (the caller installs on the machine instead).
if [[ "${1:-}" == --throwaway-root ]]; then
  shift
  tmp=$1 logs=$2
  shift 2
  root=$tmp/root upper=$tmp/upper
  mkdir -p "$root" "$upper"
  mount -t tmpfs -o size=4g,mode=0755 det-package-test "$upper" || exit 77
  mkdir "$upper/data" "$upper/work"
  mount -t overlay overlay -o "lowerdir=/,upperdir=$upper/data,workdir=$upper/work" "$root" ||
    exit 77
  for fs in proc sys dev; do
    mount --rbind "/$fs" "$root/$fs"
    mount --make-rslave "$root/$fs"
  done
  # The test's files, and its log directory (bound, so that the logs outlive the root).
  w=/tmp/det-package-test
  rm -rf "${root:?}$w"
  mkdir -p "$root$w/in" "$root$w/logs"
  mount --bind "$logs" "$root$w/logs"
  for f in "$@"; do cp "$f" "$root$w/in/"; done
  in=()
  for f in "$@"; do in+=("$w/in/$(basename "$f")"); done
  echo "== installing into a throwaway root (overlay of / in a private mount namespace)"
  exec chroot "$root" /bin/bash "$w/in/install_and_run.sh" "$w" "$w/logs" "${in[@]:0:4}"
fi

(($# == 5)) || fail "usage: package_test.sh MASTER_DEB AGENT_DEB CLI_DEB EXPERIMENT_YAML INSTALL_AND_RUN"
[[ $(id -u) == 0 ]] || skip "not root: installing Debian packages (dpkg -i) needs root; CI runs as root"
for tool in dpkg dpkg-query unshare chroot mount setpriv; do
  command -v "$tool" >/dev/null || fail "$tool is missing"
done
args=()
for f in "$@"; do
  [[ -f "$f" ]] || fail "$f is missing"
  args+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/det-package-test.XXXXXX")
logs=${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp/logs}
mkdir -p "$logs"
trap 'rm -rf "$tmp"' EXIT
echo "logs: $logs"

rc=0
unshare --mount --propagation private -- bash "$0" --throwaway-root "$tmp" "$logs" "${args[@]}" ||
  rc=$?
if ((rc == 77)); then
  echo "== overlayfs cannot be mounted here: installing on this machine (purged at the end)"
  # Under /tmp: the daemons run as user det and must reach their configs there.
  work=$(mktemp -d /tmp/det-package-test.XXXXXX)
  trap 'rm -rf "$tmp" "$work"' EXIT
  rc=0
  bash "${args[4]}" "$work" "$logs" "${args[@]:0:4}" || rc=$?
fi
((rc == 0)) || fail "see the output above and the logs in $logs"
echo "PASSED"
