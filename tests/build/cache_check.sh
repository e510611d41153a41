#!/usr/bin/env bash
# Checks that a build does not depend on the caller's shell (.bazelrc's
# --incompatible_strict_action_env): after `bazel build TARGETS`, the same build from a
# shell with the README's PATH, and from one with an unrelated PATH and Python, must run
# no action at all. Run by tests/run.sh after its build; prints one line per case:
#   PASS <case>   or   FAIL <case>: <what ran and why>
# and exits non-zero when a case failed. Usage: tests/build/cache_check.sh [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/../.."
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(//...)

explain=$(mktemp)
log=$(mktemp)
trap 'rm -f "$explain" "$log"' EXIT
status=0

# Bazel's closing line "INFO: N processes: ..." counts the actions it ran: "internal" ones
# are its own bookkeeping (symlink trees, stamps); anything else ran a tool.
ran_tools() {
  local line
  line=$(grep -E "^INFO: [0-9]+ process(es)?:" "$log" | tail -1)
  [ -z "$line" ] && { echo "no process summary in Bazel's output"; return 0; }
  local rest=${line#*: }
  rest=${rest#*: }
  # e.g. "1 internal." or "3 internal, 12 local."
  if echo "$rest" | tr ',' '\n' | grep -vE "^ *[0-9]+ internal\.?$" | grep -qE "[1-9]"; then
    echo "$line"
    return 0
  fi
  return 1
}

check() {  # check NAME PATH_VALUE [extra env...]
  local name=$1 path=$2
  shift 2
  if ! env PATH="$path" "$@" bazel build --explain="$explain" "${targets[@]}" >"$log" 2>&1; then
    echo "FAIL $name: the build failed"
    tail -20 "$log" | sed 's/^/    /'
    status=1
    return
  fi
  local ran
  if ran=$(ran_tools); then
    echo "FAIL $name: the build ran actions again ($ran)"
    grep -E "^Executing action" "$explain" | head -10 | sed 's/^/    /'
    status=1
  else
    echo "PASS $name"
  fi
}

# Settle first: whatever the caller's shell built is the reference.
if ! bazel build "${targets[@]}" >"$log" 2>&1; then
  echo "FAIL build: the reference build failed"
  tail -20 "$log" | sed 's/^/    /'
  exit 1
fi
check readme_path "$PWD/bazel-bin/deploy/bin:$PATH"
check other_path "/opt/nothing/bin:/usr/local/sbin:/usr/sbin:/sbin:$PATH:/tmp" \
  PYTHONPATH=/nonexistent VIRTUAL_ENV=/nonexistent LD_LIBRARY_PATH=/nonexistent
exit $status
