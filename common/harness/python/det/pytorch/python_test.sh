#!/usr/bin/env bash
# Runs the Python test file $1 (relative to the runfiles root) with Debian's interpreter,
# which has torch, and the `det` package (common/harness/python) on PYTHONPATH; the other
# arguments go to the test.
set -euo pipefail
root="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:?}"
cd "$root"
export PYTHONPATH="$root/common/harness/python"
export PYTHONDONTWRITEBYTECODE=1
test_file="$1"
shift
exec /usr/bin/python3 "$test_file" "$@"
