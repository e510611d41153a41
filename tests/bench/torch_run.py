"""torchrun (python3 -m torch.distributed.run) with Debian 12's Python 3.11 bug fixed.

Debian's torch 1.13 `Std.from_str` looks its value up by iterating the IntFlag `Std`, and
Python 3.11 no longer yields the zero member, so torchrun dies in `to_map` with
"'NoneType' object has no attribute 'get'". This replaces that one method and runs
torchrun's own main(); everything else is torchrun's.
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed import run


def _from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    sys.exit(run.main())
