#!/usr/bin/env bash
# Runs the Python test file $1 (relative to the runfiles root) with $DET_TEST_PYTHON (pass it
# with --test_env=DET_TEST_PYTHON=/path/python3), by default Debian's interpreter,
# which has torch, and the `det` package (common/worker/python) on PYTHONPATH; the other
# arguments go to the test. common/worker/python/pytest_main.py runs it under pytest, one
# JUnit case per test in $XML_OUTPUT_FILE.
set -euo pipefail
root="${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:?}"
cd "$root"
export PYTHONPATH="$root/common/worker/python"
export PYTHONDONTWRITEBYTECODE=1
test_file="$1"
shift
exec "${DET_TEST_PYTHON:-/usr/bin/python3}" common/worker/python/pytest_main.py "$test_file" "$@"
