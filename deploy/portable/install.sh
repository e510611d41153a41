#!/bin/sh
# Installs det's portable release into a prefix:
#
#   tar -xzf det-VERSION-linux-x86_64.tar.gz
#   det-VERSION-linux-x86_64/install.sh [PREFIX]        (default: /opt/det)
#
# Copies the release into PREFIX (bin, lib, libexec, python, share; etc/ files that are
# there already are kept, the release's versions written beside them as NAME.new), then,
# for a prefix other than the one the copy was made for, rewrites the programs' ELF
# interpreter (PREFIX/lib/ld-linux-x86-64.so.2: a fixed-length field padded with slashes)
# and the configs and systemd units that name the prefix, as listed in share/det/relocate.
# PREFIX may be the unpacked directory itself: then it is only rewritten in place.
# Ends by running PREFIX/bin/det-master --version. Plain POSIX sh with cp, dd, sed: it runs
# with busybox alone. docs/install.md.
set -eu

die() {
  echo "install.sh: $*" >&2
  exit 1
}

[ -e /proc/self/exe ] ||
  die "/proc is not mounted: det's programs find their libraries (RPATH \$ORIGIN) through /proc/self/exe"
src=$(cd "$(dirname "$0")" && pwd -P)
[ -r "$src/share/det/relocate" ] || die "$src/share/det/relocate is missing: not an unpacked release"
prefix=${1:-/opt/det}
case $prefix in
  /*) ;;
  *) die "PREFIX must be an absolute path, not \"$prefix\"" ;;
esac
case $prefix in
  *[!A-Za-z0-9._+@=,/-]*) die "PREFIX \"$prefix\" has characters other than A-Z a-z 0-9 . _ + @ = , - /" ;;
esac
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd -P)

# The manifest's first line: "prefix OLD_PREFIX FIELD_LENGTH" (split into two words).
# shellcheck disable=SC2046
set -- $(sed -n 's/^prefix //p' "$src/share/det/relocate")
[ $# -eq 2 ] || die "$src/share/det/relocate has no \"prefix\" line"
old_prefix=$1 field_len=$2
loader=lib/ld-linux-x86-64.so.2

# field PREFIX: the interpreter field for PREFIX, FIELD_LENGTH bytes.
field() {
  f=$1
  n=$((field_len - ${#1} - ${#loader}))
  [ "$n" -ge 1 ] || die "PREFIX \"$1\" is too long (at most $((field_len - ${#loader} - 1)) characters)"
  while [ "$n" -gt 1 ]; do
    f="$f/"
    n=$((n - 1))
  done
  echo "$f/$loader"
}
new_field=$(field "$prefix")
old_field=$(field "$old_prefix")

kept=
if [ "$src" != "$prefix" ]; then
  echo "installing det $(cat "$src/share/det/VERSION") into $prefix"
  for d in bin lib libexec python share; do
    rm -rf "${prefix:?}/$d"
    cp -pR "$src/$d" "$prefix/$d"
  done
  cp -p "$src/install.sh" "$prefix/install.sh"
  mkdir -p "$prefix/etc"
  for f in "$src"/etc/*; do
    name=${f##*/}
    if [ -e "$prefix/etc/$name" ]; then
      cp -p "$f" "$prefix/etc/$name.new"
      kept="$kept $name"
    else
      cp -p "$f" "$prefix/etc/$name"
    fi
  done
fi

if [ "$prefix" != "$old_prefix" ]; then
  echo "moving the release from $old_prefix to $prefix"
  while read -r kind file offset; do
    case $kind in
      interp)
        target=$prefix/$file
        got=$(dd if="$target" bs=1 skip="$offset" count="$field_len" 2>/dev/null)
        [ "$got" = "$old_field" ] || die "$target: the interpreter at byte $offset is not $old_field"
        printf '%s' "$new_field" | dd of="$target" bs=1 seek="$offset" conv=notrunc 2>/dev/null
        got=$(dd if="$target" bs=1 skip="$offset" count="$field_len" 2>/dev/null)
        [ "$got" = "$new_field" ] || die "$target: writing the interpreter failed"
        ;;
      text)
        name=${file#etc/}
        case " $kept " in *" $name "*) file=$file.new ;; esac
        sed -i "s|$old_prefix|$prefix|g" "$prefix/$file"
        ;;
    esac
  done <"$prefix/share/det/relocate"
  sed -i "s|^prefix $old_prefix |prefix $prefix |" "$prefix/share/det/relocate"
fi

"$prefix/bin/det-master" --version >/dev/null ||
  die "$prefix/bin/det-master does not run on this machine (output above)"
echo "det $(cat "$prefix/share/det/VERSION") is in $prefix: $prefix/bin/det, det-master, det-agent, det-fashion-mnist"
for name in $kept; do
  echo "kept $prefix/etc/$name; the release's version is $prefix/etc/$name.new"
done
echo "next: $prefix/share/det/README"
