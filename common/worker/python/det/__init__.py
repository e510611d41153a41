"""det: the Python side of det's worker channel. `det.core` is a Core API shaped like
Determined's; `det.get_cluster_info()` says where this process runs; `det.launch` starts
scripts the way Determined's launchers do; `det.pytorch` (when present) has the elastic
sampler and deterministic mode."""

from det import core
from det._client import AllocationEndedError, MasterError
from det._info import ClusterEnvironmentError, ClusterInfo, TrialInfo, get_cluster_info

__all__ = ["AllocationEndedError", "ClusterEnvironmentError", "ClusterInfo", "MasterError",
           "TrialInfo", "core", "get_cluster_info"]
