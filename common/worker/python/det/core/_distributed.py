"""DistributedContext: this process's rank among the trial's workers, and collectives of
picklable Python objects (Determined's det.core.DistributedContext).

The collectives go over torch.distributed when it is initialized (a process group of the
script's own), else over the master's Rendezvous RPC (one round per call, keyed by the
allocation and a per-context sequence number: every rank must call the same collectives in
the same order, as with any collective)."""

import base64
import os
import pickle
from typing import Any, List, Optional

from det import _client


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise ValueError(f"environment variable {name} is not an integer: {value!r}") from None


class DistributedContext:
    """Ranks (global, local to the agent, and of the agent among agents) and object
    collectives. Collectives are called by every rank, in the same order. Not thread-safe."""

    def __init__(self, *, rank: int, size: int, local_rank: int, local_size: int,
                 cross_rank: int, cross_size: int, chief_ip: Optional[str] = None,
                 _client_for_rendezvous: Optional[_client.WorkerClient] = None,
                 _rendezvous_prefix: str = "", _use_torch: Optional[bool] = None,
                 **_ignored: Any) -> None:
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is outside size {size}")
        if local_size < 1 or not 0 <= local_rank < local_size:
            raise ValueError(f"local_rank {local_rank} is outside local_size {local_size}")
        if cross_size < 1 or not 0 <= cross_rank < cross_size:
            raise ValueError(f"cross_rank {cross_rank} is outside cross_size {cross_size}")
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size
        self.chief_ip = chief_ip
        self._client = _client_for_rendezvous
        self._prefix = _rendezvous_prefix
        self._use_torch = _use_torch
        self._sequence = 0

    # Determined's accessors.
    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    @classmethod
    def from_torch_distributed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From an initialized torch.distributed default process group (ranks from it;
        local and cross ranks from LOCAL_RANK, LOCAL_WORLD_SIZE, CROSS_RANK/GROUP_RANK and
        CROSS_SIZE/GROUP_WORLD_SIZE). Collectives go over that group."""
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("DistributedContext.from_torch_distributed: torch.distributed is "
                               "not initialized; call torch.distributed.init_process_group first")
        size = dist.get_world_size()
        local_size = _env_int("LOCAL_WORLD_SIZE", size)
        cross_size = _env_int("CROSS_SIZE", _env_int("GROUP_WORLD_SIZE", max(1, size // local_size)))
        return cls(rank=dist.get_rank(), size=size, local_rank=_env_int("LOCAL_RANK", 0),
                   local_size=local_size,
                   cross_rank=_env_int("CROSS_RANK", _env_int("GROUP_RANK", 0)),
                   cross_size=cross_size, chief_ip=chief_ip or os.environ.get("MASTER_ADDR"),
                   _use_torch=True)

    @classmethod
    def from_environment(cls, client: Optional[_client.WorkerClient] = None,
                         rendezvous_prefix: str = "") -> "DistributedContext":
        """From RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, CROSS_RANK, CROSS_SIZE (each
        defaulting to a single process). Collectives use torch.distributed once it is
        initialized, else the master's Rendezvous through `client`."""
        size = _env_int("WORLD_SIZE", 1)
        return cls(rank=_env_int("RANK", 0), size=size, local_rank=_env_int("LOCAL_RANK", 0),
                   local_size=_env_int("LOCAL_WORLD_SIZE", size),
                   cross_rank=_env_int("CROSS_RANK", 0), cross_size=_env_int("CROSS_SIZE", 1),
                   chief_ip=os.environ.get("MASTER_ADDR"), _client_for_rendezvous=client,
                   _rendezvous_prefix=rendezvous_prefix)

    def _set_rendezvous(self, client: _client.WorkerClient, prefix: str) -> None:
        # REQUIRES: called by core.init on every rank, before any collective.
        if self._client is None:
            self._client, self._prefix = client, prefix

    def _torch_ready(self) -> bool:
        if self._use_torch is False:
            return False
        import sys
        if "torch" not in sys.modules and not self._use_torch:
            return False  # torch was never imported, so no process group exists.
        import torch.distributed as dist
        return dist.is_available() and dist.is_initialized() and dist.get_world_size() == self.size

    def allgather(self, obj: Any) -> List[Any]:
        """Every rank's `obj`, by rank."""
        if self.size == 1:
            return [obj]
        if self._torch_ready():
            import torch.distributed as dist
            out: List[Any] = [None] * self.size
            dist.all_gather_object(out, obj)
            return out
        if self._client is None:
            raise RuntimeError("DistributedContext: no transport for collectives of "
                               f"{self.size} ranks: initialize torch.distributed, or use the "
                               "context of det.core.init() inside a det allocation")
        self._sequence += 1
        key = f"{self._prefix}/det-core/{self._sequence}"
        value = base64.b64encode(pickle.dumps(obj)).decode("ascii")
        values = self._client.rendezvous(key, value, timeout_s=600.0)
        if len(values) != self.size:
            raise RuntimeError(f"rendezvous '{key}' returned {len(values)} values for "
                               f"{self.size} ranks")
        return [pickle.loads(base64.b64decode(v)) for v in values]

    def gather(self, obj: Any) -> Optional[List[Any]]:
        """Every rank's `obj`, by rank, on the chief; None on the other ranks."""
        everything = self.allgather(obj)
        return everything if self.rank == 0 else None

    def broadcast(self, obj: Any) -> Any:
        """The chief's `obj`, on every rank."""
        if self.size == 1:
            return obj
        if self._torch_ready():
            import torch.distributed as dist
            box = [obj if self.rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            return box[0]
        return self.allgather(obj if self.rank == 0 else None)[0]

    def _local_slice(self, everything: List[Any]) -> List[Any]:
        # Ranks are contiguous per agent.
        first = self.rank - self.local_rank
        return everything[first:first + self.local_size]

    def allgather_local(self, obj: Any) -> List[Any]:
        """The `obj` of every rank on this agent, by local rank."""
        return self._local_slice(self.allgather(obj))

    def gather_local(self, obj: Any) -> Optional[List[Any]]:
        """The `obj` of every rank on this agent, on its local chief; None elsewhere."""
        local = self.allgather_local(obj)
        return local if self.local_rank == 0 else None

    def broadcast_local(self, obj: Any) -> Any:
        """The local chief's `obj`, on every rank of its agent."""
        return self.allgather_local(obj)[0]

    def close(self) -> None:
        pass
