"""det.import_from_path (Determined's): imports from a directory, such as a checkpoint's
code/ copy of the model definition, without leaving it on sys.path. No torch import."""

import contextlib
import os
import sys
from typing import Iterator, Union


@contextlib.contextmanager
def import_from_path(path: Union[str, "os.PathLike[str]"]) -> Iterator[None]:
    """Within the block, `import` looks in `path` first. After it, sys.path is as before and
    the modules the block imported from `path` are forgotten by sys.modules (the names bound
    to them in the block keep them), so that another checkpoint's code of the same module
    names imports afresh."""
    root = os.path.abspath(os.fspath(path))
    saved_path = list(sys.path)
    before = set(sys.modules)
    sys.path.insert(0, root)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        for name in set(sys.modules) - before:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if os.path.abspath(origin).startswith(root + os.sep):
                del sys.modules[name]
