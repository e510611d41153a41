"""det.core.init() and the Context it yields (Determined's det.core.Context)."""

import os
import sys
import tempfile
from typing import Optional

from det import _client, _info
from det.core import _checkpoint, _distributed, _preempt, _searcher, _train


class Context:
    """What a Core API script uses: .distributed, .train, .checkpoint, .preempt, .searcher,
    and .info (the ClusterInfo; None off-cluster). A context manager: leaving it stops the
    preemption poller and closes the connection to the master."""

    def __init__(self, *, client: _client.WorkerClient,
                 distributed: _distributed.DistributedContext,
                 info: Optional[_info.ClusterInfo], checkpoint_dir: str,
                 preempt_mode: _preempt.PreemptMode,
                 searcher_length: Optional[int]) -> None:
        self.info = info
        self.distributed = distributed
        self._client = client
        trial = info.trial if info is not None else None
        self.train = _train.TrainContext(client, trial)
        self.checkpoint = _checkpoint.CheckpointContext(client, distributed, checkpoint_dir)
        self.preempt = _preempt.PreemptContext(client, distributed, preempt_mode,
                                               on_cluster=info is not None)
        self.searcher = _searcher.SearcherContext(client, distributed, self.train, trial,
                                                  off_cluster_length=searcher_length)

    def start(self) -> "Context":
        self.preempt.start()
        return self

    def close(self) -> None:
        self.preempt.close()
        self._client.close()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def init(*, distributed: Optional[_distributed.DistributedContext] = None,
         preempt_mode: _preempt.PreemptMode = _preempt.PreemptMode.WorkersAskChief,
         checkpoint_storage: Optional[str] = None,
         searcher_length: Optional[int] = None,
         **_determined_options) -> Context:
    """The Core API context of this process; use it as `with det.core.init(...) as core:`.

    distributed: the ranks and collectives (DistributedContext.from_torch_distributed() for
      a script that set up torch.distributed); default: from the environment (RANK,
      WORLD_SIZE, ...), with collectives over torch.distributed once initialized, else over
      the master.
    checkpoint_storage: off-cluster only, the directory checkpoints go to (default:
      $TMPDIR/det-checkpoints); on a cluster the experiment's checkpoint_storage is used.
    searcher_length: off-cluster only, the length of the one searcher operation.

    Inside a det allocation (DET_MASTER set) it reports to the master; a missing or
    malformed DET_* variable is a ClusterEnvironmentError naming it. Outside one (no
    DET_MASTER) every report is printed instead."""
    info = _info.get_cluster_info()
    if info is not None:
        client: _client.WorkerClient = _client.GrpcWorkerClient(
            info.master_url, info.allocation_id, info.session_token, info.rank, info.trial.trial_id)
        checkpoint_dir = info.trial.checkpoint_dir
        prefix = info.allocation_id
    else:
        client = _client.OffClusterClient()
        checkpoint_dir = checkpoint_storage or os.path.join(tempfile.gettempdir(),
                                                            "det-checkpoints")
        prefix = "off-cluster"
        print("det: not in a det allocation (no DET_MASTER): reports are printed, checkpoints "
              f"go to {checkpoint_dir}", file=sys.stderr, flush=True)
    if distributed is None:
        distributed = _distributed.DistributedContext.from_environment()
    distributed._set_rendezvous(client, prefix)
    if info is not None and distributed.size != info.world_size:
        raise ValueError(f"det.core.init: the distributed context has {distributed.size} ranks "
                         f"but the allocation has WORLD_SIZE={info.world_size}")
    return Context(client=client, distributed=distributed, info=info,
                   checkpoint_dir=checkpoint_dir, preempt_mode=preempt_mode,
                   searcher_length=searcher_length).start()
