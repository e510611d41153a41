#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety) over every translation unit that can see
# an ABSL_GUARDED_BY / ABSL_LOCKS_EXCLUDED / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation: the
# annotated headers' own .cc files and every other non-test .cc that includes one, directly
# or through other headers (tests
# are left out for time: they hold no annotated state of their own). GCC, which builds det,
# ignores the annotations; this check makes them mean something.
#
# It runs Debian's clang in syntax-only mode on the source tree, with the generated headers
# (*.pb.h) of the last `bazel build` (bazel-bin): about 2 s per file, no second build of the
# tree with another toolchain. Run by tests/run.sh after its build; prints one line for the
# suite's count:
#   PASS thread_safety   or   FAIL thread_safety: <count> warnings (listed above)
# Usage: tests/build/thread_safety.sh [-v]   (-v: list the files checked)
set -uo pipefail
cd "$(dirname "$0")/../.."

clang=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z "$clang" ]]; then
  echo "FAIL thread_safety: clang++ not found (deploy/setup.sh installs clang)"
  exit 1
fi
if [[ ! -d bazel-bin/proto ]]; then
  echo "FAIL thread_safety: bazel-bin/proto is missing: run \`bazel build //...\` first"
  exit 1
fi

roots=(master agent common cli)
mapfile -t annotated < <(grep -rlE 'ABSL_(GUARDED_BY|PT_GUARDED_BY|LOCKS_EXCLUDED|EXCLUSIVE_LOCKS_REQUIRED|SHARED_LOCKS_REQUIRED)' \
  --include='*.h' "${roots[@]}" | grep -v '^common/third_party/' | sort)
# Headers that see an annotation through another header count too (a .cc that includes
# agent.h sees the annotated members of the types agent.h includes): close the set over
# includes before picking the .cc files.
seeing=("${annotated[@]}")
frontier=("${annotated[@]}")
while (( ${#frontier[@]} > 0 )); do
  patterns=()
  for header in "${frontier[@]}"; do patterns+=(-e "#include \"$header\""); done
  mapfile -t next < <(grep -rlF "${patterns[@]}" --include='*.h' "${roots[@]}" \
    | grep -v '^common/third_party/' | sort -u | comm -23 - <(printf '%s\n' "${seeing[@]}" | sort -u))
  seeing+=("${next[@]}")
  frontier=("${next[@]}")
done
files=()
patterns=()
for header in "${seeing[@]}"; do
  files+=("${header%.h}.cc")
  patterns+=(-e "#include \"$header\"")
done
while IFS= read -r f; do files+=("$f"); done < <(
  grep -rlF "${patterns[@]}" --include='*.cc' "${roots[@]}" | grep -v '_test\.cc$')
mapfile -t files < <(printf '%s\n' "${files[@]}" | sort -u | while read -r f; do
  [[ -f "$f" ]] && echo "$f"; done)
[[ "${1:-}" == "-v" ]] && printf 'checking %s\n' "${files[@]}"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The defines are those //common/third_party gives every user of spdlog and cpp-httplib.
printf '%s\0' "${files[@]}" | xargs -0 -P "$(nproc)" -n 1 \
  "$clang" -std=c++17 -fsyntax-only -Wthread-safety -Wthread-safety-beta -Wno-unknown-warning-option \
  -I. -Ibazel-bin -I/usr/local/cuda/include \
  -DSPDLOG_COMPILED_LIB -DSPDLOG_SHARED_LIB \
  -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT >"$log" 2>&1
rc=$?
cat "$log"
warnings=$(grep -c 'warning: .*\[-Wthread-safety' "$log")
errors=$(grep -c ' error: ' "$log")
echo "thread safety: ${#files[@]} files of ${#annotated[@]} annotated headers, $warnings warnings, $errors errors"
if (( errors > 0 || rc != 0 )); then
  echo "FAIL thread_safety: clang could not compile $errors place(s) (listed above)"
  exit 1
fi
if (( warnings > 0 )); then
  echo "FAIL thread_safety: $warnings warnings (listed above)"
  exit 1
fi
echo "PASS thread_safety"
