#!/usr/bin/env bash
# Builds the config parser's libFuzzer target with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer) outside Bazel and runs it.
#
#   tests/fuzz/run.sh [SECONDS] [-- LIBFUZZER FLAGS...]
#
# SECONDS (default 60) bounds the run. The seeds in tests/fuzz/corpus are read, never
# written; new inputs go to a working corpus under the build directory
# ($DET_FUZZ_DIR, default /tmp/det-fuzz), kept between runs. A crash, hang (-timeout) or
# leak stops the run with libFuzzer's report and the input saved as crash-*/timeout-*/
# leak-* in the build directory: add it to tests/fuzz/corpus so the regression test
# (//tests/fuzz:config_fuzzer_corpus_test) replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
shift || true
[[ "${1:-}" == "--" ]] && shift

if ! command -v clang++ >/dev/null; then
  echo "tests/fuzz/run.sh: needs clang++ with libFuzzer (apt-get install clang libclang-rt-dev)" >&2
  exit 1
fi
out=${DET_FUZZ_DIR:-/tmp/det-fuzz}
mkdir -p "$out/corpus"

sources=(
  tests/fuzz/config_fuzzer.cc
  common/config/yaml_reader.cc
  common/config/config_merge.cc
  common/config/experiment_config.cc
  master/searcher/sampling.cc
  master/searcher/searcher.cc
)
absl_libs=(statusor status cord str_format_internal strings strings_internal synchronization
           time time_zone int128 throw_delegate raw_logging_internal base spinlock_wait hash
           city low_level_hash raw_hash_set)
binary="$out/config_fuzzer"
if [[ ! -x "$binary" ]] || [[ -n "$(find "${sources[@]}" common/config/*.h master/searcher/*.h \
                                      -newer "$binary" 2>/dev/null)" ]]; then
  echo "building $binary"
  clang++ -std=c++17 -O1 -g -I. \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer \
    "${sources[@]}" -o "$binary" \
    -lyaml-cpp "${absl_libs[@]/#/-labsl_}"
fi

# A smaller quarantine than ASan's 256 MiB and shorter allocation stacks (fewer distinct
# stacks kept) keep the RSS of long runs well under the limit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=64:allocator_release_to_os_interval_ms=1000:malloc_context_size=10}
echo "fuzzing for ${seconds}s (working corpus $out/corpus, seeds tests/fuzz/corpus)"
cd "$out"
exec ./config_fuzzer -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=8192 -print_final_stats=1 "$@" corpus "$OLDPWD/tests/fuzz/corpus"
