#!/usr/bin/env bash
# Installs what det needs, builds everything and runs every test. Ends with the line
#   tests: N passed, N failed, N skipped
# counted from the individual test cases (gtest results), not from Bazel targets. A target
# whose cases were all skipped (GPU tests on a machine without a GPU) counts as skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

./deploy/setup.sh || { echo "tests: 0 passed, 1 failed, 0 skipped"; exit 1; }

echo "== building"
if ! bazel build //... ; then
  echo "build failed"
  echo "tests: 0 passed, 1 failed, 0 skipped"
  exit 1
fi

summary=$(mktemp)
extra=$(mktemp)
trap 'rm -f "$summary" "$extra"' EXIT

# The build must not depend on the caller's shell: the same build from the README's PATH
# and from an unrelated one runs nothing (tests/build/cache_check.sh; one case each).
echo "== build cache across shells"
tests/build/cache_check.sh //... | tee "$extra"

# GCC ignores ABSL_GUARDED_BY and friends; Clang's analysis checks them (one case).
echo "== thread safety (clang -Wthread-safety)"
tests/build/thread_safety.sh | tee -a "$extra"

echo "== testing"
bazel test //... --test_output=errors "$@" 2>&1 | tee "$summary"
bazel_rc=${PIPESTATUS[0]}

# Count test cases: for every target in Bazel's summary, the cases in its JUnit XML (every
# shard's and every run's); a target that did not build or run, left no results or was
# FLAKY counts as at least one failure.
python3 - "$bazel_rc" "$summary" "$extra" "$started" "$@" <<'PY'
import os, re, sys
import xml.etree.ElementTree as ET

import time
bazel_rc, summary, extra, started = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
# --runs_per_test of this invocation (passed through "$@"), for the layout of its results.
runs = 1
test_args = sys.argv[5:]
for i, a in enumerate(test_args):
    value = a.split("=", 1)[1] if a.startswith("--runs_per_test=") else (
        test_args[i + 1] if a == "--runs_per_test" and i + 1 < len(test_args) else "")
    if value.isdigit():
        runs = int(value)
passed = failed = skipped = 0
# Cases run by this script itself (tests/build/cache_check.sh, thread_safety.sh): "PASS name" /
# "FAIL name: ...".
for line in open(extra, errors="replace"):
    if line.startswith("PASS "):
        passed += 1
    elif line.startswith("FAIL "):
        failed += 1
line_re = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|FLAKY|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|REMOTE FAILURE)\b")
seen = set()
for line in open(summary, errors="replace"):
    m = line_re.match(line)
    if not m or m.group(1) in seen:
        continue
    target, status = m.groups()
    seen.add(target)
    pkg, name = target[2:].split(":")
    # One test.xml per run: the target's own, or one per shard and per run of a sharded or
    # repeated target (shard_1_of_4/test.xml, run_2_of_20/test.xml, ...). Earlier
    # invocations leave other layouts behind (run_N_of_20 of an earlier --runs_per_test=20,
    # newer than a cached result's own test.xml): only this invocation's layout counts,
    # from its --runs_per_test and whether the target is sharded.
    base = os.path.join("bazel-testlogs", pkg, name)
    found = []  # (mtime, shard total or None, run total or None, path)
    for root, dirs, files in os.walk(base):
        dirs.sort()
        if "test.xml" in files:
            rel = os.path.relpath(root, base)  # ".", "shard_2_of_4", "shard_2_of_4_run_1_of_3", ...
            shard = re.search(r"shard_\d+_of_(\d+)", rel)
            run = re.search(r"run_\d+_of_(\d+)", rel)
            path = os.path.join(root, "test.xml")
            found.append((os.path.getmtime(path), shard and int(shard.group(1)),
                          run and int(run.group(1)), path))
    found = [f for f in found if f[2] == (runs if runs > 1 else None)]
    sharded = [f for f in found if f[1] is not None]
    if sharded:
        total = max(sharded)[1]  # the newest shard count (a changed shard_count leaves old ones)
        found = [f for f in sharded if f[1] == total]
    xmls = [f[3] for f in found]
    cases_passed = cases_failed = cases_skipped = 0
    if status in ("PASSED", "FAILED", "FLAKY"):
        for xml in xmls:
            try:
                for case in ET.parse(xml).getroot().iter("testcase"):
                    if case.find("failure") is not None or case.find("error") is not None:
                        cases_failed += 1
                    elif (case.get("result", "completed") == "skipped"
                          or case.find("skipped") is not None):
                        cases_skipped += 1
                    else:
                        cases_passed += 1
            except (OSError, ET.ParseError):
                pass
    if status == "PASSED" and cases_passed + cases_failed + cases_skipped == 0:
        cases_passed = 1  # a test without JUnit cases (a shell test) that passed
    # FLAKY (failed, then passed on a retry) is a failure: a test that fails 1 time in 6 is
    # a failing test.
    if status != "PASSED" and cases_failed == 0:
        cases_failed = 1
    if status != "PASSED":
        print(f"{target}: {status}")
    passed += cases_passed
    failed += cases_failed
    skipped += cases_skipped
if bazel_rc != 0 and failed == 0:
    failed = 1  # Bazel failed in a way no test reported.
    print(f"bazel test exited with {bazel_rc}")
wall = int(time.time()) - started
print(f"wall time: {wall // 60} min {wall % 60:02d} s (setup, build and tests)")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(0 if failed == 0 else 1)
PY
