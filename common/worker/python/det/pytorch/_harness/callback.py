"""PyTorchCallback: hooks into det's PyTorchTrial training loop (Determined's
determined.pytorch.PyTorchCallback). Every hook is a no-op by default."""

from typing import Any, Dict, List, Optional


class PyTorchCallback:
    """Subclass and override any of the hooks; return instances from
    PyTorchTrial.build_callbacks() ({name: callback}). state_dict() is saved in each checkpoint
    under the callback's name and handed to load_state_dict() on resume."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: Optional[str]) -> None:
        """Before anything else; first_batch_idx is the batch training starts (resumes) at."""

    def on_trial_shutdown(self) -> None:
        """When the training loop ends, normally or by an exception."""

    def on_training_start(self) -> None:
        """After the checkpoint (if any) was loaded, before the first batch."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of each epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of each epoch."""

    def on_training_workload_end(self, avg_metrics: Dict[str, Any],
                                 batch_metrics: List[Dict[str, Any]]) -> None:
        """After each reporting window, with its metrics reduced across ranks."""

    def on_validation_start(self) -> None:
        """Before a validation."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch (evaluate_batch trials only)."""

    def on_validation_epoch_end(self, outputs: List[Any]) -> None:
        """After the last validation batch, with this rank's per-batch metrics."""

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        """After a validation, with its reduced metrics (on every rank)."""

    def on_checkpoint_load_start(self, checkpoint: Dict[str, Any]) -> None:
        """Before state is restored from the loaded state_dict.pth contents."""

    def on_checkpoint_save_start(self, checkpoint: Dict[str, Any]) -> None:
        """Before state_dict.pth is written; may add entries to `checkpoint` (chief only)."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint's files are written into checkpoint_dir (chief only)."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is stored and registered (every rank)."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated in Determined for on_checkpoint_write_end; still called."""

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        pass
