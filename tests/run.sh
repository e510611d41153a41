#!/usr/bin/env bash
# Installs what det needs, builds everything and runs every test. Ends with the line
#   tests: N passed, N failed
# counted from the individual test cases (gtest results), not from Bazel targets.
set -uo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh || { echo "tests: 0 passed, 1 failed"; exit 1; }

echo "== building"
if ! bazel build //... ; then
  echo "build failed"
  echo "tests: 0 passed, 1 failed"
  exit 1
fi

echo "== testing"
bazel test //... --test_output=errors "$@"
bazel_rc=$?

# Count test cases from each target's JUnit XML; a target that produced none counts as
# one failure (it crashed or timed out before writing results).
python3 - "$bazel_rc" <<'PY'
import glob, os, sys
import xml.etree.ElementTree as ET

bazel_rc = int(sys.argv[1])
passed = failed = 0
targets = 0
for status in glob.glob("bazel-testlogs/**/test.log", recursive=True):
    targets += 1
    xml = os.path.join(os.path.dirname(status), "test.xml")
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        failed += 1
        print(f"no results: {os.path.dirname(status)}")
        continue
    cases = root.iter("testcase")
    n = 0
    for case in cases:
        n += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("status", "run") == "run" and case.get("result", "completed") != "skipped":
            passed += 1
    if n == 0:
        # A test without gtest cases: judge by the target's own outcome.
        if root.find(".//failure") is not None or root.find(".//error") is not None:
            failed += 1
        else:
            passed += 1
if bazel_rc != 0 and failed == 0:
    failed = 1  # Bazel failed in a way no test reported (e.g. a build error).
print(f"tests: {passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
PY
