"""det: the Python side of det's worker channel. `det.core` is a Core API shaped like
Determined's; `det.get_cluster_info()` says where this process runs; `det.launch` starts
scripts the way Determined's launchers do; `det.pytorch` (when present) has the elastic
sampler and deterministic mode."""

from det import core
from det._client import AllocationEndedError, MasterError
from det._import import import_from_path
from det._info import ClusterEnvironmentError, ClusterInfo, TrialInfo, get_cluster_info
# A torch-free module: `import det` does not import torch.
from det.pytorch._harness.errors import InvalidHP

# Determined's logging format (det.LOG_FORMAT), for logging.basicConfig(format=...).
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

__all__ = ["AllocationEndedError", "ClusterEnvironmentError", "ClusterInfo", "InvalidHP",
           "LOG_FORMAT", "MasterError", "TrialInfo", "core", "get_cluster_info",
           "import_from_path"]
