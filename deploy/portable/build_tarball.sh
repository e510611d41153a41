#!/usr/bin/env bash
# Builds det's portable release from built binaries (the build machine: Debian 12):
#
#   deploy/portable/build_tarball.sh BIN_DIR PYTHON_DIR OUT_DIR
#
# BIN_DIR holds det, det-master, det-agent, det-fashion-mnist (bazel-bin/deploy/bin);
# PYTHON_DIR the Python package det (bazel-bin/deploy/python). Writes
# OUT_DIR/det-VERSION-linux-x86_64.tar.gz, VERSION being what `det-master --version` prints.
# Used by //deploy/portable:tarball (deploy/portable/BUILD.bazel) and deploy/portable.sh.
# Needs gcc, patchelf, readelf, nm, strip, ldd, tar, gzip; no network.
#
# The technique (docs/install.md, "How the release is made"): every shared library the
# programs load, Debian's glibc and its loader included, travels in lib/; each program's
# ELF interpreter (PT_INTERP) is <prefix>/lib/ld-linux-x86-64.so.2, written into a field
# padded with slashes so that install.sh can rewrite it in place for any other
# prefix; RPATH $ORIGIN/../lib (libraries: $ORIGIN) finds the rest without LD_LIBRARY_PATH,
# so the processes the programs start (workers, the host's Python) see nothing of it.
# The CUDA runtime, cuBLAS and NCCL stay on the host: bin/det-fashion-mnist is a launcher
# that finds them (DET_CUDA_LIB_DIR) and otherwise runs the example with stub libraries
# (lib/cuda-stubs) on CPU slots.
set -euo pipefail

die() {
  echo "build_tarball.sh: $*" >&2
  exit 1
}

(($# == 3)) || die "usage: build_tarball.sh BIN_DIR PYTHON_DIR OUT_DIR"
bin_dir=$1 python_dir=$2 out_dir=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

for tool in gcc patchelf readelf nm strip ldd tar gzip; do
  command -v "$tool" >/dev/null || die "$tool is missing (deploy/setup.sh installs it)"
done
for b in det det-master det-agent det-fashion-mnist; do
  [[ -x "$bin_dir/$b" ]] || die "$bin_dir/$b is missing (bazel build //deploy:bin)"
done
[[ -f "$python_dir/det/__init__.py" ]] ||
  die "$python_dir/det/__init__.py is missing (bazel build //deploy:python)"

version_line=$("$bin_dir/det-master" --version) || die "$bin_dir/det-master --version failed"
version=${version_line#det-master }
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] ||
  die "det-master --version printed \"$version_line\", not \"det-master VERSION\""
name=det-$version-linux-x86_64

# The default prefix, and the interpreter field: the prefix, padded with slashes to a fixed
# length, then /lib/ld-linux-x86-64.so.2. A path may repeat slashes, so the padded field is a
# working path as it is; install.sh writes another prefix over it with the same length.
PREFIX=/opt/det
LOADER=lib/ld-linux-x86-64.so.2
FIELD_LEN=255
pad=$((FIELD_LEN - ${#PREFIX} - ${#LOADER} - 1))
interp="$PREFIX$(printf '/%.0s' $(seq "$pad"))/$LOADER"
((${#interp} == FIELD_LEN)) || die "interpreter field is ${#interp} bytes, not $FIELD_LEN"

work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
d=$work/$name
mkdir -p "$d"/{bin,libexec/det,lib/cuda-stubs,etc,share/det/examples,share/det/systemd}

# -- programs ------------------------------------------------------------------------------
for b in det det-master det-agent; do install -m 0755 "$bin_dir/$b" "$d/bin/$b"; done
install -m 0755 "$bin_dir/det-fashion-mnist" "$d/libexec/det/det-fashion-mnist"
exes=("$d/bin/det" "$d/bin/det-master" "$d/bin/det-agent" "$d/libexec/det/det-fashion-mnist")

# -- libraries -----------------------------------------------------------------------------
# Left to the host: the CUDA libraries the example links (found by its launcher) and the
# driver's (libcuda, libnvidia-ml: dlopen'ed by the CUDA runtime and the agent).
cuda_re='^(libcudart|libcublas|libcublasLt|libnccl|libcuda|libnvidia-ml)\.so'
declare -A seen=()
cuda_libs=()
for exe in "${exes[@]}"; do
  while read -r line; do
    # "name => /path (0x..)", "/lib64/ld-linux-x86-64.so.2 (0x..)", "linux-vdso.so.1 (0x..)"
    if [[ $line =~ ^([^[:space:]]+)\ =\>\ ([^[:space:]]+)\ \( ]]; then
      lib=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]}
    elif [[ $line =~ ^(/[^[:space:]]+)\ \( ]]; then
      path=${BASH_REMATCH[1]} lib=$(basename "$path")
    else
      [[ $line != *"not found"* ]] || die "$exe: a library is not found: $line"
      continue
    fi
    [[ -z ${seen[$lib]:-} ]] || continue
    seen[$lib]=1
    if [[ $lib =~ $cuda_re ]]; then
      cuda_libs+=("$lib")
      continue
    fi
    cp -L "$path" "$d/lib/$lib"
  done < <(ldd "$exe")
done
[[ -e $d/$LOADER ]] || die "no $LOADER among the programs' libraries"
# glibc's pieces that libraries from the host (the driver's, CUDA's) may ask for; stubs
# since glibc 2.34, but a library built before then names them.
for lib in libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1; do
  [[ -e $d/lib/$lib ]] || cp -L "/lib/x86_64-linux-gnu/$lib" "$d/lib/$lib"
done
chmod -R u+w "$d"

glibc_re='^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1)$'
for f in "$d"/lib/*.so*; do
  strip --strip-debug "$f"
  [[ $(basename "$f") =~ $glibc_re ]] && continue
  # DT_RPATH, not DT_RUNPATH: it applies to the libraries' own dependencies as well.
  patchelf --force-rpath --set-rpath '$ORIGIN' "$f"
done
for f in "${exes[@]}"; do
  strip --strip-debug "$f"
  # $ORIGIN/../lib from bin/, $ORIGIN/../../lib from libexec/det/.
  up=${f#$d/}
  up=${up//[^\/]/}
  up=${up//\//../}
  patchelf --set-interpreter "$interp" --force-rpath --set-rpath "\$ORIGIN/${up}lib" "$f"
done
# The example loads the host's CUDA libraries, whose RUNPATH ($ORIGIN) would let them find
# the host's libpthread/libdl/librt: loaded first from lib/, they are reused instead.
for lib in libpthread.so.0 libdl.so.2 librt.so.1; do
  readelf -d "$d/libexec/det/det-fashion-mnist" | grep -q "Shared library: \[$lib\]" ||
    patchelf --add-needed "$lib" "$d/libexec/det/det-fashion-mnist"
done

# -- CUDA stubs ----------------------------------------------------------------------------
# For hosts without CUDA: one tiny library per CUDA library the example needs directly,
# with every function it imports from it, each returning that library's "unavailable"
# error (cudaErrorInsufficientDriver, as the real runtime returns without a driver;
# CUBLAS_STATUS_NOT_INITIALIZED; ncclSystemError). The example runs CPU slots without
# calling any of them but cudaGetDeviceCount.
direct_needed=$(readelf -d "$d/libexec/det/det-fashion-mnist" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
cuda_direct=()
for lib in "${cuda_libs[@]}"; do
  grep -qx "$lib" <<<"$direct_needed" && cuda_direct+=("$lib")
done
((${#cuda_direct[@]} > 0)) || die "det-fashion-mnist links no CUDA library (expected libcudart, libcublas, libnccl)"
imports=$(nm -D --undefined-only "$bin_dir/det-fashion-mnist" | awk '{print $2}')
ldd_out=$(ldd "$bin_dir/det-fashion-mnist")
for lib in "${cuda_direct[@]}"; do
  path=$(awk -v l="$lib" '$1 == l {print $3}' <<<"$ldd_out")
  case $lib in
    libcudart.*) err=35 ;;  # cudaErrorInsufficientDriver
    libcublas.*) err=1 ;;   # CUBLAS_STATUS_NOT_INITIALIZED
    libnccl.*) err=2 ;;     # ncclSystemError
    *) die "no stub error code for $lib" ;;
  esac
  src=$work/stub-$lib.c vers=$work/stub-$lib.map
  {
    echo "/* Stub of $lib for hosts without CUDA (made by deploy/portable/build_tarball.sh). */"
    echo "static const char kMessage[] = \"$lib is not available on this host (det's CUDA stub; see docs/install.md)\";"
    echo "static void* handle[4];"
  } >"$src"
  # "TYPE NAME" of each symbol the library defines, without its version.
  defined=$(nm -D --defined-only "$path" | awk '{sub(/@.*/, "", $3); print $2, $3}')
  tags=() syms=()
  while read -r imp; do
    [[ -n $imp ]] || continue
    sym=${imp%%@*} tag=""
    [[ $imp == *@* ]] && tag=${imp#*@} && tag=${tag#@}
    type=$(awk -v s="$sym" '$2 == s {print $1; exit}' <<<"$defined")
    [[ -n $type ]] || continue
    [[ $type =~ ^[TtWi]$ ]] || die "$lib: det-fashion-mnist imports $sym, not a function (type $type)"
    syms+=("$sym")
    [[ -n $tag ]] && tags+=("$tag")
    case $sym in
      *GetErrorString | *GetErrorName | *GetStatusString | *GetStatusName | ncclGetLastError)
        echo "const char* $sym(void) { return kMessage; }" ;;
      __cudaRegisterFatBinary)
        echo "void** $sym(void) { return handle; }" ;;
      *) echo "int $sym(void) { return $err; }" ;;
    esac >>"$src"
  done <<<"$imports"
  ((${#syms[@]} > 0)) || die "det-fashion-mnist imports nothing from $lib"
  flags=()
  if ((${#tags[@]} > 0)); then
    tag=$(printf '%s\n' "${tags[@]}" | sort -u)
    [[ $tag != *$'\n'* ]] || die "$lib: more than one symbol version used: $tag"
    printf '%s {\n  global:\n%s\n  local: *;\n};\n' "$tag" "$(printf '    %s;\n' "${syms[@]}")" >"$vers"
    flags+=("-Wl,--version-script=$vers")
  fi
  gcc -shared -fPIC -O1 -fno-builtin -w -o "$d/lib/cuda-stubs/$lib" "-Wl,-soname,$lib" \
    "${flags[@]}" "$src"
  strip --strip-unneeded "$d/lib/cuda-stubs/$lib"
  patchelf --force-rpath --set-rpath '$ORIGIN/..' "$d/lib/cuda-stubs/$lib"
done

# -- the example's launcher ----------------------------------------------------------------
sed -e "s|@CUDA_LIBS@|${cuda_libs[*]}|" -e "s|@VERSION@|$version|" \
  "$here/det-fashion-mnist.in" >"$d/bin/det-fashion-mnist"
chmod 0755 "$d/bin/det-fashion-mnist"
grep -q '@[A-Z_]*@' "$d/bin/det-fashion-mnist" && die "det-fashion-mnist.in: a placeholder is left"

# -- Python package, configs, units, installer ---------------------------------------------
mkdir -p "$d/python"
cp -R "$python_dir/det" "$d/python/"
find "$d/python" -name __pycache__ -prune -exec rm -rf {} +
find "$d/python" -name '*.so' -exec strip --strip-debug {} +

# sed_checked SRC DST EXPECTED... SCRIPT: DST is SRC through `sed -E SCRIPT`; each EXPECTED
# (an extended regular expression) must match a line of the result.
sed_checked() {
  local src=$1 dst=$2 script=${*: -1}
  sed -E "$script" "$src" >"$dst"
  local re
  for re in "${@:3:$#-3}"; do
    grep -qE -- "$re" "$dst" ||
      die "$src no longer has what the release changes (no line matches \"$re\" after the edit)"
  done
}
sed_checked "$root/configs/master.yaml" "$d/etc/master.yaml" \
  '^data_dir: /var/lib/det$' \
  "s|--config configs/master\\.yaml|--config $PREFIX/etc/master.yaml|"
sed_checked "$root/configs/agent.yaml" "$d/etc/agent.yaml" \
  '^work_dir: /var/lib/det-agent( |$)' \
  "s|^work_dir: *[^ #]*|work_dir: /var/lib/det-agent|;
   s|--config configs/agent\\.yaml|--config $PREFIX/etc/agent.yaml|"
cp "$here/cuda.env" "$d/etc/cuda.env"
for unit in det-master det-agent; do
  sed_checked "$root/deploy/systemd/$unit.service" "$d/share/det/systemd/$unit.service" \
    "^ExecStart=$PREFIX/bin/$unit --config $PREFIX/etc/${unit#det-}\\.yaml$" \
    "s|^ExecStart=/usr/local/bin/$unit --config /etc/det/${unit#det-}\\.yaml|ExecStart=$PREFIX/bin/$unit --config $PREFIX/etc/${unit#det-}.yaml|;
     /^#   /d; s|Install: see docs/operations.md.|Install: $PREFIX/share/det/README.|"
done
cp "$root"/configs/examples/*.yaml "$d/share/det/examples/"
install -m 0755 "$here/install.sh" "$d/install.sh"
cp "$here/README" "$d/share/det/README"
echo "$version" >"$d/share/det/VERSION"

# What install.sh rewrites for another prefix: the interpreter field of each program (file,
# byte offset, the field as written) and the text files that name the prefix.
{
  echo "# det $version: what install.sh rewrites to move the release from $PREFIX"
  echo "prefix $PREFIX $FIELD_LEN"
  for f in "${exes[@]}"; do
    offset=$(readelf -lW "$f" | awk '$1 == "INTERP" {print $2}')
    [[ $offset == 0x* ]] || die "$f has no INTERP program header"
    offset=$((offset))
    got=$(dd if="$f" bs=1 skip="$offset" count="$FIELD_LEN" 2>/dev/null)
    [[ $got == "$interp" ]] || die "$f: the interpreter is not at offset $offset"
    echo "interp ${f#$d/} $offset"
  done
  (cd "$d" && grep -rlF "$PREFIX" etc share/det/systemd bin/det-fashion-mnist | sort | sed 's/^/text /')
} >"$d/share/det/relocate"

find "$d" -type d -exec chmod 0755 {} +
find "$d" -type f -exec chmod u+w,go-w {} +
mkdir -p "$out_dir"
# Reproducible: sorted names, fixed times and owners, no gzip timestamp.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -cf - "$name" |
  gzip -n -9 >"$out_dir/$name.tar.gz"
