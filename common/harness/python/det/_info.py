"""What a worker knows about its place in a trial, read once from the environment the det
agent gives it (the DET_* variables and torchrun's RANK, WORLD_SIZE, ...). The Python twin of
common/harness/context.h."""

import json
import os
from typing import Any, Dict, Mapping, Optional


class ClusterEnvironmentError(RuntimeError):
    """A DET_* variable is missing or malformed: the process was not started by a det agent
    (or by one this package does not match)."""


def _missing(name: str, why: str) -> ClusterEnvironmentError:
    return ClusterEnvironmentError(
        f"environment variable {name} {why} (is this process running under a det agent?)")


def _int(env: Mapping[str, str], name: str, required: bool, default: int = 0) -> int:
    value = env.get(name, "")
    if value == "":
        if required:
            raise _missing(name, "is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise _missing(name, f"is not an integer: {value!r}") from None


def _json_object(env: Mapping[str, str], name: str) -> Dict[str, Any]:
    value = env.get(name, "")
    if value == "":
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise _missing(name, "is not a JSON object")
    return parsed


def checkpoint_directory(config: Mapping[str, Any]) -> str:
    """The directory an experiment's checkpoints go to (common/checkpoint's
    CheckpointDirectory): checkpoint_storage.host_path, or its storage_path (absolute, or
    relative to host_path). "" when the config has no checkpoint_storage. ValueError naming
    the field otherwise."""
    cs = config.get("checkpoint_storage")
    if cs is None:
        return ""
    if not isinstance(cs, dict):
        raise ValueError("checkpoint_storage: expected an object")
    kind = cs.get("type", "shared_fs")
    if kind != "shared_fs":
        raise ValueError(f'checkpoint_storage.type: only shared_fs is supported, got "{kind}"')
    host = cs.get("host_path")
    if not isinstance(host, str) or not host.startswith("/"):
        raise ValueError("checkpoint_storage.host_path: expected an absolute directory path")
    sp = cs.get("storage_path")
    if isinstance(sp, str) and sp:
        return sp if sp.startswith("/") else host + "/" + sp
    return host


def _length_in_batches(length: Any, batches_per_epoch: int, global_batch_size: int) -> int:
    if not isinstance(length, dict):
        return 0
    if isinstance(length.get("batches"), int):
        return length["batches"]
    if isinstance(length.get("epochs"), int):
        return length["epochs"] * batches_per_epoch
    if isinstance(length.get("records"), int) and global_batch_size > 0:
        return length["records"] // global_batch_size
    return 0


class TrialInfo:
    """The trial this process trains (Determined's det.TrialInfo)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.trial_id: int = _int(env, "DET_TRIAL_ID", True)
        self.experiment_id: int = _int(env, "DET_EXPERIMENT_ID", True)
        self.trial_run_id: int = _int(env, "DET_TRIAL_RUN_ID", False)
        self.trial_seed: int = _int(env, "DET_TRIAL_SEED", True)
        self.hparams: Dict[str, Any] = _json_object(env, "DET_HPARAMS")
        # The experiment's effective configuration.
        self.config: Dict[str, Any] = _json_object(env, "DET_EXPERIMENT_CONFIG")
        # Batches (global steps) to train in all, from the searcher.
        self.target_batches: int = _int(env, "DET_TRIAL_TARGET_BATCHES", False)
        gbs = self.hparams.get("global_batch_size", 0)
        self.global_batch_size: int = gbs if isinstance(gbs, int) and not isinstance(gbs, bool) else 0
        world = _int(env, "WORLD_SIZE", False, 1)
        # global_batch_size // WORLD_SIZE (remainder dropped, as the C++ harness does).
        self.per_slot_batch_size: int = self.global_batch_size // max(1, world)
        records = self.config.get("records_per_epoch", 0)
        self.records_per_epoch: int = records if isinstance(records, int) else 0
        self.batches_per_epoch: int = (self.records_per_epoch // self.global_batch_size
                                       if self.global_batch_size > 0 else 0)
        searcher = self.config.get("searcher") or {}
        self.searcher_metric: str = searcher.get("metric", "") if isinstance(searcher, dict) else ""
        self.smaller_is_better: bool = bool(searcher.get("smaller_is_better", True)) \
            if isinstance(searcher, dict) else True
        self.max_length: Dict[str, Any] = searcher.get("max_length", {}) \
            if isinstance(searcher, dict) and isinstance(searcher.get("max_length"), dict) else {}
        self.validation_period: int = _length_in_batches(
            self.config.get("min_validation_period"), self.batches_per_epoch,
            self.global_batch_size)
        self.checkpoint_period: int = _length_in_batches(
            self.config.get("min_checkpoint_period"), self.batches_per_epoch,
            self.global_batch_size)
        self.checkpoint_dir: str = checkpoint_directory(self.config)

    def length_unit(self) -> str:
        """The unit of searcher.max_length: "batches", "epochs" or "records"."""
        for unit in ("batches", "epochs", "records"):
            if unit in self.max_length:
                return unit
        return "batches"

    def to_batches(self, length: float) -> int:
        """`length` in the unit of searcher.max_length, as batches."""
        unit = self.length_unit()
        if unit == "epochs":
            return int(round(length * self.batches_per_epoch))
        if unit == "records":
            return int(length) // self.global_batch_size if self.global_batch_size else 0
        return int(length)

    def from_batches(self, batches: int) -> int:
        """`batches` in the unit of searcher.max_length (whole units, rounded down)."""
        unit = self.length_unit()
        if unit == "epochs":
            return batches // self.batches_per_epoch if self.batches_per_epoch else 0
        if unit == "records":
            return batches * self.global_batch_size
        return batches


class ClusterInfo:
    """Where this process runs (Determined's det.ClusterInfo)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.master_url: str = env.get("DET_MASTER", "")
        if not self.master_url:
            raise _missing("DET_MASTER", "is not set")
        self.allocation_id: str = env.get("DET_ALLOCATION_ID", "")
        if not self.allocation_id:
            raise _missing("DET_ALLOCATION_ID", "is not set")
        self.task_id: str = self.allocation_id
        self.session_token: str = env.get("DET_ALLOCATION_TOKEN", "")
        if not self.session_token:
            raise _missing("DET_ALLOCATION_TOKEN", "is not set")
        self.agent_id: str = env.get("DET_AGENT_ID", "")
        self.slot_ids = [s for s in env.get("DET_SLOT_IDS", "").split(",") if s]
        self.slot_type: str = env.get("DET_SLOT_TYPE", "cpu") or "cpu"
        self.rank: int = _int(env, "RANK", True)
        self.world_size: int = _int(env, "WORLD_SIZE", True)
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise _missing("RANK", f"({self.rank}) is outside WORLD_SIZE ({self.world_size})")
        self.local_rank: int = _int(env, "LOCAL_RANK", False, 0)
        self.local_size: int = _int(env, "LOCAL_WORLD_SIZE", False, 1)
        self.cross_rank: int = _int(env, "CROSS_RANK", False, 0)
        self.cross_size: int = _int(env, "CROSS_SIZE", False, 1)
        self.container_rank: int = self.cross_rank
        self.trial = TrialInfo(env)
        path = env.get("DET_LATEST_CHECKPOINT", "")
        # The latest checkpoint's storage path, and its storage id (Determined's
        # latest_checkpoint: the id restore_path() takes); None on a first run.
        self.latest_checkpoint_path: Optional[str] = path or None
        self.latest_checkpoint: Optional[str] = os.path.basename(path.rstrip("/")) if path else None


def cluster_info_from(env: Mapping[str, str]) -> Optional[ClusterInfo]:
    """ClusterInfo of `env`, or None off-cluster (no DET_MASTER). ClusterEnvironmentError naming the
    variable when DET_MASTER is set but the rest is missing or malformed."""
    if not env.get("DET_MASTER"):
        return None
    return ClusterInfo(env)


def get_cluster_info() -> Optional[ClusterInfo]:
    """This process's ClusterInfo, or None when it runs outside a det allocation."""
    return cluster_info_from(os.environ)
