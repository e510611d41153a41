"""det's Core API, shaped like Determined's `determined.core`: a Determined Core API script
runs on det once `import determined as det` reads `import det`."""

from det.core._checkpoint import CheckpointContext
from det.core._context import Context, init
from det.core._distributed import DistributedContext
from det.core._preempt import PreemptContext, PreemptMode
from det.core._searcher import SearcherContext, SearcherMode, SearcherOperation
from det.core._train import TrainContext

__all__ = [
    "CheckpointContext", "Context", "DistributedContext", "PreemptContext", "PreemptMode",
    "SearcherContext", "SearcherMode", "SearcherOperation", "TrainContext", "init",
]
