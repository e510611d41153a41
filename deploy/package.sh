#!/usr/bin/env bash
# Builds det and its Debian packages, offline:
#
#   deploy/package.sh [OUT_DIR]     (default: dist/ in the checkout)
#
# writes OUT_DIR/det-master_VERSION_ARCH.deb, det-agent_..., det-cli_... (VERSION: what
# `det-master --version` prints) and lists them. Run deploy/setup.sh first on a fresh
# machine; dpkg-deb and dpkg-shlibdeps (dpkg-dev) must be installed. What each package
# holds: deploy/debian/build_debs.sh; installing them: docs/operations.md.
# (`bazel build //deploy/debian:debs` builds the same packages as bazel-bin/deploy/debian/
# det-{master,agent,cli}.deb, for tests.)
set -euo pipefail
cd "$(dirname "$0")/.."

out_dir=${1:-dist}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

bazel build //deploy:bin //deploy:python
deploy/debian/build_debs.sh bazel-bin/deploy/bin bazel-bin/deploy/python "$out_dir"
version=$(bazel-bin/deploy/bin/det-master --version)
version=${version#det-master }
for p in det-master det-agent det-cli; do
  ls -l "$out_dir/${p}_${version}_$(dpkg --print-architecture).deb"
done
