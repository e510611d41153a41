#!/usr/bin/env bash
# Type-checks the `det` package, det.pytorch included, as the wheel ships it (the generated
# stubs beside the sources) with Debian's mypy (python3-mypy) and pyproject.toml's
# [tool.mypy]: `bazel test //common/worker/python:mypy_test` (part of `bazel test //...`).
# Prints mypy's report; fails on any error.
set -euo pipefail
cd "${TEST_SRCDIR:?run me with bazel test}/${TEST_WORKSPACE:?}/common/worker/python"
exec /usr/bin/python3 -m mypy --config-file pyproject.toml --cache-dir "${TEST_TMPDIR:?}/mypy" \
  -p det
