"""What a worker knows about its place in a trial, read once from the environment the det
agent gives it: the trial spec the master resolved from the experiment's config
(proto/worker.proto's TrialSpec in protobuf's JSON mapping, in the file DET_TRIAL_SPEC_FILE
names) and the rank's own variables (DET_MASTER, DET_ALLOCATION_*, torchrun's RANK,
WORLD_SIZE, ...). The Python twin of common/worker/cpp/harness/context.h.
DET_EXPERIMENT_CONFIG_FILE names the user's copy of the config; nothing here reads it: the
config's defaults and bounds live in common/config alone."""

import json
import os
from typing import Any, Dict, List, Mapping, Optional

# The spec's name in error messages (as the C++ harness names it) and the variable naming
# its file.
TRIAL_SPEC_ENV = "DET_TRIAL_SPEC"
TRIAL_SPEC_FILE_ENV = "DET_TRIAL_SPEC_FILE"


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


def trial_spec_from(env: Mapping[str, str]) -> Any:
    """The TrialSpec (det._proto.worker_pb2) in the file env's DET_TRIAL_SPEC_FILE names.
    ClusterEnvironmentError naming the variable when it is missing, its file cannot be read,
    or the file is not a TrialSpec."""
    # Imported here, as det._client does: `import det` off-cluster needs no protobuf.
    from google.protobuf import json_format
    from det._proto import worker_pb2
    path = env.get(TRIAL_SPEC_FILE_ENV, "")
    if path == "":
        raise _missing(TRIAL_SPEC_FILE_ENV, "is not set")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise _missing(TRIAL_SPEC_FILE_ENV, f"names {path!r}, which cannot be read: {e}") from None
    try:
        return json_format.Parse(text, worker_pb2.TrialSpec())
    except json_format.ParseError as e:
        raise ClusterEnvironmentError(
            f"the trial spec ({TRIAL_SPEC_FILE_ENV}) is not a det.v1.TrialSpec: {e} (is this "
            "process running under a det agent of this version?)") from None


def _json_object(name: str, text: str) -> Dict[str, Any]:
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise _missing(name, "is not a JSON object")
    return parsed


class TrialInfo:
    """The trial this process trains (Determined's det.TrialInfo): its TrialSpec, held as
    sent (as the C++ harness's TrialContext holds it), with Determined's names for its
    fields. The spec's JSON sections are parsed once, here."""

    def __init__(self, spec: Any, world_size: int) -> None:
        # The det._proto.worker_pb2.TrialSpec it reads.
        self.spec = spec
        self._world_size = max(1, world_size)
        self.hparams: Dict[str, Any] = _json_object(TRIAL_SPEC_ENV + ".hparams_json",
                                                    spec.hparams_json)
        # The config's free-form `data` section (Determined's ClusterInfo.user_data).
        self.user_data: Dict[str, Any] = _json_object(TRIAL_SPEC_ENV + ".data_json",
                                                      spec.data_json)

    @property
    def trial_id(self) -> int:
        return int(self.spec.trial_id)

    @property
    def experiment_id(self) -> int:
        return int(self.spec.experiment_id)

    @property
    def trial_run_id(self) -> int:
        return int(self.spec.run_id)

    @property
    def trial_seed(self) -> int:
        return int(self.spec.trial_seed)

    @property
    def target_batches(self) -> int:
        """Batches (global steps) to train in all, from the searcher."""
        return int(self.spec.target_batches)

    @property
    def global_batch_size(self) -> int:
        return int(self.spec.global_batch_size)

    @property
    def per_slot_batch_size(self) -> int:
        """global_batch_size // WORLD_SIZE (remainder dropped, as the C++ harness does)."""
        return self.global_batch_size // self._world_size

    @property
    def records_per_epoch(self) -> int:
        return int(self.spec.records_per_epoch)

    @property
    def batches_per_epoch(self) -> int:
        return int(self.spec.batches_per_epoch)

    @property
    def searcher_metric(self) -> str:
        return str(self.spec.searcher.metric)

    @property
    def smaller_is_better(self) -> bool:
        return bool(self.spec.searcher.smaller_is_better)

    @property
    def validation_period(self) -> int:
        return int(self.spec.validation_period)

    @property
    def checkpoint_period(self) -> int:
        return int(self.spec.checkpoint_period)

    @property
    def checkpoint_dir(self) -> str:
        return str(self.spec.checkpoint_dir)

    @property
    def checkpoint_policy(self) -> str:
        return str(self.spec.checkpoint_policy)

    @property
    def deterministic(self) -> bool:
        return bool(self.spec.deterministic)

    def length_unit(self) -> str:
        """The unit of searcher.max_length: "batches", "epochs" or "records" ("batches" also
        when the searcher has no length: has_length() is then False)."""
        return self.spec.searcher.max_length_unit or "batches"

    def has_length(self) -> bool:
        """False for a searcher without max_length (Determined 0.38: the script decides how
        long to train); target_batches is then 0."""
        return bool(self.spec.searcher.max_length_unit)

    def to_batches(self, length: float) -> int:
        """`length` in the unit of searcher.max_length, as batches."""
        unit = self.length_unit()
        if unit == "epochs":
            return int(round(length * self.batches_per_epoch))
        if unit == "records":
            gbs = self.global_batch_size
            return -(-int(length) // gbs) if gbs else 0
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
        # Determined's task type ("TRIAL", "NOTEBOOK", "COMMAND", ...): det's allocations
        # run trials only (a worker without a trial spec is refused below).
        self.task_type: str = "TRIAL"
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
        # Determined runs one container per node and its entrypoint once per container; det's
        # agent runs the entrypoint once per slot, so each rank's process is a container:
        # container_rank is the rank and container_addrs has one address per rank (the
        # chief's first). A script that launches len(slot_ids) workers per container, as
        # Determined's Core API tutorial does, so starts one worker per rank.
        self.container_rank: int = self.rank
        self.container_addrs: List[str] = _container_addrs(env, self)
        self.trial = TrialInfo(trial_spec_from(env), self.world_size)
        # The config's `data` section.
        self.user_data: Dict[str, Any] = self.trial.user_data
        path = self.trial.spec.latest_checkpoint
        # The latest checkpoint's storage path, and its storage id (Determined's
        # latest_checkpoint: the id restore_path() takes); None on a first run.
        self.latest_checkpoint_path: Optional[str] = path or None
        self.latest_checkpoint: Optional[str] = os.path.basename(path.rstrip("/")) if path else None


def _container_addrs(env: Mapping[str, str], info: "ClusterInfo") -> List[str]:
    """One address per rank, by rank: the chief's agent (MASTER_ADDR) for the ranks on it,
    this agent's for this rank's neighbours (DET_COLLECTIVE_HOST where the agent set it),
    and "" for ranks on other agents, whose addresses a worker is not told (ranks are
    contiguous per agent and a multi-agent trial uses agents of equal size)."""
    chief = env.get("MASTER_ADDR", "") or ("127.0.0.1" if info.cross_size == 1 else "")
    own = chief if info.cross_rank == 0 else env.get("DET_COLLECTIVE_HOST", "")
    per_agent = max(info.local_size, 1)
    addrs = []
    for r in range(info.world_size):
        agent = r // per_agent if info.cross_size > 1 else 0
        addrs.append(chief if agent == 0 else own if agent == info.cross_rank else "")
    return addrs


def cluster_info_from(env: Mapping[str, str]) -> Optional[ClusterInfo]:
    """ClusterInfo of `env`, or None off-cluster (no DET_MASTER). ClusterEnvironmentError naming the
    variable when DET_MASTER is set but the rest is missing or malformed."""
    if not env.get("DET_MASTER"):
        return None
    return ClusterInfo(env)


def get_cluster_info() -> Optional[ClusterInfo]:
    """This process's ClusterInfo, or None when it runs outside a det allocation."""
    return cluster_info_from(os.environ)
