"""The model registry, as Determined's SDK has it (determined.experimental.Model and
ModelVersion): a model is a name for the checkpoints a team ships, each registered as a
numbered version. A checkpoint that is a model version is never deleted (garbage
collection keeps it; Checkpoint.delete() and experiment deletion are refused) until the
version or the model is deleted. docs/models.md."""

import datetime
import enum
import json
from typing import Any, Dict, Iterable, List, Optional

from det._proto import api_pb2, types_pb2
from det.experimental import _session, errors
from det.experimental._enums import OrderBy
from det.experimental.checkpoint import Checkpoint


def _time(ms: int) -> Optional[datetime.datetime]:
    if not ms:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def _metadata(text: str) -> Dict[str, Any]:
    return json.loads(text) if text else {}


class ModelSortBy(enum.Enum):
    """The field get_models() sorts by (Determined's names)."""

    UNSPECIFIED = "UNSPECIFIED"
    NAME = "NAME"
    DESCRIPTION = "DESCRIPTION"
    CREATION_TIME = "CREATION_TIME"
    LAST_UPDATED_TIME = "LAST_UPDATED_TIME"
    NUM_VERSIONS = "NUM_VERSIONS"


# Determined's name of the order of get_models() and Model.list_versions().
ModelOrderBy = OrderBy


class ModelVersion:
    """A version of a model: one checkpoint, from Model.register_version(),
    Model.get_version() or Model.list_versions().

    Attributes (Determined's): `checkpoint` (Checkpoint, as the master has it now),
    `model_version` (its number: 1, 2, ... per model), `model_version_id` (unique id),
    `model_id`, `model_name`, `name`, `comment`, `notes`, `metadata` (dict), `labels`. det's own:
    `username` (who registered it) and `creation_time`."""

    def __init__(self, session: _session.Session, proto: types_pb2.ModelVersion) -> None:
        self._session = session
        self.checkpoint = Checkpoint(session, proto.checkpoint)
        self.model_version = proto.version
        self.model_version_id = proto.id
        self.model_id = proto.model_id
        self.model_name = proto.model_name
        self.name = proto.name
        self.comment = proto.comment
        self.notes = proto.notes
        self.metadata: Dict[str, Any] = _metadata(proto.metadata_json)
        self.labels: List[str] = list(proto.labels)
        self.username = proto.username
        self.creation_time = _time(proto.creation_time_ms)

    def delete(self) -> None:
        """Deletes this version from the registry (its checkpoint is then no longer
        protected from deletion)."""
        self._session.call("DeleteModelVersion", api_pb2.DeleteModelVersionRequest(
            model_name=self.model_name, version=self.model_version))

    def _patch(self, **fields: Any) -> None:
        resp = self._session.call("PatchModelVersion", api_pb2.PatchModelVersionRequest(
            model_name=self.model_name, version=self.model_version, **fields))
        v = resp.model_version
        self.name, self.comment, self.notes = v.name, v.comment, v.notes
        self.metadata = _metadata(v.metadata_json)
        self.labels = list(v.labels)

    def set_name(self, name: str) -> None:
        """Renames this version (the model's owner or an admin only)."""
        self._patch(name=name)

    def set_notes(self, notes: str) -> None:
        """Replaces this version's notes (the model's owner or an admin only)."""
        self._patch(notes=notes)

    def __repr__(self) -> str:
        return (f"ModelVersion(model_name={self.model_name}, model_version={self.model_version}, "
                f"checkpoint={self.checkpoint.uuid})")


class Model:
    """A model in the registry, from client.create_model() or client.get_model().

    Attributes (Determined's): `model_id`, `name`, `description`, `creation_time`,
    `last_updated_time` (datetimes, UTC), `metadata` (dict), `labels` (list), `username`
    (its creator: only they or an admin may change it), `archived` (always False: det does
    not archive models), `workspace_id` (None: det has no workspaces). det's own:
    `num_versions`."""

    def __init__(self, session: _session.Session, proto: types_pb2.Model) -> None:
        self._session = session
        self._set(proto)

    def _set(self, proto: types_pb2.Model) -> None:
        self.model_id = proto.id
        self.name = proto.name
        self.description = proto.description
        self.creation_time = _time(proto.creation_time_ms)
        self.last_updated_time = _time(proto.last_updated_time_ms)
        self.metadata: Dict[str, Any] = _metadata(proto.metadata_json)
        self.labels: List[str] = list(proto.labels)
        self.username = proto.username
        self.num_versions = proto.num_versions
        self.archived = False
        self.workspace_id: Optional[int] = None

    def _patch(self, **fields: Any) -> None:
        resp = self._session.call("PatchModel", api_pb2.PatchModelRequest(name=self.name,
                                                                          **fields))
        self._set(resp.model)

    def reload(self) -> None:
        """Refreshes the model's fields from the master."""
        self._set(self._session.call("GetModel", api_pb2.GetModelRequest(name=self.name)).model)

    def register_version(self, checkpoint_uuid: str, name: str = "", comment: str = "",
                         notes: str = "",
                         metadata: Optional[Dict[str, Any]] = None) -> ModelVersion:
        """Registers checkpoint `checkpoint_uuid` as the model's next version and returns it.
        NotFoundException for an unknown checkpoint; BadRequestException
        (FAILED_PRECONDITION) for one that was deleted or is being deleted."""
        resp = self._session.call("RegisterModelVersion", api_pb2.RegisterModelVersionRequest(
            model_name=self.name, checkpoint_uuid=checkpoint_uuid, name=name, comment=comment,
            notes=notes, metadata_json=json.dumps(metadata) if metadata else ""))
        self.num_versions += 1
        return ModelVersion(self._session, resp.model_version)

    def get_version(self, version: int = -1) -> Optional[ModelVersion]:
        """Version number `version`; with -1 (the default), the latest, or None when the
        model has no versions. NotFoundException for a version it does not have."""
        try:
            resp = self._session.call("GetModelVersion", api_pb2.GetModelVersionRequest(
                model_name=self.name, version=max(version, 0)))
        except errors.NotFoundException as e:
            if version == -1 and "has no versions" in str(e):
                return None
            raise
        return ModelVersion(self._session, resp.model_version)

    def list_versions(self, order_by: OrderBy = OrderBy.DESC) -> List[ModelVersion]:
        """The model's versions, by number: the latest first unless `order_by` is ASC."""
        resp = self._session.call("ListModelVersions",
                                  api_pb2.ListModelVersionsRequest(model_name=self.name))
        versions = [ModelVersion(self._session, v) for v in resp.model_versions]
        versions.sort(key=lambda v: v.model_version, reverse=order_by.value == "DESC")
        return versions

    def get_versions(self, order_by: OrderBy = OrderBy.DESC) -> List[ModelVersion]:
        """list_versions() under the name Determined's older SDK used."""
        return self.list_versions(order_by)

    def set_description(self, description: str) -> None:
        self._patch(description=description)

    def add_label(self, label: str) -> None:
        self._patch(add_labels=[label])

    def remove_label(self, label: str) -> None:
        self._patch(remove_labels=[label])

    def set_labels(self, labels: Iterable[str]) -> None:
        """Replaces the model's labels with `labels`."""
        if isinstance(labels, str):
            raise ValueError(f"set_labels() takes a list of strings, got {labels!r}")
        wanted = list(labels)
        self._patch(add_labels=[label for label in wanted if label not in self.labels],
                    remove_labels=[label for label in self.labels if label not in wanted])

    def add_metadata(self, metadata: Dict[str, Any]) -> None:
        """Adds `metadata`'s keys to the model's metadata (replacing those there)."""
        self._patch(metadata_json=json.dumps(dict(self.metadata, **metadata)))

    def remove_metadata(self, keys: List[str]) -> None:
        """Removes the top-level `keys` from the model's metadata."""
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"remove_metadata() takes a list of strings, got {keys!r}")
        kept = {k: v for k, v in self.metadata.items() if k not in keys}
        self._patch(metadata_json=json.dumps(kept) if kept else "")

    def archive(self) -> None:
        raise NotImplementedError("Model.archive: det's model registry does not archive "
                                  "models")

    def unarchive(self) -> None:
        raise NotImplementedError("Model.unarchive: det's model registry does not archive "
                                  "models")

    def move_to_workspace(self, workspace_name: str) -> None:
        raise NotImplementedError("Model.move_to_workspace: det has no workspaces")

    def delete(self) -> None:
        """Deletes the model and its versions (their checkpoints are then no longer
        protected from deletion)."""
        self._session.call("DeleteModel", api_pb2.DeleteModelRequest(name=self.name))

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "id": self.model_id,
            "description": self.description,
            "creation_time": self.creation_time.isoformat() if self.creation_time else None,
            "last_updated_time": (self.last_updated_time.isoformat()
                                  if self.last_updated_time else None),
            "metadata": self.metadata,
            "labels": self.labels,
            "username": self.username,
            "archived": self.archived,
        }

    def __repr__(self) -> str:
        return f"Model(id={self.model_id}, name={self.name}, metadata={json.dumps(self.metadata)})"
