"""DistributedContext: this process's rank among the trial's workers, and collectives of
picklable Python objects (Determined's det.core.DistributedContext).

The collectives go over torch.distributed when it is initialized (a process group of the
script's own), else over the master's Rendezvous RPC (one round per call, keyed by the
allocation and a per-context sequence number: every rank must call the same collectives in
the same order, as with any collective)."""

import base64
import os
import pickle
import sys
from typing import Any, List, Optional, Sequence

from det import _client

_REQUIRED = object()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise ValueError(f"environment variable {name} is not an integer: {value!r}") from None


def _env_first(names: Sequence[str], default: Any = _REQUIRED, why: str = "") -> Any:
    """The integer value of the first of `names` that is set, else `default`; KeyError naming
    them when none is set and there is no default (as Determined's constructors raise, so
    that `try: ...from_torch_distributed() except KeyError:` works as it does there)."""
    for name in names:
        if os.environ.get(name, ""):
            return _env_int(name, 0)
    if default is _REQUIRED:
        raise KeyError(f"{' or '.join(names)}: not set{why}")
    return default


def _torch_process_group() -> Any:
    """torch.distributed when this process initialized its default process group, else None
    (without importing torch: a process that never imported it has no process group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def _from_environment_names(cls: Any, chief_ip: Optional[str], local_size_names: Sequence[str],
                            why: str) -> "DistributedContext":
    """Ranks from the launcher's variables: RANK and WORLD_SIZE (or the initialized torch
    process group), LOCAL_RANK, the local size from `local_size_names`, and the agent's index
    from GROUP_RANK/CROSS_RANK and GROUP_WORLD_SIZE/CROSS_SIZE; a missing local or cross
    value is derived from the others (ranks are contiguous per agent)."""
    group = _torch_process_group()
    rank = _env_first(["RANK"], group.get_rank() if group else _REQUIRED, why)
    size = _env_first(["WORLD_SIZE"], group.get_world_size() if group else _REQUIRED, why)
    local_size = _env_first(local_size_names, size)
    local_rank = _env_first(["LOCAL_RANK"], rank % max(1, local_size))
    cross_rank = _env_first(["GROUP_RANK", "CROSS_RANK"], rank // max(1, local_size))
    cross_size = _env_first(["GROUP_WORLD_SIZE", "CROSS_SIZE"],
                            max(1, -(-size // max(1, local_size))))
    return cls(rank=rank, size=size, local_rank=local_rank, local_size=local_size,
               cross_rank=cross_rank, cross_size=cross_size,
               chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP") or
               os.environ.get("MASTER_ADDR"))


class DistributedContext:
    """Ranks (global, local to the agent, and of the agent among agents) and object
    collectives. Collectives are called by every rank, in the same order. Not thread-safe.

    Unlike Determined's, no chief_ip is needed when the ranks span agents: without a torch
    process group the collectives go through the master."""

    def __init__(self, *, rank: Optional[int] = None, size: Optional[int] = None,
                 local_rank: Optional[int] = None, local_size: Optional[int] = None,
                 cross_rank: Optional[int] = None, cross_size: Optional[int] = None,
                 chief_ip: Optional[str] = None,
                 _client_for_rendezvous: Optional[_client.WorkerClient] = None,
                 _rendezvous_prefix: str = "", _use_torch: Optional[bool] = None,
                 **_determined_ports: Any) -> None:
        # _determined_ports: Determined's pub_port, pull_port, port_offset, force_tcp (its
        # ZMQ transport); det's collectives need no ports.
        given = (rank, size, local_rank, local_size, cross_rank, cross_size)
        if all(x is None for x in given):
            given = (0, 1, 0, 1, 0, 1)
        elif any(x is None for x in given):
            raise ValueError("rank, size, local_rank, local_size, cross_rank and cross_size must "
                             "all be given if any is")
        ranks: List[int] = [x for x in given if x is not None]
        rank, size, local_rank, local_size, cross_rank, cross_size = ranks
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is outside size {size}")
        if local_size < 1 or not 0 <= local_rank < local_size:
            raise ValueError(f"local_rank {local_rank} is outside local_size {local_size}")
        if cross_size < 1 or not 0 <= cross_rank < cross_size:
            raise ValueError(f"cross_rank {cross_rank} is outside cross_size {cross_size}")
        self.rank: int = rank
        self.size: int = size
        self.local_rank: int = local_rank
        self.local_size: int = local_size
        self.cross_rank: int = cross_rank
        self.cross_size: int = cross_size
        self.chief_ip = chief_ip
        self._client = _client_for_rendezvous
        self._prefix = _rendezvous_prefix
        self._use_torch = _use_torch
        self._sequence = 0

    # Determined's accessors.
    def get_rank(self) -> int:
        """This process's rank among all the trial's workers (0 is the chief)."""
        return self.rank

    def get_size(self) -> int:
        """The number of workers (slots) of the trial."""
        return self.size

    def get_local_rank(self) -> int:
        """This process's rank among the workers on its agent."""
        return self.local_rank

    def get_local_size(self) -> int:
        """The number of workers on this process's agent."""
        return self.local_size

    def get_cross_rank(self) -> int:
        """The index of this process's agent among the trial's agents."""
        return self.cross_rank

    def get_cross_size(self) -> int:
        """The number of agents the trial runs on."""
        return self.cross_size

    def get_num_agents(self) -> int:
        """The number of agents the trial runs on (get_cross_size())."""
        return self.cross_size

    @classmethod
    def from_torch_distributed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From torchrun's variables, which det's agents set for every worker: RANK,
        WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (or CROSS_RANK) and
        GROUP_WORLD_SIZE (or CROSS_SIZE). RANK and WORLD_SIZE may instead come from an
        initialized torch.distributed process group. KeyError naming the variable when neither
        says, as Determined raises (scripts do `try: ... except KeyError: distributed = None`).
        Collectives go over the torch process group once it is initialized, else through the
        master."""
        return _from_environment_names(
            cls, chief_ip, ["LOCAL_WORLD_SIZE"],
            " and torch.distributed is not initialized (DistributedContext."
            "from_torch_distributed reads torchrun's variables)")

    @classmethod
    def from_deepspeed(cls, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From DeepSpeed's launcher variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE (or
        LOCAL_WORLD_SIZE), CROSS_RANK and CROSS_SIZE (or GROUP_RANK, GROUP_WORLD_SIZE).
        KeyError naming the variable when RANK or WORLD_SIZE is missing (and no torch process
        group is initialized). Collectives as from_torch_distributed()."""
        return _from_environment_names(
            cls, chief_ip, ["LOCAL_SIZE", "LOCAL_WORLD_SIZE"],
            " and torch.distributed is not initialized (DistributedContext.from_deepspeed "
            "reads DeepSpeed's launcher variables)")

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: Optional[str] = None) -> "DistributedContext":
        """From an initialized Horovod module (`import horovod.torch as hvd; hvd.init()`):
        hvd.rank(), size(), local_rank(), local_size(), cross_rank(), cross_size(). det
        launches no Horovod jobs itself; the collectives go through the master (or a torch
        process group, once initialized)."""
        return cls(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                   local_size=hvd.local_size(), cross_rank=hvd.cross_rank(),
                   cross_size=hvd.cross_size(),
                   chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP"))

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
        """The `obj` of every rank on this agent, by local rank. Like every collective here,
        every rank of the trial calls it (det's transports are global)."""
        if self.size == 1:
            return [obj]
        return self._local_slice(self.allgather(obj))

    def gather_local(self, obj: Any) -> Optional[List[Any]]:
        """The `obj` of every rank on this agent, on its local chief; None elsewhere."""
        local = self.allgather_local(obj)
        return local if self.local_rank == 0 else None

    def broadcast_local(self, obj: Any = None) -> Any:
        """The local chief's `obj`, on every rank of its agent."""
        return self.allgather_local(obj)[0]

    def close(self) -> None:
        """Nothing to release: the collectives own no sockets of their own."""


class DummyDistributedContext(DistributedContext):
    """A single process: rank 0 of 1 (Determined's DummyDistributedContext)."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
