"""load_trial_from_checkpoint_path (Determined's determined.pytorch.load_trial_from_checkpoint_path):
a PyTorchTrial rebuilt from one of its checkpoints, for inference."""

import importlib
import json
import pathlib
import sys
from typing import Any, Dict, Optional

import torch

from det import core

from .context import PyTorchTrialContext
from .trainer import LOAD_DATA_FILE, STATE_DICT_FILE, _load_model_state, _torch_load
from .trial import PyTorchTrial


class _CheckpointLoadCore:
    """The Core context a trial sees when loaded from a checkpoint: one rank, no master."""

    def __init__(self) -> None:
        self.distributed = core.DistributedContext()
        self.info = None


def _import_trial_class(spec: str, checkpoint: pathlib.Path) -> type:
    module_name, _, qualname = spec.partition(":")
    code = checkpoint / "code"
    if code.is_dir() and str(code) not in sys.path:
        sys.path.insert(0, str(code))
    value: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def load_trial_from_checkpoint_path(path: str, trial_class: Optional[type] = None,
                                    trial_kwargs: Optional[Dict[str, Any]] = None,
                                    torch_load_kwargs: Optional[Dict[str, Any]] = None
                                    ) -> PyTorchTrial:
    """The trial of the checkpoint directory `path`, with its models' weights loaded (on the
    CPU, or where torch_load_kwargs' map_location says). trial_class defaults to the class
    the checkpoint names (imported from sys.path, or the checkpoint's code/ directory);
    trial_kwargs go to its constructor after the context."""
    checkpoint = pathlib.Path(path)
    with (checkpoint / LOAD_DATA_FILE).open() as f:
        load_data = json.load(f)
    if load_data.get("trial_type") != "PyTorchTrial":
        raise ValueError(f"{path} is not a PyTorchTrial checkpoint "
                         f"(trial_type {load_data.get('trial_type')!r})")
    if trial_class is None:
        trial_class = _import_trial_class(load_data["trial_cls_spec"], checkpoint)
    hparams = load_data.get("hparams")
    context = PyTorchTrialContext(
        core_context=_CheckpointLoadCore(), trial_seed=None, hparams=hparams,
        slots_per_trial=1, num_gpus=0, exp_conf=load_data.get("experiment_config"),
        aggregation_frequency=1, steps_completed=0, managed_training=False)
    trial = trial_class(context, **(trial_kwargs or {}))
    if torch_load_kwargs:
        state = torch.load(str(checkpoint / STATE_DICT_FILE), **torch_load_kwargs)
    else:
        state = _torch_load(checkpoint / STATE_DICT_FILE)
    for model, model_state in zip(context.models, state["models_state_dict"]):
        _load_model_state(model, model_state)
    return trial
