#!/usr/bin/env bash
# Installs every system package det needs to build, test and run. Idempotent and quiet:
# prints only on failure. Safe to run again; does nothing when all packages are present.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++ zlib1g-dev python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libibverbs1 libhiredis0.14
  libcli11-dev libcpp-httplib-dev nlohmann-json3-dev libsodium-dev libssl-dev
  dataset-fashion-mnist
  chromium  # headless browser for the web page's test (tests/integration/web_ui_test)
  openssl  # makes a test certificate for the master's HTTPS test
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -q && \
       DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
         "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "deploy/setup.sh: installing ${missing[*]} failed (output above)" >&2
  exit 1
fi
