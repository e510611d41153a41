"""Exceptions of det's Trial API (no torch import: det.InvalidHP may alias InvalidHP)."""


class InvalidHP(Exception):
    """Raised by trial code (in __init__, train_batch, evaluate_batch, ...) when the trial's
    hyperparameters are invalid (Determined's det.InvalidHP). The training loop checkpoints
    unsaved work and lets it propagate; leaving det.core.init()'s (or det.pytorch.init()'s)
    `with` block with it reports the early exit to the master from the chief and exits 0, so
    that the master ends the trial as invalid and its searcher replaces it. While the master
    has no call for that, the exception goes on and the run fails
    (docs/coming-from-determined.md)."""

    def __init__(self, msg: str = "InvalidHP") -> None:
        super().__init__(msg)


class InvalidExperimentException(ValueError):
    """A trial misuses the API (no wrapped model, both or neither of evaluate_batch and
    evaluate_full_dataset, ...): Determined's det.errors.InvalidExperimentException."""
