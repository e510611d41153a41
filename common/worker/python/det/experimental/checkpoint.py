"""Checkpoints, as Determined's SDK has them (determined.experimental.Checkpoint): what a trial
stored (its files, metadata, the validation metrics at its batch), and download() to copy
its files here."""

import dataclasses
import datetime
import enum
import json
import os
import shutil
from typing import Any, Dict, List, Optional

from det._proto import api_pb2, types_pb2
from det.experimental import _session
from det.experimental._enums import OrderBy, state


class CheckpointState(enum.Enum):
    """A checkpoint's state: COMPLETED while its files exist, DELETED once garbage
    collection (or Checkpoint.delete()) removed them."""

    UNSPECIFIED = "STATE_UNSPECIFIED"
    COMPLETED = "STATE_COMPLETED"
    DELETED = "STATE_DELETED"


class CheckpointSortBy(enum.Enum):
    """The field list_checkpoints() sorts by (a string sorts by that validation metric)."""

    END_TIME = "END_TIME"
    UUID = "UUID"
    BATCH_NUMBER = "BATCH_NUMBER"
    STATE = "STATE"
    SEARCHER_METRIC = "SEARCHER_METRIC"


# Determined's name of the order of list_checkpoints().
CheckpointOrderBy = OrderBy


@dataclasses.dataclass
class CheckpointTrainingMetadata:
    """What a checkpoint of a trial belongs to. `validation_metrics` is
    {"avgMetrics": {name: value}} with the validation metrics reported at the checkpoint's
    batch (empty when none was)."""

    experiment_config: Dict[str, Any]
    experiment_id: int
    trial_id: int
    hparams: Dict[str, Any]
    validation_metrics: Dict[str, Any]


def _time(ms: int) -> Optional[str]:
    if not ms:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat()


class Checkpoint:
    """A checkpoint a trial stored, usually from client.get_checkpoint(uuid),
    Experiment.top_checkpoint() or Trial.list_checkpoints().

    Attributes: `uuid`; `report_time` (ISO 8601, UTC); `resources` (file path -> size in
    bytes); `metadata` (what the trial stored with it, e.g. {"steps_completed": 100});
    `state` (CheckpointState); `training` (CheckpointTrainingMetadata). det's own:
    `storage_path` (its directory in the checkpoint storage), `total_batches`,
    `experiment_id`, `trial_id`. `task_id` and `allocation_id` are None (det does not record
    them with a checkpoint)."""

    def __init__(self, session: _session.Session, proto: types_pb2.Checkpoint,
                 hparams: Optional[Dict[str, Any]] = None) -> None:
        self._session = session
        self._hparams = hparams
        self._training: Optional[CheckpointTrainingMetadata] = None
        self.uuid = proto.uuid
        self.task_id: Optional[str] = None
        self.allocation_id: Optional[str] = None
        self.report_time = _time(proto.report_time_ms)
        self.resources: Dict[str, int] = dict(proto.resources)
        self.metadata: Dict[str, Any] = json.loads(proto.metadata_json) if proto.metadata_json \
            else {}
        self.state = state(proto.state, CheckpointState)
        self.storage_path = proto.storage_path
        self.total_batches = proto.total_batches
        self.experiment_id = proto.experiment_id
        self.trial_id = proto.trial_id
        self.report_time_ms = proto.report_time_ms
        self._metrics: Dict[str, float] = dict(proto.metrics)

    @property
    def training(self) -> CheckpointTrainingMetadata:
        """The experiment, trial, hyperparameters and validation metrics of the checkpoint
        (the experiment's config is fetched from the master once)."""
        if self._training is None:
            hparams = self._hparams
            if hparams is None:
                trial = self._session.call("GetTrial",
                                           api_pb2.GetTrialRequest(id=self.trial_id)).trial
                hparams = json.loads(trial.hparams_json) if trial.hparams_json else {}
            self._training = CheckpointTrainingMetadata(
                experiment_config=self._session.experiment_config(self.experiment_id),
                experiment_id=self.experiment_id,
                trial_id=self.trial_id,
                hparams=hparams,
                validation_metrics={"avgMetrics": dict(self._metrics)},
            )
        return self._training

    def download(self, path: Optional[str] = None) -> str:
        """Copies the checkpoint's files to `path` (default: checkpoints/<uuid> under the
        current directory) and returns that path. A `path` that already holds a
        metadata.json is taken as downloaded already (as Determined does). Writes
        metadata.json when the checkpoint has none.

        det's checkpoint storage is shared_fs: the files are read from `storage_path`, which
        must be mounted at the same path on this machine (FileNotFoundError says so when it
        is not). A symbolic link is copied only as what it names inside the checkpoint; one
        out of it is a PermissionError and nothing is copied. FileExistsError when `path`
        exists and is not empty (and holds no metadata.json)."""
        local = os.fspath(path) if path is not None else os.path.join("checkpoints", self.uuid)
        if os.path.exists(os.path.join(local, "metadata.json")):
            return local
        if self.state == CheckpointState.DELETED:
            raise FileNotFoundError(f"checkpoint {self.uuid} was deleted: its files are gone")
        source = self.storage_path
        if not source or not os.path.isdir(source):
            raise FileNotFoundError(
                f"checkpoint {self.uuid}: cannot read its directory {source} from this "
                "machine: Checkpoint.download() works where its checkpoint storage (shared_fs "
                "host_path) is mounted at the same path")
        if os.path.isdir(local) and os.listdir(local):
            raise FileExistsError(f"{local}: exists and is not empty; nothing was copied")
        root = os.path.realpath(source)
        plan: List[Any] = []  # (source file or None for a directory, relative path)

        def walk(directory: str, rel: str, depth: int) -> None:
            if depth > 64:
                raise OSError(f"{directory}: directories nested more than 64 deep")
            for name in sorted(os.listdir(directory)):
                full = os.path.join(directory, name)
                target = full
                if os.path.islink(full):
                    target = os.path.realpath(full)
                    if not (target == root or target.startswith(root + os.sep)) or \
                            not os.path.exists(target):
                        raise PermissionError(
                            f"{full}: a symbolic link to {target} outside the checkpoint "
                            "directory; not copied (nothing was)")
                sub = os.path.join(rel, name) if rel else name
                if os.path.isdir(target):
                    plan.append((None, sub))
                    walk(target, sub, depth + 1)
                elif os.path.isfile(target):
                    plan.append((target, sub))

        walk(root, "", 0)
        os.makedirs(local, exist_ok=True)
        for src, rel in plan:
            dest = os.path.join(local, rel)
            if src is None:
                os.makedirs(dest, exist_ok=True)
            else:
                shutil.copyfile(src, dest)
        if not os.path.exists(os.path.join(local, "metadata.json")):
            self.write_metadata_file(os.path.join(local, "metadata.json"))
        return local

    def write_metadata_file(self, path: str) -> None:
        """Writes the checkpoint's metadata to `path` as JSON."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.metadata, f, indent=2)

    def delete(self) -> None:
        """Deletes the checkpoint's files (a garbage collection task on an agent; the
        checkpoint's trial must have ended)."""
        self._session.call("DeleteCheckpoints", api_pb2.DeleteCheckpointsRequest(
            uuids=[self.uuid]))

    def reload(self) -> None:
        """Refreshes the checkpoint's state and metadata from the master."""
        fresh = self._session.call("GetCheckpoint",
                                   api_pb2.GetCheckpointRequest(uuid=self.uuid)).checkpoint
        self.__init__(self._session, fresh, self._hparams)  # type: ignore[misc]

    def add_metadata(self, metadata: Dict[str, Any]) -> None:
        raise NotImplementedError("Checkpoint.add_metadata: det's master has no route to "
                                  "change a stored checkpoint's metadata yet")

    def remove_metadata(self, keys: List[str]) -> None:
        raise NotImplementedError("Checkpoint.remove_metadata: det's master has no route to "
                                  "change a stored checkpoint's metadata yet")

    def __repr__(self) -> str:
        return f"Checkpoint(uuid={self.uuid})"
