#!/usr/bin/env bash
# Builds the Debian packages det-master, det-agent and det-cli from built binaries:
#
#   deploy/debian/build_debs.sh BIN_DIR PYTHON_DIR OUT_DIR
#
# BIN_DIR holds det, det-master, det-agent, det-fashion-mnist (bazel-bin/deploy/bin);
# PYTHON_DIR holds the Python package det (bazel-bin/deploy/python). Writes
# OUT_DIR/det-{master,agent,cli}_VERSION_ARCH.deb. VERSION is what `det-master --version`
# prints (master's kVersion). Needs dpkg-deb and dpkg-shlibdeps (dpkg-dev); no network.
# Used by deploy/package.sh and by the Bazel target //deploy/debian:debs.
#
# What goes where (see docs/operations.md, "Installing from packages"):
#   det-master  /usr/bin/det-master, /lib/systemd/system/det-master.service,
#               /etc/det/master.yaml (conffile; data_dir /var/lib/det/master)
#   det-agent   /usr/bin/det-agent, /usr/bin/det-fashion-mnist, /usr/lib/det/python/det,
#               /lib/systemd/system/det-agent.service, /etc/det/agent.yaml (conffile;
#               work_dir /var/lib/det/agent, python_path [/usr/lib/det/python])
#   det-cli     /usr/bin/det
# The configs are configs/{master,agent}.yaml and the units deploy/systemd/*.service, with
# the paths of an installed system substituted; a substitution that no longer matches its
# source is an error here, not a silently wrong package.
set -euo pipefail

die() {
  echo "build_debs.sh: $*" >&2
  exit 1
}

(($# == 3)) || die "usage: build_debs.sh BIN_DIR PYTHON_DIR OUT_DIR"
bin_dir=$1
python_dir=$2
out_dir=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

for tool in dpkg dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install dpkg-dev)"
done
for b in det det-master det-agent det-fashion-mnist; do
  [[ -x "$bin_dir/$b" ]] || die "$bin_dir/$b is missing (bazel build //deploy:bin)"
done
[[ -f "$python_dir/det/__init__.py" ]] ||
  die "$python_dir/det/__init__.py is missing (bazel build //deploy:python)"

version_line=$("$bin_dir/det-master" --version) || die "$bin_dir/det-master --version failed"
version=${version_line#det-master }
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] ||
  die "det-master --version printed \"$version_line\", not \"det-master VERSION\""
arch=$(dpkg --print-architecture)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debian" "$out_dir"
# dpkg-shlibdeps reads debian/control and debian/shlibs.local below its working directory.
: >"$work/debian/control"
cp "$here/shlibs.local" "$work/debian/shlibs.local"

# sed_checked SRC DST EXPECTED... SCRIPT: DST is SRC through `sed -E SCRIPT`; each EXPECTED
# (an extended regular expression) must match a line of the result.
sed_checked() {
  local src=$1 dst=$2 script=${*: -1}
  sed -E "$script" "$src" >"$dst"
  local re
  for re in "${@:3:$#-3}"; do
    grep -qE -- "$re" "$dst" ||
      die "$src no longer has what the package changes (no line matches \"$re\" after the edit)"
  done
}

# stage PACKAGE: the package tree $work/debian/PACKAGE with DEBIAN/.
stage() {
  local d="$work/debian/$1"
  mkdir -p "$d/DEBIAN"
  echo "$d"
}

# The state directory and companion of a daemon package, for the maintainer scripts.
maintainer_scripts() {
  local pkg=$1 state=$2 other=$3 d="$work/debian/$1"
  local script
  for script in postinst prerm postrm; do
    sed -e "s|@PACKAGE@|$pkg|g" -e "s|@STATE@|$state|g" -e "s|@OTHER@|$other|g" \
      "$here/$script.in" >"$d/DEBIAN/$script"
    chmod 0755 "$d/DEBIAN/$script"
  done
}

unit() {
  local name=$1 d=$2
  mkdir -p "$d/lib/systemd/system"
  sed_checked "$root/deploy/systemd/$name.service" "$d/lib/systemd/system/$name.service" \
    "^ExecStart=/usr/bin/$name --config /etc/det/${name#det-}\\.yaml$" \
    's|/usr/local/bin/|/usr/bin/|g; /^#   /d; /^# (data_dir|work_dir) in /d; /^StateDirectory/d;
     s|Install: see docs/operations.md.|Installed by the '"$name"' package.|'
  ! grep -qE '^StateDirectory|/usr/local/bin' "$d/lib/systemd/system/$name.service" ||
    die "deploy/systemd/$name.service: StateDirectory or /usr/local/bin left in the packaged unit"
}

binaries() {
  local d=$1
  shift
  mkdir -p "$d/usr/bin"
  local b
  for b in "$@"; do install -m 0755 "$bin_dir/$b" "$d/usr/bin/$b"; done
}

# finish PACKAGE: control (with Depends from dpkg-shlibdeps), conffiles, md5sums, .deb.
finish() {
  local pkg=$1 d="$work/debian/$1"
  local -a elfs=()
  mapfile -t elfs < <(find "$d/usr/bin" -type f)
  local shlibs
  shlibs=$(cd "$work" && dpkg-shlibdeps -O --warnings=0 "${elfs[@]/#$work\//}") ||
    die "dpkg-shlibdeps failed for $pkg (a library from outside Debian that is not in deploy/debian/shlibs.local?)"
  shlibs=${shlibs#shlibs:Depends=}
  [[ "$shlibs" == *libc6* ]] || die "dpkg-shlibdeps printed no libc6 dependency for $pkg: $shlibs"
  local size
  size=$(du -sk --exclude=DEBIAN "$d" | cut -f1)
  sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@INSTALLED_SIZE@|$size|" \
    -e "s|@SHLIBS@|$shlibs|" "$here/$pkg.control" >"$d/DEBIAN/control"
  if [[ -d "$d/etc" ]]; then
    (cd "$d" && find etc -type f | sed 's|^|/|' | sort) >"$d/DEBIAN/conffiles"
  fi
  (cd "$d" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print |
    sed 's|^\./||' | sort | xargs md5sum) >"$d/DEBIAN/md5sums"
  find "$d" -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group -Zxz --build "$d" "$out_dir/${pkg}_${version}_${arch}.deb" >/dev/null
}

# det-master
d=$(stage det-master)
binaries "$d" det-master
unit det-master "$d"
mkdir -p "$d/etc/det"
sed_checked "$root/configs/master.yaml" "$d/etc/det/master.yaml" \
  "^data_dir: /var/lib/det/master$" \
  's|^data_dir: /var/lib/det$|data_dir: /var/lib/det/master|;
   s|^# db_path: /var/lib/det/det\.db |# db_path: /var/lib/det/master/det.db|;
   s|--config configs/master\.yaml|--config /etc/det/master.yaml|;
   1s|^|# Installed by the det-master package (a conffile: your changes are kept on upgrades).\n|'
maintainer_scripts det-master master det-agent
chmod 0644 "$d/etc/det/master.yaml"
finish det-master

# det-agent
d=$(stage det-agent)
binaries "$d" det-agent det-fashion-mnist
unit det-agent "$d"
mkdir -p "$d/usr/lib/det/python"
cp -R "$python_dir/det" "$d/usr/lib/det/python/"
find "$d/usr/lib/det/python" -name __pycache__ -prune -exec rm -rf {} +
find "$d/usr/lib/det/python" -type f -exec chmod 0644 {} +
mkdir -p "$d/etc/det"
sed_checked "$root/configs/agent.yaml" "$d/etc/det/agent.yaml" \
  "^work_dir: /var/lib/det/agent( |$)" \
  "^python_path: \\[/usr/lib/det/python\\]( |$)" \
  's|^work_dir: *[^ #]*|work_dir: /var/lib/det/agent|;
   s|--config configs/agent\.yaml|--config /etc/det/agent.yaml|;
   s|^# python_path: \[[^]#]*\]|python_path: [/usr/lib/det/python]|;
   1s|^|# Installed by the det-agent package (a conffile: your changes are kept on upgrades).\n|'
chmod 0644 "$d/etc/det/agent.yaml"
maintainer_scripts det-agent agent det-master
finish det-agent

# det-cli
d=$(stage det-cli)
binaries "$d" det
finish det-cli
