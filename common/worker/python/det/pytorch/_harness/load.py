"""Loading a PyTorchTrial from one of its checkpoints, for inference (Determined's
determined.pytorch.CheckpointLoadContext and load_trial_from_checkpoint_path)."""

import importlib
import json
import logging
import pathlib
import sys
from typing import Any, Dict, Optional

import torch

from det import core
from det._import import import_from_path

from .context import PyTorchTrialContext
from .trainer import CODE_DIR, LOAD_DATA_FILE, STATE_DICT_FILE, _load_model_state, _torch_load
from .trial import PyTorchTrial

logger = logging.getLogger("det.pytorch")


class _CheckpointLoadCore:
    """The Core context a trial sees when loaded from a checkpoint: one rank, no master."""

    def __init__(self) -> None:
        self.distributed = core.DistributedContext()
        self.info = None


class CheckpointLoadContext(PyTorchTrialContext):
    """A PyTorchTrialContext for building a Trial outside a training loop (one rank, the CPU,
    no master): pass it to your Trial class with any extra arguments it takes, then load the
    weights yourself, or use load_trial_from_checkpoint_path, which does both.

        with det.import_from_path(path + "/code"):
            import model_def
        trial = model_def.MyTrial(det.pytorch.CheckpointLoadContext(hparams), ...)
    """

    def __init__(self, hparams: Optional[Dict[str, Any]] = None,
                 exp_conf: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(core_context=_CheckpointLoadCore(), trial_seed=0, hparams=hparams,
                         slots_per_trial=1, num_gpus=0, exp_conf=exp_conf,
                         aggregation_frequency=1, steps_completed=0, managed_training=False)


def _import_trial_class(spec: str, code: pathlib.Path) -> type:
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"trial_cls_spec: expected MODULE:CLASS, got {spec!r}")
    try:
        with import_from_path(code):
            value: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                value = getattr(value, part)
    except Exception as e:
        raise ValueError(f"Automatic import logic failed to import Trial class as {spec} (from "
                         f"{code} and sys.path). You will need to provide your Trial class via "
                         "the trial_class argument instead.") from e
    return value


def load_trial_from_checkpoint_path(path: str, trial_class: Optional[type] = None,
                                    trial_kwargs: Optional[Dict[str, Any]] = None,
                                    torch_load_kwargs: Optional[Dict[str, Any]] = None
                                    ) -> PyTorchTrial:
    """The trial of the checkpoint directory `path` (a PyTorchTrial's: load_data.json,
    state_dict.pth, code/), with its models' weights loaded, on the CPU unless
    torch_load_kwargs' map_location says otherwise. trial_class defaults to the class the
    checkpoint names, imported from the checkpoint's code/ directory (the model definition
    saved with it) or sys.path; trial_kwargs go to its constructor after the context (a
    CheckpointLoadContext with the checkpoint's hyperparameters and config)."""
    checkpoint = pathlib.Path(path)
    load_data_path = checkpoint / LOAD_DATA_FILE
    if not load_data_path.exists():
        raise ValueError(f"{path} has no {LOAD_DATA_FILE}: not a checkpoint of a PyTorchTrial "
                         "trained by det.pytorch (download it with `det checkpoint download` "
                         "or Checkpoint.download() first)")
    with load_data_path.open() as f:
        load_data = json.load(f)
    if load_data.get("trial_type") != "PyTorchTrial":
        raise ValueError(f"{path} is not a PyTorchTrial checkpoint "
                         f"(trial_type {load_data.get('trial_type')!r})")
    if trial_class is None:
        spec = load_data["trial_cls_spec"]
        if load_data.get("trial_in_main"):
            logger.warning("Importing trial class %s, which was defined in the entrypoint "
                           "script, assuming the script is importable by that name; else "
                           "define the Trial class in an importable file", spec)
        trial_class = _import_trial_class(spec, checkpoint / CODE_DIR)
    context = CheckpointLoadContext(load_data.get("hparams"), load_data.get("experiment_config"))
    trial = trial_class(context, **(trial_kwargs or {}))
    if torch_load_kwargs:
        state = torch.load(str(checkpoint / STATE_DICT_FILE), **torch_load_kwargs)
    else:
        state = _torch_load(checkpoint / STATE_DICT_FILE)
    models = state["models_state_dict"]
    if len(models) != len(context.models):
        raise RuntimeError(f"the checkpoint holds {len(models)} models; the trial wrapped "
                           f"{len(context.models)}")
    for model, model_state in zip(context.models, models):
        _load_model_state(model, model_state)
    return trial
