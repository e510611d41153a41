"""PyTorchTrialContext and det.pytorch.init() (Determined's determined.pytorch.init and
PyTorchTrialContext): what a PyTorchTrial wraps its models, optimizers and LR schedulers
with, over a det.core Context."""

import contextlib
import functools
import gc
import json
import logging
import os
import pathlib
import random
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

import numpy as np
import torch
import torch.distributed

import det
from det import core

from . import data as _data, tensorboard as _tensorboard
from .errors import InvalidExperimentException
from .lr_scheduler import LRScheduler
from .reducer import _ReducerContext

logger = logging.getLogger("det.pytorch")


class PyTorchExperimentalContext:
    """context.experimental: switches of the training loop."""

    def __init__(self, parent: "PyTorchTrialContext") -> None:
        self._parent = parent
        self._auto_to_device = True
        self._data_repro_checks_disabled = False
        self._auto_amp = False

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow build_*_data_loader to return a bare torch.utils.data.DataLoader (used as is:
        not sharded by rank, not skipped on resume)."""
        self._data_repro_checks_disabled = True

    def disable_auto_to_device(self) -> None:
        """Hand batches to train_batch/evaluate_batch where the loader left them."""
        self._auto_to_device = False

    def use_amp(self) -> None:
        """Automatic mixed precision as Determined's use_amp(): wraps a
        torch.cuda.amp.GradScaler (context.wrap_scaler), runs the forward pass of every model
        wrapped afterwards under autocast (context.autocast_forward_pass), scales losses in
        context.backward and steps, unscales (for clip_grads) and updates the scaler in
        step_optimizer. Call before wrap_model. On CPU slots torch disables the scaler and
        autocast, so training runs in float32."""
        self._parent.wrap_scaler(torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available()))
        self._auto_amp = True


def _calculate_batch_sizes(hparams: Optional[Dict[str, Any]], slots: int):
    if not hparams or hparams.get("global_batch_size") is None:
        return None, None
    global_batch_size = hparams["global_batch_size"]
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
        raise InvalidExperimentException(
            f"hyperparameters.global_batch_size must be an integer, got {global_batch_size!r}")
    if global_batch_size < slots:
        raise InvalidExperimentException(
            f"global_batch_size ({global_batch_size}) must be >= the number of slots ({slots})")
    per_slot = global_batch_size // slots
    if global_batch_size % slots:
        logger.warning("global_batch_size %d is not divisible by %d slots: the effective global "
                       "batch is %d", global_batch_size, slots, per_slot * slots)
    return per_slot, per_slot * slots


def _micro_batch_size(hparams: Optional[Dict[str, Any]]) -> int:
    """hyperparameters.micro_batch_size (det's, as the C++ example's; default 1): the samples
    of each micro-batch in deterministic mode."""
    value = (hparams or {}).get("micro_batch_size", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidExperimentException(
            f"hyperparameters.micro_batch_size must be an integer >= 1 in deterministic mode "
            f"(reproducibility.deterministic), got {value!r}")
    return value


class _DeterministicStep:
    """What train_batch asked of the context during one micro-batch in deterministic mode:
    the loss it passed to backward() (the Trainer back-propagates it through
    DeterministicDDP) and its step_optimizer() calls (run once the global batch's exact mean
    gradient is in .grad)."""

    def __init__(self) -> None:
        self.loss: Optional[torch.Tensor] = None
        self.steps: List[Any] = []

    def begin(self) -> None:
        self.loss = None
        self.steps = []

    def set_loss(self, loss: torch.Tensor, gradient: Optional[torch.Tensor], retain_graph: bool,
                 create_graph: bool) -> None:
        if gradient is not None or retain_graph or create_graph:
            raise InvalidExperimentException(
                "deterministic mode (reproducibility.deterministic): context.backward takes the "
                "loss alone (no gradient, retain_graph or create_graph)")
        if self.loss is not None:
            raise InvalidExperimentException(
                "deterministic mode (reproducibility.deterministic): train_batch called "
                "context.backward more than once; it supports one loss per batch (add the "
                "losses and call backward once)")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise InvalidExperimentException(
                "deterministic mode (reproducibility.deterministic): context.backward needs a "
                f"one-element loss tensor, got {type(loss).__name__}")
        self.loss = loss.reshape(())

    def take_loss(self, batch_idx: int) -> torch.Tensor:
        if self.loss is None:
            raise InvalidExperimentException(
                f"deterministic mode (reproducibility.deterministic): train_batch (batch "
                f"{batch_idx}) did not call context.backward(loss)")
        return self.loss


class PyTorchTrialContext(_ReducerContext):
    """Built by det.pytorch.init() (not by hand). `distributed` is the core
    DistributedContext; `device` is where models and batches go (cuda:LOCAL_RANK on CUDA
    slots, else the CPU)."""

    def __init__(self, core_context: Any, trial_seed: Optional[int],
                 hparams: Optional[Dict[str, Any]], slots_per_trial: int, num_gpus: int,
                 exp_conf: Optional[Dict[str, Any]], aggregation_frequency: int,
                 steps_completed: int, managed_training: bool = True,
                 debug_enabled: bool = False, enable_tensorboard_logging: bool = True,
                 **_unused: Any) -> None:
        self._core = core_context
        self.distributed = core_context.distributed
        super().__init__(self.distributed.allgather)
        self._per_slot_batch_size, self._global_batch_size = _calculate_batch_sizes(
            hparams, slots_per_trial)
        self._hparams = hparams
        self._exp_conf = exp_conf
        self._trial_seed = trial_seed
        self._num_gpus = num_gpus
        self._steps_completed = steps_completed
        self._managed_training = managed_training
        self._debug_enabled = debug_enabled
        self._enable_tensorboard_logging = enable_tensorboard_logging
        self._tensorboard_writer: Any = None
        if isinstance(aggregation_frequency, bool) or not isinstance(aggregation_frequency, int) \
                or aggregation_frequency < 1:
            raise InvalidExperimentException(
                f"aggregation_frequency must be an integer >= 1, got {aggregation_frequency!r}")
        self._aggregation_frequency = aggregation_frequency
        # det's deterministic mode (reproducibility.deterministic: docs/pytorch-trial.md):
        # the Trainer trains each global batch as micro-batches of _micro_batch_size samples
        # through DeterministicDDP; while it runs train_batch, backward and step_optimizer
        # are captured by _step (a _DeterministicStep), not run.
        repro = (exp_conf or {}).get("reproducibility") or {}
        self._deterministic = bool(repro.get("deterministic", False))
        self._micro_batch_size = _micro_batch_size(hparams) if self._deterministic else 0
        self._step: Optional[_DeterministicStep] = None
        if self._deterministic:
            from ..deterministic import pin_determinism
            pin_determinism(num_threads=1)
        self.device = self._init_device()
        self.models: List[torch.nn.Module] = []
        self.optimizers: List[torch.optim.Optimizer] = []
        self.lr_schedulers: List[LRScheduler] = []
        self._optimizer_configs: Dict[Any, Dict[str, Any]] = {}
        self._scaler: Any = None
        self._epoch_len: Optional[int] = None
        self._current_batch_idx: Optional[int] = None
        self._stop_requested = False
        self._to_device_warned_types: set = set()
        self.experimental = PyTorchExperimentalContext(self)
        self.profiler: Any = None

    def _init_device(self) -> torch.device:
        if self._num_gpus > 0 and torch.cuda.is_available():
            # On a det agent CUDA_VISIBLE_DEVICES shows each rank its own GPU alone; under
            # torchrun on one machine every rank sees them all.
            count = torch.cuda.device_count()
            local = self.distributed.local_rank
            index = local if count > 1 and local < count else 0
            device = torch.device("cuda", index)
            torch.cuda.set_device(device)
            return device
        return torch.device("cpu")

    # -- information ----------------------------------------------------------------------

    def get_hparams(self) -> Dict[str, Any]:
        if self._hparams is None:
            raise ValueError("hparams is undefined in this Trial because hparams was not "
                             "configured. Please check the init() call to Trainer API.")
        return self._hparams

    def get_hparam(self, name: str) -> Any:
        hparams = self.get_hparams()
        if name not in hparams:
            raise ValueError(f"Could not find name '{name}' in experiment hyperparameters. "
                             "Please check your experiment configuration 'hyperparameters' "
                             "section.")
        if name == "global_batch_size":
            logger.warning("Please use `context.get_per_slot_batch_size()` and "
                           "`context.get_global_batch_size()` instead of accessing "
                           "`global_batch_size` directly.")
        return hparams[name]

    def get_global_batch_size(self) -> int:
        if self._global_batch_size is None:
            raise ValueError("global_batch_size is undefined in this Trial because hparams was "
                             "not configured. Please check the init() call to Trainer API.")
        return self._global_batch_size

    def get_per_slot_batch_size(self) -> int:
        if self._per_slot_batch_size is None:
            raise ValueError("per_slot_batch_size is undefined in this Trial because hparams "
                             "was not configured. Please check the init() call to Trainer API.")
        return self._per_slot_batch_size

    def get_experiment_config(self) -> Dict[str, Any]:
        if self._exp_conf is None:
            raise ValueError("exp_conf is undefined in this Trial. Please check the init() call "
                             "to Trainer API.")
        return self._exp_conf

    def get_data_config(self) -> Dict[str, Any]:
        return self.get_experiment_config().get("data", {}) or {}

    def get_experiment_id(self) -> int:
        info = self._core.info
        return int(info.trial.experiment_id) if info is not None else 0

    def get_trial_id(self) -> int:
        info = self._core.info
        return int(info.trial.trial_id) if info is not None else 0

    def get_trial_seed(self) -> int:
        if self._trial_seed is None:
            raise RuntimeError("Trial seed not set.")
        return self._trial_seed

    def get_initial_batch(self) -> int:
        """The batch training starts at: 0 on a first run, the latest checkpoint's batch
        when the trial resumes (a pause, a restart, a preemption)."""
        return self._steps_completed

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """True: the training loop checkpoints after the current batch and returns."""
        if not isinstance(stop_requested, bool):
            raise AssertionError("stop_requested must be a boolean")
        if stop_requested:
            logger.info("A trial stoppage has been requested; the trial stops after the current "
                        "batch")
        self._stop_requested = stop_requested

    def get_enable_tensorboard_logging(self) -> bool:
        return self._enable_tensorboard_logging

    def set_enable_tensorboard_logging(self, enable: bool) -> None:
        """Whether the Trainer writes the reported metrics to get_tensorboard_writer()
        (default: True)."""
        self._enable_tensorboard_logging = bool(enable)

    def get_tensorboard_path(self) -> pathlib.Path:
        """The directory for TensorBoard files: det copies what is written there into the
        checkpoint storage (<storage>/tensorboard/experiment/<id>/trial/<id>/) after each
        metrics report."""
        return self._core.train.get_tensorboard_path()

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Profiles training with torch.profiler.profile(*args, **kwargs), its traces written
        to get_tensorboard_path() (TensorBoard's PyTorch Profiler tab reads them); the
        Trainer steps it after every training batch. Pass a `schedule` to bound what it
        records."""
        self.profiler = torch.profiler.profile(
            *args, on_trace_ready=torch.profiler.tensorboard_trace_handler(
                str(self.get_tensorboard_path())), **kwargs)

    def get_tensorboard_writer(self) -> Any:
        """A SummaryWriter on get_tensorboard_path(), made on first use: torch's when the
        `tensorboard` package is installed, else det's writer of scalars (add_scalar,
        add_scalars)."""
        if self._tensorboard_writer is None:
            self._tensorboard_writer = _tensorboard.summary_writer(
                str(self.get_tensorboard_path()))
        return self._tensorboard_writer

    def _require_training(self) -> int:
        if self._current_batch_idx is None:
            raise RuntimeError("Training hasn't started.")
        return self._current_batch_idx

    def _require_epoch_len(self) -> int:
        if self._epoch_len is None:
            raise RuntimeError("Training DataLoader uninitialized.")
        return self._epoch_len

    def current_train_batch(self) -> int:
        """The index of the batch being trained (global steps since the trial started)."""
        return self._require_training()

    def current_train_epoch(self) -> int:
        return self._require_training() // self._require_epoch_len()

    def is_epoch_start(self) -> bool:
        return self._require_training() % self._require_epoch_len() == 0

    def is_epoch_end(self) -> bool:
        n = self._require_epoch_len()
        return self._require_training() % n == n - 1

    # -- wrapping -------------------------------------------------------------------------

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model on `device`, in DistributedDataParallel with more than one rank;
        checkpointed as models_state_dict[i]."""
        model = model.to(self.device)
        wrapped = model
        # In deterministic mode the Trainer's DeterministicDDP exchanges the gradients.
        if self.distributed.size > 1 and not self._deterministic:
            if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
                raise InvalidExperimentException(
                    "wrap_model: more than one rank but torch.distributed is not initialized "
                    "(det.pytorch.init() initializes it from RANK/WORLD_SIZE/MASTER_ADDR)")
            if any(p.requires_grad for p in model.parameters()):
                ids = [self.device.index] if self.device.type == "cuda" else None
                wrapped = _DistributedDataParallel(model, device_ids=ids)
        if self.experimental._auto_amp:
            wrapped = self.autocast_forward_pass(wrapped)
        self.models.append(wrapped)
        return wrapped

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, backward_passes_per_step: int = 1,
                       fp16_compression: Optional[bool] = None,
                       average_aggregated_gradients: Optional[bool] = None) -> torch.optim.Optimizer:
        """Registers the optimizer (checkpointed as optimizers_state_dict[i]) and returns it.
        backward_passes_per_step and fp16_compression concern Horovod, which det does not run:
        accepted and checked, not used."""
        if isinstance(backward_passes_per_step, bool) or \
                not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
            raise InvalidExperimentException(
                "backward_passes_per_step for local gradient aggregation must be >= 1; got "
                f"{backward_passes_per_step}.")
        self._optimizer_configs[optimizer] = {
            "average_aggregated_gradients": True if average_aggregated_gradients is None
            else bool(average_aggregated_gradients)}
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler: Any, step_mode: LRScheduler.StepMode,
                          frequency: int = 1) -> Any:
        """Registers the scheduler for the training loop to step as step_mode says
        (checkpointed as lr_schedulers_state_dict[i]); returns it unchanged."""
        if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and \
                step_mode != LRScheduler.StepMode.MANUAL_STEP:
            raise InvalidExperimentException(
                "wrap_lr_scheduler: ReduceLROnPlateau can only be used with "
                "step_mode=MANUAL_STEP (step it yourself, e.g. in a callback's "
                "on_validation_end(metrics))")
        optimizer = getattr(lr_scheduler, "optimizer", None)
        if optimizer is not None and all(optimizer is not o for o in self.optimizers):
            raise InvalidExperimentException(
                "Must use an optimizer that is returned by wrap_optimizer().")
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """Registers a torch.cuda.amp.GradScaler (checkpointed as scaler_state_dict); pass
        it to step_optimizer(scaler=...). Call before wrap_model."""
        if self._scaler is not None:
            raise InvalidExperimentException("Please only call wrap_scaler once.")
        if self.models:
            raise InvalidExperimentException("Please call wrap_scaler before wrap_model.")
        self._scaler = scaler
        return scaler

    def configure_apex_amp(self, models: Any, optimizers: Any, enabled: Optional[bool] = True,
                           **_apex_options: Any) -> Any:
        """NVIDIA apex is not supported by det: with enabled=False the arguments come back as
        they are (as in Determined, where apex.amp.initialize(enabled=False) does nothing);
        else NotImplementedError saying what to use instead."""
        if not enabled:
            return models, optimizers
        raise NotImplementedError(
            "det.pytorch: configure_apex_amp (NVIDIA apex) is not supported. Use PyTorch's own "
            "AMP instead: context.experimental.use_amp() before wrap_model (automatic), or "
            "scaler = context.wrap_scaler(torch.cuda.amp.GradScaler()) with torch.autocast in "
            "the forward pass and context.step_optimizer(optimizer, scaler=scaler)")

    def autocast_forward_pass(self, to_wrap: torch.nn.Module) -> torch.nn.Module:
        """`to_wrap` with its forward pass under torch.autocast on the context's device (not
        on the CPU: as torch.cuda.amp.autocast, which Determined uses, it is disabled there)
        and its float16 outputs (in tensors, dicts, lists, tuples) cast back to float32, so
        that losses are computed outside autocast. Returns the same module, whose state_dict
        is unchanged. Used by wrap_model after experimental.use_amp()."""
        enabled = self.device.type == "cuda"
        forward = to_wrap.forward
        device_type = self.device.type

        @functools.wraps(forward)
        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device_type=device_type, enabled=enabled):
                return forward(*args, **kwargs)

        warned_types: Set[type] = set()

        def to_float32(output: Any) -> Any:
            if isinstance(output, torch.Tensor):
                return output.float() if output.dtype == torch.float16 else output
            if isinstance(output, dict):
                return {k: to_float32(v) for k, v in output.items()}
            if isinstance(output, list):
                return [to_float32(v) for v in output]
            if isinstance(output, tuple):
                return tuple(to_float32(v) for v in output)
            if type(output) not in warned_types:
                warned_types.add(type(output))
                logger.warning("autocast_forward_pass: the model returned a %s; float16 tensors "
                               "inside it stay float16", type(output).__name__)
            return output

        to_wrap.forward = autocast_forward  # type: ignore[assignment]
        to_wrap.register_forward_hook(lambda _module, _input, output: to_float32(output))
        return to_wrap

    def to_device(self, data: Any) -> Any:
        return _data.to_device(data, self.device, self._to_device_warned_types)

    # -- the training step ----------------------------------------------------------------

    def _should_communicate_and_update(self) -> bool:
        return (self._require_training() + 1) % self._aggregation_frequency == 0

    @contextlib.contextmanager
    def _no_sync(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for model in self.models:
                if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                    stack.enter_context(model.no_sync())  # type: ignore[operator]
            yield

    def backward(self, loss: torch.Tensor, gradient: Optional[torch.Tensor] = None,
                 retain_graph: bool = False, create_graph: bool = False) -> None:
        """loss.backward(...); with aggregation_frequency > 1, gradients are exchanged only on
        the batches that step the optimizers. After experimental.use_amp() the loss is scaled
        by the wrapped GradScaler first. In deterministic mode, inside train_batch, the
        Trainer back-propagates the loss itself (exact fixed-point sums; one call a batch)."""
        if self._step is not None:
            self._step.set_loss(loss, gradient, retain_graph, create_graph)
            return
        if self._scaler is not None and self.experimental._auto_amp:
            loss = self._scaler.scale(loss)
        if self.distributed.size > 1 and self._current_batch_idx is not None and \
                not self._should_communicate_and_update():
            with self._no_sync():
                loss.backward(gradient=gradient, retain_graph=retain_graph,
                              create_graph=create_graph)
        else:
            loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step_optimizer(self, optimizer: torch.optim.Optimizer,
                       clip_grads: Optional[Callable[[Any], None]] = None,
                       auto_zero_grads: bool = True, scaler: Optional[Any] = None) -> None:
        """Steps `optimizer` on the batches that end an aggregation window (every batch by
        default): gradients averaged over the window, clip_grads(params), step (through
        `scaler` when given), zero_grad() when auto_zero_grads. In deterministic mode, inside
        train_batch, the step runs once the global batch's exact mean gradient is in .grad."""
        if self._step is not None:
            self._step.steps.append((optimizer, clip_grads, auto_zero_grads, scaler))
            return
        if self._aggregation_frequency > 1 and not auto_zero_grads:
            raise InvalidExperimentException("if optimizations.aggregation_frequency is larger "
                                             "than 1, auto_zero_grads must be set to true.")
        if self._current_batch_idx is not None and not self._should_communicate_and_update():
            return
        params = [p for group in optimizer.param_groups for p in group.get("params", [])]
        config = self._optimizer_configs.get(optimizer, {"average_aggregated_gradients": True})
        if config["average_aggregated_gradients"] and self._aggregation_frequency > 1:
            for p in params:
                if p.grad is not None:
                    p.grad.data.div_(float(self._aggregation_frequency))
        if scaler is None and self.experimental._auto_amp:
            scaler = self._scaler
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads(params)
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()


class _DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """DDP that forwards unknown attributes to the wrapped module (as Determined's does)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def _config_from_spec(info: Any) -> Dict[str, Any]:
    """The experiment config as far as the trial spec carries it (det's workers read the
    spec, not the user's copy of the config)."""
    t = info.trial
    searcher = t.spec.searcher
    return {
        "hyperparameters": dict(t.hparams),
        "data": dict(t.user_data),
        "searcher": {"metric": t.searcher_metric, "smaller_is_better": t.smaller_is_better,
                     "max_length": {t.length_unit(): int(searcher.max_length_value)}},
        "records_per_epoch": t.records_per_epoch,
        "scheduling_unit": int(t.spec.scheduling_unit),
        "min_validation_period": {"batches": t.validation_period},
        "min_checkpoint_period": {"batches": t.checkpoint_period},
        "checkpoint_policy": t.checkpoint_policy or "best",
        "optimizations": {"aggregation_frequency": int(t.spec.aggregation_frequency or 1),
                          "average_training_metrics": bool(t.spec.average_training_metrics)},
        "reproducibility": {"deterministic": t.deterministic},
    }


def _set_random_seeds(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.random.manual_seed(seed)


def _latest_steps_completed(checkpoint_path: Optional[str]) -> int:
    """The batch the trial's latest checkpoint was taken at (its metadata.json's
    steps_completed), what get_initial_batch() answers before fit() reads the checkpoint
    itself; 0 on a first run or when the metadata cannot be read (logged)."""
    if not checkpoint_path:
        return 0
    metadata = os.path.join(checkpoint_path, "metadata.json")
    try:
        with open(metadata) as f:
            steps = json.load(f).get("steps_completed", 0)
    except (OSError, ValueError, AttributeError) as e:
        logger.warning("cannot read the latest checkpoint's batch from %s (%s): "
                       "get_initial_batch() says 0 until the Trainer restores it", metadata, e)
        return 0
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else 0


@contextlib.contextmanager
def init(*, hparams: Optional[Dict[str, Any]] = None, exp_conf: Optional[Dict[str, Any]] = None,
         distributed: Optional[core.DistributedContext] = None, aggregation_frequency: int = 1,
         enable_tensorboard_logging: bool = True,
         checkpoint_storage: Optional[str] = None) -> Iterator[PyTorchTrialContext]:
    """A PyTorchTrialContext over det.core.init(); use as `with det.pytorch.init() as ctx:`.

    In a det allocation: with more than one rank (WORLD_SIZE > 1) and torch.distributed not
    yet initialized, it initializes the default process group from the environment (NCCL on
    CUDA slots, else Gloo) and destroys it on exit; random, numpy and torch are seeded with
    the trial seed; hparams defaults to the trial's and exp_conf to the config the trial spec
    carries. Outside one (no DET_MASTER): local training, one rank unless the environment or
    `distributed` says more; checkpoints go to `checkpoint_storage` (det's addition; default
    $TMPDIR/det-checkpoints)."""
    info = det.get_cluster_info()
    created_group = False
    if distributed is None:
        world = int(os.environ.get("WORLD_SIZE", "1") or "1")
        if world > 1:
            if not torch.distributed.is_initialized():
                cuda = torch.cuda.is_available() and (info is None or info.slot_type == "cuda")
                torch.distributed.init_process_group("nccl" if cuda else "gloo")
                created_group = True
            distributed = core.DistributedContext.from_torch_distributed()
    trial_seed: Optional[int] = None
    steps_completed = 0
    if info is not None:
        steps_completed = _latest_steps_completed(info.latest_checkpoint_path)
        trial_seed = info.trial.trial_seed
        hparams = hparams if hparams is not None else dict(info.trial.hparams)
        exp_conf = exp_conf if exp_conf is not None else _config_from_spec(info)
        num_gpus = len(info.slot_ids) if info.slot_type == "cuda" else 0
        _set_random_seeds(trial_seed)
    else:
        num_gpus = torch.cuda.device_count()
    with core.init(distributed=distributed,
                   preempt_mode=core.PreemptMode.WorkersAskChief,
                   checkpoint_storage=checkpoint_storage) as core_context:
        context = PyTorchTrialContext(
            core_context=core_context, trial_seed=trial_seed, hparams=hparams,
            slots_per_trial=core_context.distributed.get_size(), num_gpus=num_gpus,
            exp_conf=exp_conf, aggregation_frequency=aggregation_frequency,
            steps_completed=steps_completed,
            enable_tensorboard_logging=enable_tensorboard_logging)
        try:
            yield context
        finally:
            # DDP's reducer must go before the process group: destroyed after it (at the
            # process's exit), torch 1.13 aborts ("terminate called without an active
            # exception", seen 1 run in 20 of trial_test). The context lets go of what it
            # wrapped (also when leaving with an exception: det.InvalidHP ends in exit 0);
            # the caller should drop its trial before leaving the `with` block (det.pytorch.run
            # does).
            if context._tensorboard_writer is not None:
                context._tensorboard_writer.close()
            context.models.clear()
            context.optimizers.clear()
            gc.collect()
    if created_group and torch.distributed.is_initialized():
        # Every rank is done before any closes its connections: Gloo aborts a process whose
        # peer goes away while its last collective's bytes are in flight. (After an
        # exception the group is left to the process's exit: the peers may be gone.)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
