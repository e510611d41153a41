"""Batch and Epoch: the lengths and periods of Trainer.fit (Determined's TrainUnit)."""

from collections import abc
from typing import Union


class TrainUnit:
    """An int value is a period (Batch(100): every 100 batches; <= 0: every step); a
    container is a schedule (Batch([5, 30]): after batches 5 and 30)."""

    def __init__(self, value: Union[int, abc.Container]) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, abc.Container)):
            raise TypeError(f"{type(self).__name__}: value must be an int or a container of "
                            f"ints, got {value!r}")
        self.value = value

    def should_stop(self, step_num: int) -> bool:
        """Whether the period or schedule falls on step `step_num` (1-based)."""
        if isinstance(self.value, int):
            if self.value < 1:
                return True
            return step_num > 0 and step_num % self.value == 0
        return step_num in self.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.value == other.value  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self.value)))


class Batch(TrainUnit):
    """A length or period in batches (global steps)."""


class Epoch(TrainUnit):
    """A length or period in epochs: passes over the chief's training DataLoader."""
