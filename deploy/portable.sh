#!/usr/bin/env bash
# Builds det's portable release, offline:
#
#   deploy/portable.sh [OUT_DIR]     (default: dist/ in the checkout)
#
# writes OUT_DIR/det-VERSION-linux-x86_64.tar.gz (VERSION: what `det-master --version`
# prints) and lists it. The same file as `bazel build //deploy/portable:tarball`
# (bazel-bin/deploy/portable/tarball/). Run deploy/setup.sh first on a fresh machine.
# What the tarball holds and how to install it: docs/install.md.
set -euo pipefail
cd "$(dirname "$0")/.."

out_dir=${1:-dist}
mkdir -p "$out_dir"
bazel build //deploy/portable:tarball
for f in bazel-bin/deploy/portable/tarball/det-*-linux-x86_64.tar.gz; do
  install -m 0644 "$f" "$out_dir/"
  ls -l "$out_dir/$(basename "$f")"
done
