"""Writes the `det` package's wheel from pyproject.toml and a list of files, with the
standard library only (no setuptools, no network): what `bazel build //deploy:wheel` runs.

    /usr/bin/python3 det_build.py --pyproject pyproject.toml --out-dir DIR [--typed det ...] \\
        det/__init__.py=PATH [det/pytorch/_fixed_point.so=PATH ...]

writes DIR/det-VERSION-TAGS.whl holding each file at its package path, an empty PEP 561
`py.typed` in each --typed package directory, and prints the wheel's path.
The tags: `py3-none-any` for pure Python; with a native library (`*.so`) `py3-none-PLATFORM`
(e.g. linux_x86_64): det's libraries are plain C loaded with ctypes, built against no
Python ABI, so any Python 3 can load them, but only on the platform they were built for.
The wheel is reproducible: entries in a fixed order with a fixed timestamp
($SOURCE_DATE_EPOCH, else 1980-01-01) and fixed modes (0755 for *.so, else 0644).

As a PEP 517 build backend (pyproject.toml's [build-system]) it refuses to build from the
source tree, whose generated gRPC stubs and native library only Bazel makes, and says so.
"""

import argparse
import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import time
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

_WHEEL_VERSION = "1.0"
_REFUSAL = ("the det package is built by Bazel, which generates its gRPC stubs (det/_proto) "
            "and native library (det/pytorch/_fixed_point.so): run `bazel build //deploy:wheel` "
            "and install bazel-bin/deploy/wheel/det-*.whl (docs/building.md)")


def _load_toml(path: str) -> Dict[str, Any]:
    import tomllib  # Python >= 3.11, as /usr/bin/python3 in Bazel's action; the hooks need none

    with open(path, "rb") as f:
        data: Dict[str, Any] = tomllib.load(f)
    return data


def normalize(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427, PEP 503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def metadata(project: Mapping[str, Any]) -> str:
    """The METADATA file (core metadata 2.1) of pyproject.toml's [project] table."""
    for key in ("name", "version"):
        if key not in project:
            raise ValueError(f"pyproject.toml: [project] has no {key!r}")
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}",
             f"Version: {project['version']}"]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, deps in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    return "\n".join(lines) + "\n"


def platform_tag() -> str:
    """This interpreter's platform as a wheel tag: linux-x86_64 -> linux_x86_64."""
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def tags(files: Mapping[str, str]) -> Tuple[str, bool]:
    """(python-abi-platform tag, purelib?) of a wheel holding `files`."""
    if any(rel.endswith(".so") for rel in files):
        return f"py3-none-{platform_tag()}", False
    return "py3-none-any", True


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def _zip_time() -> Tuple[int, int, int, int, int, int]:
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01
    return time.gmtime(max(epoch, 315532800))[:6]


def write_wheel(pyproject: str, files: Mapping[str, str], out_dir: str,
                typed: Sequence[str] = ()) -> str:
    """Writes the wheel of `files` ({path in the package: path on disk}) and of a py.typed
    marker in each package directory of `typed` into out_dir; returns the wheel's path.
    REQUIRES: every path is relative, uses '/', and stays in the tree."""
    project = _load_toml(pyproject)["project"]
    name, version = normalize(project["name"]), project["version"]
    tag, purelib = tags(files)
    dist_info = f"{name}-{version}.dist-info"
    entries: List[Tuple[str, bytes, int]] = []  # (path, data, unix mode)
    for rel in sorted(files):
        if rel.startswith("/") or ".." in rel.split("/") or rel.startswith(dist_info):
            raise ValueError(f"{rel}: not a path inside the package")
        with open(files[rel], "rb") as f:
            data = f.read()
        # Modes by kind, not from disk (Bazel marks some outputs executable): reproducible.
        entries.append((rel, data, 0o755 if rel.endswith(".so") else 0o644))
    for package in typed:
        package = package.strip("/")
        if f"{package}/__init__.py" not in files:
            raise ValueError(f"--typed {package}: no {package}/__init__.py in the wheel")
        if f"{package}/py.typed" not in files:
            entries.append((f"{package}/py.typed", b"", 0o644))
    entries.sort(key=lambda e: e[0])
    wheel = (f"Wheel-Version: {_WHEEL_VERSION}\nGenerator: det_build {version}\n"
             f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n")
    for base, text in (("METADATA", metadata(project)), ("WHEEL", wheel)):
        entries.append((f"{dist_info}/{base}", text.encode("utf-8"), 0o644))
    record = io.StringIO()
    for rel, data, _ in entries:
        record.write(f"{rel},{_record_hash(data)},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode("utf-8"), 0o644))

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}-{version}-{tag}.whl")
    stamp = _zip_time()
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data, mode in entries:
            info = zipfile.ZipInfo(rel, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so that the mode above is honoured
            z.writestr(info, data)
    os.replace(path + ".tmp", path)
    return path


def _parse_files(specs: List[str]) -> Dict[str, str]:
    files: Dict[str, str] = {}
    for spec in specs:
        rel, sep, src = spec.partition("=")
        if not sep or not rel or not src:
            raise SystemExit(f"det_build: {spec!r} is not PACKAGE_PATH=FILE")
        if rel in files:
            raise SystemExit(f"det_build: {rel} given twice")
        files[rel] = src
    return files


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyproject", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--typed", action="append", default=[], metavar="PACKAGE_DIR")
    parser.add_argument("files", nargs="+", metavar="PACKAGE_PATH=FILE")
    args = parser.parse_args(argv)
    print(write_wheel(args.pyproject, _parse_files(args.files), args.out_dir, args.typed))
    return 0


# PEP 517 hooks: the source tree lacks what Bazel generates, so a wheel built from it would
# import nothing. Both hooks say how to build the package instead.
def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    raise RuntimeError(_REFUSAL)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    raise RuntimeError(_REFUSAL)


if __name__ == "__main__":
    sys.exit(main())
