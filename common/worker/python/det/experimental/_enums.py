"""Enums the SDK's modules share: det has one State for experiments, trials and
checkpoints (proto/types.proto), which the SDK offers under Determined's names
(ExperimentState, TrialState), and one sort order (OrderBy)."""

import enum
from typing import Type, TypeVar

from det._proto import types_pb2

class State(enum.Enum):
    """The state of an experiment or a trial (Determined's ExperimentState and TrialState
    are this one enum): each member's value is the proto name ("STATE_COMPLETED").
    Determined's STOPPING_* states are det's STOPPING."""

    UNSPECIFIED = "STATE_UNSPECIFIED"
    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    QUEUED = "STATE_QUEUED"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"
    STOPPING = "STATE_STOPPING"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"


E = TypeVar("E", bound=enum.Enum)


def state(value: int, enum_type: Type[E]) -> E:
    """The member of `enum_type` for types_pb2.State `value` (UNSPECIFIED when it has none)."""
    name = types_pb2.State.Name(value)
    for member in enum_type:
        if member.value == name:
            return member
    return enum_type["UNSPECIFIED"]


class OrderBy(enum.Enum):
    """Ascending or descending order (Determined's OrderBy, CheckpointOrderBy and
    TrialOrderBy)."""

    ASC = "ASC"
    DESC = "DESC"
    ASCENDING = "ASC"
    DESCENDING = "DESC"
