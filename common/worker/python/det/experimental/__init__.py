"""det's Python SDK, shaped like Determined's `determined.experimental`: `client` (login,
create_experiment, get_experiment, get_trial, get_checkpoint, list_experiments,
create_model, get_model, list_models) and the classes it returns. docs/sdk.md."""

from det.experimental import client, errors
from det.experimental.checkpoint import (Checkpoint, CheckpointOrderBy, CheckpointSortBy,
                                         CheckpointState, CheckpointTrainingMetadata)
from det.experimental.client import Determined
from det.experimental.experiment import (Experiment, ExperimentState, TrialOrderBy,
                                         TrialSortBy)
from det.experimental.model import Model, ModelOrderBy, ModelSortBy, ModelVersion
from det.experimental.trial import Trial, TrialMetrics, TrialState

__all__ = [
    "Checkpoint", "CheckpointOrderBy", "CheckpointSortBy", "CheckpointState",
    "CheckpointTrainingMetadata", "Determined", "Experiment", "ExperimentState", "Model",
    "ModelOrderBy", "ModelSortBy", "ModelVersion", "Trial",
    "TrialMetrics", "TrialOrderBy", "TrialSortBy", "TrialState", "client", "errors",
]
