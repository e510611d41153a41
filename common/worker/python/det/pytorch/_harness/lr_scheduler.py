"""LRScheduler: a torch LR scheduler that det's training loop steps (Determined's
determined.pytorch.LRScheduler)."""

import enum
from typing import Any, Dict, List


class LRScheduler:
    """Wraps a torch LR scheduler: its state is checkpointed, and the training loop calls
    step() as step_mode says, every `frequency` epochs / batches / optimizer steps."""

    class StepMode(enum.Enum):
        # scheduler.step() after every `frequency` epochs.
        STEP_EVERY_EPOCH = 1
        # After every `frequency` batches (whatever the aggregation frequency).
        STEP_EVERY_BATCH = 2
        # Never by det: the trial calls step() itself.
        MANUAL_STEP = 3
        # With the optimizer steps (every aggregation_frequency batches), every `frequency`.
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: "LRScheduler.StepMode",
                 frequency: int = 1) -> None:
        if scheduler is None:
            raise ValueError("LRScheduler: scheduler must not be None")
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"LRScheduler: step_mode must be an LRScheduler.StepMode, "
                            f"got {step_mode!r}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"LRScheduler: frequency must be an integer >= 1, got {frequency!r}")
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    @property
    def scheduler(self) -> Any:
        return self._scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> List[float]:
        return self._scheduler.get_last_lr()

    def state_dict(self) -> Dict[str, Any]:
        return self._scheduler.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._scheduler.load_state_dict(state_dict)
