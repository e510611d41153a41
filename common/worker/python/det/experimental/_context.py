"""The model context directory an experiment is created with: the files `det experiment
create CONFIG DIR` would upload (cli/experiment_files.h), read by the SDK the same way:
det's defaults (`.git`, `__pycache__/`, `*.py[co]`) and the directory's `.detignore`
(gitignore syntax) leave files out; links never lead out of the directory; at most 64 MiB
and 10,000 files."""

import os
import re
import stat
from typing import List, Optional, Sequence, Tuple

from det._proto import types_pb2

# The master's limits (common/config/limits.h).
MAX_CONTEXT_BYTES = 64 << 20
MAX_CONTEXT_FILES = 10000
# Pieces of a file sent by CreateExperimentStream (kMaxContextChunkBytes).
CHUNK_BYTES = 1 << 20

_DEFAULT_IGNORE = ".git\n__pycache__/\n*.py[co]\n"


def _glob_regex(glob: str) -> str:
    """A regex (for re.fullmatch) of a gitignore glob: `*` and `?` never match '/',
    `[a-z]`/`[!a-z]` one (not) of a set, `\\` quotes, `**/` (at the start or between
    slashes) any number of directories, a trailing `/**` everything inside."""
    out = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            j = i
            while j < n and glob[j] == "*":
                j += 1
            starts_segment = i == 0 or glob[i - 1] == "/"
            if j - i >= 2 and starts_segment and (j == n or glob[j] == "/"):
                if j == n:
                    out.append(".*")
                else:
                    out.append("(?:.*/)?")
                    j += 1  # the '/' after '**'
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and glob[j] in "!^":
                j += 1
            if j < n and glob[j] == "]":  # a ']' first in the set is one of its characters
                j += 1
            close = glob.find("]", j)
            if close < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1:close]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
                out.append(f"(?!/)[{'^' if negate else ''}{body}]")
                i = close + 1
                continue
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


class ContextIgnore:
    """Which paths of a context directory are left out: det's defaults, then the lines of
    `detignore` (a .detignore file's text); the last rule that matches decides; `!`
    re-includes."""

    def __init__(self, detignore: str = "") -> None:
        # (regex, negate, dir_only, anchored)
        self._rules: List[Tuple["re.Pattern[str]", bool, bool, bool]] = []
        for line in (_DEFAULT_IGNORE + detignore).splitlines():
            self._add(line)

    def _add(self, line: str) -> None:
        # Trailing spaces are no part of a rule unless escaped.
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "
        line = stripped
        if not line or line.startswith("#"):
            return
        negate = False
        if line.startswith("!"):
            negate, line = True, line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            return
        anchored = "/" in line
        line = line.lstrip("/")
        self._rules.append((re.compile(_glob_regex(line), re.DOTALL), negate, dir_only, anchored))

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether `path` ('/'-separated, relative to the directory) is left out."""
        name = path.rsplit("/", 1)[-1]
        result = False
        for regex, negate, dir_only, anchored in self._rules:
            if dir_only and not is_dir:
                continue
            if regex.fullmatch(path if anchored else name):
                result = not negate
        return result


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def read_context(directory: Optional[str], includes: Sequence[str] = (),
                 max_bytes: int = MAX_CONTEXT_BYTES,
                 max_files: int = MAX_CONTEXT_FILES) -> List[types_pb2.ContextFile]:
    """The files to upload from `directory` (and each of `includes`, a file or directory
    placed under its own name), sorted by path. ValueError naming the directory and the
    limit when there are more than `max_files` files or more than `max_bytes` bytes, or
    naming a link that leads out of its directory or to a directory."""
    entries: List[Tuple[str, str, int]] = []  # (relative path, file to read, mode)
    roots = [(directory, "")] if directory is not None else []
    for inc in includes:
        inc = os.fspath(inc)
        roots.append((inc, os.path.basename(os.path.normpath(inc))))
    for root, prefix in roots:
        if os.path.isfile(root):
            st = os.stat(root)
            entries.append((prefix, root, stat.S_IMODE(st.st_mode)))
            continue
        if not os.path.isdir(root):
            raise ValueError(f"context directory '{root}' does not exist or is not a directory")
        _walk(root, prefix, entries, max_files)
    entries.sort()
    if len(entries) > max_files:
        raise ValueError(f"context directory '{directory}' holds more than {max_files} files "
                         "to upload (leave some out with a .detignore)")
    total = 0
    for _, source, _ in entries:
        total += os.path.getsize(source)
    if total > max_bytes:
        raise ValueError(f"context directory '{directory}' holds {total} bytes of files to "
                         f"upload, more than the limit of {max_bytes} (leave some out with a "
                         ".detignore)")
    files = []
    for rel, source, mode in entries:
        with open(source, "rb") as f:
            files.append(types_pb2.ContextFile(path=rel, content=f.read(), mode=mode))
    return files


def _walk(root: str, prefix: str, entries: List[Tuple[str, str, int]], max_files: int) -> None:
    real_root = os.path.realpath(root)
    detignore = ""
    try:
        with open(os.path.join(root, ".detignore"), encoding="utf-8") as f:
            detignore = f.read()
    except FileNotFoundError:
        pass
    rules = ContextIgnore(detignore)

    def visit(directory: str, rel_dir: str) -> None:
        for name in sorted(os.listdir(directory)):
            full = os.path.join(directory, name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            st = os.lstat(full)
            target = full
            if stat.S_ISLNK(st.st_mode):
                resolved = os.path.realpath(full)
                if not os.path.exists(resolved):
                    continue  # a dangling link: skipped, as the CLI does
                tst = os.stat(resolved)
                if rules.ignored(rel, stat.S_ISDIR(tst.st_mode)):
                    continue
                if not _inside(resolved, real_root) or stat.S_ISDIR(tst.st_mode):
                    raise ValueError(f"context file '{rel}' is a symbolic link to {resolved}: "
                                     "only links to files inside the context directory are "
                                     "uploaded")
                st, target = tst, resolved
            is_dir = stat.S_ISDIR(st.st_mode)
            if rules.ignored(rel, is_dir):
                continue
            if is_dir:
                visit(full, rel)
            elif stat.S_ISREG(st.st_mode) and name != ".detignore":
                entries.append((f"{prefix}/{rel}" if prefix else rel, target,
                                stat.S_IMODE(st.st_mode)))
                if len(entries) > max_files:
                    raise ValueError(f"context directory '{root}' holds more than {max_files} "
                                     "files to upload (leave some out with a .detignore)")

    visit(root, "")
