"""det's Python SDK, shaped like Determined's `determined.experimental`: `client` (login,
create_experiment, get_experiment, get_trial, get_checkpoint, list_experiments) and the
classes it returns. docs/sdk.md."""

from det.experimental import client, errors
from det.experimental.checkpoint import (Checkpoint, CheckpointOrderBy, CheckpointSortBy,
                                         CheckpointState, CheckpointTrainingMetadata)
from det.experimental.client import Determined
from det.experimental.experiment import (Experiment, ExperimentState, TrialOrderBy,
                                         TrialSortBy)
from det.experimental.trial import Trial, TrialMetrics, TrialState

__all__ = [
    "Checkpoint", "CheckpointOrderBy", "CheckpointSortBy", "CheckpointState",
    "CheckpointTrainingMetadata", "Determined", "Experiment", "ExperimentState", "Trial",
    "TrialMetrics", "TrialOrderBy", "TrialSortBy", "TrialState", "client", "errors",
]
