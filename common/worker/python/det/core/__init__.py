"""det's Core API, shaped like Determined's `determined.core` (0.38): a Determined Core API
script runs on det once `import determined as det` reads `import det`."""

from det.core._checkpoint import CheckpointContext, DownloadMode, DummyCheckpointContext
from det.core._context import Context, init
from det.core._distributed import DistributedContext, DummyDistributedContext
from det.core._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from det.core._profiler import DummyProfilerContext, ProfilerContext
from det.core._searcher import (DummySearcherContext, DummySearcherOperation, SearcherContext,
                                SearcherMode, SearcherOperation, Unit)
from det.core._tensorboard import TensorboardMode
from det.core._train import DummyTrainContext, EarlyExitReason, TrainContext

__all__ = [
    "CheckpointContext", "Context", "DistributedContext", "DownloadMode",
    "DummyCheckpointContext", "DummyDistributedContext", "DummyPreemptContext",
    "DummyProfilerContext", "DummySearcherContext", "DummySearcherOperation",
    "DummyTrainContext", "EarlyExitReason", "PreemptContext", "PreemptMode", "ProfilerContext",
    "SearcherContext", "SearcherMode", "SearcherOperation", "TensorboardMode", "TrainContext",
    "Unit", "init",
]
