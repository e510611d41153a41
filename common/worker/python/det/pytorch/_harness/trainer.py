"""Trainer (Determined's determined.pytorch.Trainer): det's training loop for a PyTorchTrial
over the Core API: periods of reports, validations and checkpoints, checkpoints that resume
mid-epoch at the next batch, preemption, and the searcher's length."""

import contextlib
import inspect
import json
import logging
import pathlib
import pickle
import os
import random
import shutil
import sys
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple, cast

import numpy as np
import torch
import torch.distributed

from det import core

from . import data as _data, reducer as _reducer, tensorboard as _tensorboard
from .callback import PyTorchCallback
from .context import PyTorchTrialContext, _DeterministicStep
from .errors import InvalidExperimentException, InvalidHP
from .lr_scheduler import LRScheduler
from .trial import PyTorchTrial, _overrides, _takes_batch_idx
from .units import Batch, Epoch, TrainUnit

logger = logging.getLogger("det.pytorch")

STATE_DICT_FILE = "state_dict.pth"
TRIAL_STATE_FILE = "trial_state.pkl"
LOAD_DATA_FILE = "load_data.json"
# The model definition saved with each checkpoint (Determined's code/): the working
# directory, which in a det allocation is the experiment's context directory.
CODE_DIR = "code"
# Above these (det's limits of a context directory) the code is not copied (logged).
_CODE_MAX_FILES = 10000
_CODE_MAX_BYTES = 64 << 20


def _code_files(root: pathlib.Path, skip: List[pathlib.Path]) -> Optional[List[pathlib.Path]]:
    """The files under `root` to save as the model definition (not __pycache__, hidden
    entries or the directories in `skip`), relative to it; None when there are more than
    det's context limits allow."""
    files: List[pathlib.Path] = []
    total = 0
    skipped = {os.path.realpath(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".")
                             and os.path.realpath(os.path.join(dirpath, d)) not in skipped)
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = pathlib.Path(dirpath, name)
            try:
                total += full.stat().st_size
            except OSError:
                continue  # A dangling link.
            files.append(full.relative_to(root))
            if len(files) > _CODE_MAX_FILES or total > _CODE_MAX_BYTES:
                return None
    return files


def _write_code(dest: pathlib.Path, skip: List[pathlib.Path]) -> None:
    root = pathlib.Path.cwd()
    files = _code_files(root, skip)
    if files is None:
        logger.warning("the working directory %s holds more than %d files or %d MiB: its "
                       "model definition is not saved in the checkpoint's %s/", root,
                       _CODE_MAX_FILES, _CODE_MAX_BYTES >> 20, CODE_DIR)
        return
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, dest / rel)


class Trainer:
    """Trains `trial` with `context` (from det.pytorch.init())."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self._trial = trial
        self._context = context
        self._info = context._core.info

    def configure_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Deprecated in Determined (0.30); a no-op."""
        logger.warning("Trainer.configure_profiler is deprecated and does nothing")

    def fit(self, checkpoint_period: Optional[TrainUnit] = None,
            validation_period: Optional[TrainUnit] = None,
            max_length: Optional[TrainUnit] = None,
            reporting_period: TrainUnit = Batch(100),  # noqa: B008 (immutable in use)
            checkpoint_policy: str = "best", latest_checkpoint: Optional[str] = None,
            step_zero_validation: bool = False, test_mode: bool = False,
            profiling_enabled: bool = False) -> None:
        """Trains to max_length (on a cluster, None means the searcher's length), validating
        and checkpointing every validation_period / checkpoint_period and after the last
        batch, reporting training metrics every reporting_period. latest_checkpoint (a
        storage id or path; on a cluster, by default the trial's latest) is resumed at its
        next batch. checkpoint_policy "best" / "all" / "none": checkpoint also after
        validations that beat the trial's best / after every validation / never. test_mode
        (local only): one batch of training, one of validation, a checkpoint."""
        local = self._info is None
        checkpoint_period = checkpoint_period or Batch(sys.maxsize)
        validation_period = validation_period or Batch(sys.maxsize)
        if checkpoint_policy not in ("best", "all", "none"):
            raise ValueError(f"checkpoint_policy must be 'best', 'all' or 'none', got "
                             f"{checkpoint_policy!r}")
        if max_length is not None and (not isinstance(max_length, TrainUnit) or
                                       not isinstance(max_length.value, int)):
            raise TypeError("max_length must be configured in TrainUnit(int) types.")
        if profiling_enabled:
            logger.warning("det.pytorch: profiling_enabled is ignored (det reports timings "
                           "with the training metrics)")
        if local:
            if checkpoint_policy == "best":
                logger.warning("checkpoint_policy='best' is not supported in local training "
                               "mode. Falling back to 'all'.")
                checkpoint_policy = "all"
            if max_length is None:
                raise ValueError("max_length must be defined in local training mode.")
            searcher_metric, smaller_is_better = None, True
        else:
            if test_mode:
                raise ValueError("test_mode is only supported in local training mode.")
            if max_length is None and not self._info.trial.has_length():
                raise ValueError(
                    "fit(max_length=None) trains to the searcher's length, and this "
                    "experiment's searcher has none (searcher.max_length is optional, as in "
                    "Determined 0.38): pass max_length=Batch(N) or Epoch(N), or set "
                    "searcher.max_length")
            if latest_checkpoint is None and self._info.latest_checkpoint is not None:
                logger.info("resuming from the trial's latest checkpoint %s",
                            self._info.latest_checkpoint)
                latest_checkpoint = self._info.latest_checkpoint
            searcher_metric = self._info.trial.searcher_metric or None
            smaller_is_better = self._info.trial.smaller_is_better
        _Controller(self._trial, self._context, local=local,
                    checkpoint_period=checkpoint_period, validation_period=validation_period,
                    reporting_period=reporting_period, max_length=max_length,
                    checkpoint_policy=checkpoint_policy, latest_checkpoint=latest_checkpoint,
                    step_zero_validation=step_zero_validation, test_mode=test_mode,
                    searcher_metric=searcher_metric,
                    smaller_is_better=smaller_is_better).run()


class _ShouldExit(Exception):
    def __init__(self, skip_exit_checkpoint: bool = False) -> None:
        super().__init__("should exit")
        self.skip_exit_checkpoint = skip_exit_checkpoint


def _fresh_state(trial_id: int) -> Dict[str, Any]:
    return {"trial_id": trial_id, "last_ckpt": 0, "step_id": 0, "last_val": 0,
            "batches_trained": 0, "epochs_trained": 0}


def _torch_load(path: pathlib.Path) -> Any:
    # torch >= 2.6 loads tensors only by default; a checkpoint also holds RNG states.
    if "weights_only" in inspect.signature(torch.load).parameters:
        return torch.load(str(path), map_location="cpu", weights_only=False)
    return torch.load(str(path), map_location="cpu")


def _any_rank(dist: Any, device: torch.device, flags: List[bool]) -> List[bool]:
    """Each of `flags` or-ed over every rank of `dist`, in one collective: a tensor
    all-reduce (MAX) over the torch process group when dist's collectives go over it (on
    `device` when the group is NCCL's), else one allgather of the list."""
    return _start_any_rank(dist, device, flags)[0]()


def _start_any_rank(dist: Any, device: torch.device,
                    flags: List[bool]) -> Tuple[Callable[[], List[bool]], bool]:
    """_any_rank started: a function that waits for its answer, and whether the collective
    is still running (over the torch process group the all-reduce runs while the caller
    goes on; the allgather is done at once). Every rank must start and wait for the same
    checks in the same order."""
    if dist._torch_ready():
        backend = torch.distributed.get_backend()
        on = device if backend == "nccl" else torch.device("cpu")
        votes = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=on)
        work = torch.distributed.all_reduce(votes, op=torch.distributed.ReduceOp.MAX,
                                            async_op=True)

        def wait() -> List[bool]:
            work.wait()
            return [bool(v) for v in votes.tolist()]
        return wait, True
    answer = [any(column) for column in zip(*dist.allgather(list(flags)))]
    return (lambda: answer), False


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _load_model_state(model: torch.nn.Module, state: Dict[str, Any]) -> None:
    """Loads `state` into `model`, with or without DDP's "module." prefix on either side."""
    prefix = "module."
    if state and all(k.startswith(prefix) for k in state):
        state = {k[len(prefix):]: v for k, v in state.items()}
    _unwrapped(model).load_state_dict(state)


class _Controller:
    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext, *, local: bool,
                 checkpoint_period: TrainUnit, validation_period: TrainUnit,
                 reporting_period: TrainUnit, max_length: Optional[TrainUnit],
                 checkpoint_policy: str, latest_checkpoint: Optional[str],
                 step_zero_validation: bool, test_mode: bool, searcher_metric: Optional[str],
                 smaller_is_better: bool) -> None:
        if not isinstance(trial, PyTorchTrial):
            raise TypeError("Trainer requires a det.pytorch.PyTorchTrial.")
        self.trial = trial
        self.context = context
        self.core = context._core
        self.dist = context.distributed
        self.is_chief = self.dist.rank == 0
        self.local = local
        self.checkpoint_period = checkpoint_period
        self.validation_period = validation_period
        self.reporting_period = reporting_period
        self.max_length = max_length
        self.checkpoint_policy = checkpoint_policy
        self.latest_checkpoint = latest_checkpoint
        self.step_zero_validation = step_zero_validation
        self.test_mode = test_mode
        self.searcher_metric = searcher_metric
        self.smaller_is_better = smaller_is_better
        self.trial_id = 0 if local else context.get_trial_id()
        info = self.core.info
        self.seed = info.trial.trial_seed if info is not None else 0
        self.state = _fresh_state(self.trial_id)
        # DeterministicDDP in deterministic mode (built by run()), else None.
        self.deterministic: Any = None
        self.best_validation: Optional[float] = None
        # A training batch fetched during the last stop check, not yet trained (0 or 1).
        self._fetched: List[Any] = []
        self.last_checkpoint_uuid: Optional[str] = None
        self.callbacks: Dict[str, PyTorchCallback] = trial.build_callbacks()
        if not context.models:
            raise InvalidExperimentException("Must have at least one model. This might be caused "
                                             "by not wrapping your model with wrap_model().")
        if not context.optimizers:
            raise InvalidExperimentException(
                "Must have at least one optimizer. This might be caused by not wrapping your "
                "optimizer with wrap_optimizer().")
        self.evaluate_batch_defined = _overrides(trial, "evaluate_batch")
        if self.evaluate_batch_defined == _overrides(trial, "evaluate_full_dataset"):
            raise InvalidExperimentException(
                "Please define exactly one of: `evaluate_batch()` or `evaluate_full_dataset()`. "
                "For most use cases `evaluate_batch()` is recommended because it can be "
                "parallelized across all devices.")

    # -- setup ----------------------------------------------------------------------------

    def _checkpoint_dir(self) -> ContextManager[pathlib.Path]:
        return self.core.checkpoint.restore_path(self.latest_checkpoint)

    def _read_trial_state(self) -> None:
        """The trial state of latest_checkpoint (batches trained, ...), before anything is
        built: the data loaders start where it says."""
        if self.latest_checkpoint is None:
            return
        with self._checkpoint_dir() as path:
            state_file = pathlib.Path(path) / TRIAL_STATE_FILE
            if not state_file.exists():
                return
            with state_file.open("rb") as f:
                state = pickle.load(f)
        if state.get("trial_id") != self.trial_id:
            # Another trial's checkpoint: its weights, a fresh start.
            return
        self.state = {**_fresh_state(self.trial_id),
                      **{k: v for k, v in state.items() if k in _fresh_state(0)}}
        self.best_validation = state.get("best_validation")
        self.context._steps_completed = self.state["batches_trained"]

    def _build_loaders(self) -> None:
        train = self.trial.build_training_data_loader()
        self._check_loader("build_training_data_loader", train)
        self.training = _data._TrainingBatches(train, self.dist.rank, self.dist.size,
                                               self.seed, self.state["batches_trained"])
        epoch_len: int = self.dist.broadcast(self.training.epoch_len)
        self.context._epoch_len = epoch_len
        if epoch_len < 1:
            raise ValueError("the training data loader has no batches per epoch")
        validation = self.trial.build_validation_data_loader()
        self.validation_loader: Any = None
        if self.evaluate_batch_defined:
            self._check_loader("build_validation_data_loader", validation)
            self.validation_loader = (validation.get_data_loader(
                num_replicas=self.dist.size, rank=self.dist.rank)
                if isinstance(validation, _data.DataLoader) else validation)
        elif self.is_chief:
            self._check_loader("build_validation_data_loader", validation)
            self.validation_loader = (validation.get_data_loader()
                                      if isinstance(validation, _data.DataLoader) else validation)

    def _check_loader(self, what: str, loader: Any) -> None:
        if isinstance(loader, _data.DataLoader):
            return
        if not isinstance(loader, torch.utils.data.DataLoader):
            raise TypeError(f"{what}() must return a det.pytorch.DataLoader, got "
                            f"{type(loader).__name__}")
        if not self.context.experimental._data_repro_checks_disabled:
            raise RuntimeError(
                f"{what}() returned a torch.utils.data.DataLoader: det cannot shard it by rank "
                "or resume it mid-epoch. Return a det.pytorch.DataLoader, or call "
                "context.experimental.disable_dataset_reproducibility_checks() to use it as is.")

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        self._read_trial_state()
        with contextlib.ExitStack() as stack:
            for callback in self.callbacks.values():
                callback.on_trial_startup(self.state["batches_trained"], self.latest_checkpoint)
                stack.callback(callback.on_trial_shutdown)
            self._build_loaders()
            self.batches = iter(self.training)
            stack.callback(self._close_batches)
            if self.latest_checkpoint is not None:
                logger.info("Restoring trial from checkpoint %s", self.latest_checkpoint)
                with self._checkpoint_dir() as path:
                    self._load(pathlib.Path(path))
            self.deterministic = self._deterministic_ddp()
            for callback in self.callbacks.values():
                callback.on_training_start()
            if self.context.profiler is not None:
                stack.enter_context(self.context.profiler)
            self._run()

    def _deterministic_ddp(self) -> Any:
        """In deterministic mode (reproducibility.deterministic), the DeterministicDDP over
        every wrapped model that trains each global batch as the same micro-batches of
        hyperparameters.micro_batch_size samples at any rank count, with exact fixed-point
        sums of their gradients (docs/pytorch-data-and-determinism.md); else None. Built
        after the checkpoint is loaded (it broadcasts rank 0's parameters)."""
        ctx = self.context
        if not ctx._deterministic:
            return None
        what = "deterministic mode (reproducibility.deterministic)"
        if ctx._aggregation_frequency != 1:
            raise InvalidExperimentException(
                f"{what} needs optimizations.aggregation_frequency: 1, got "
                f"{ctx._aggregation_frequency}")
        if ctx._scaler is not None:
            raise InvalidExperimentException(f"{what} does not support AMP (wrap_scaler/use_amp)")
        if self.training.sampler is None:
            raise InvalidExperimentException(
                f"{what} needs build_training_data_loader() to return a det.pytorch.DataLoader "
                "with a batch_size and no custom sampler or batch_sampler (det's elastic order "
                "gives every rank count the same global batches)")
        from ..deterministic import DeterministicDDP
        models = torch.nn.ModuleList([_unwrapped(m) for m in ctx.models])
        try:
            return DeterministicDDP(models, self.training.sampler.global_batch_size,
                                    ctx._micro_batch_size, rng_seed=self.seed)
        except ValueError as e:
            raise InvalidExperimentException(
                f"{what}: {e} (hyperparameters.micro_batch_size is "
                f"{ctx._micro_batch_size})") from None

    def _close_batches(self) -> None:
        # Shuts down the DataLoader's worker processes now, not at garbage collection.
        self._fetched.clear()
        del self.batches

    def _length(self) -> TrainUnit:
        """What to train to: max_length (one batch in test mode), else the searcher's target
        for this run in batches (det's master judges the trial at that batch)."""
        if self.test_mode:
            return Batch(1)
        if self.max_length is not None:
            return self.max_length
        trial = self.core.info.trial
        if trial.length_unit() == "epochs" and trial.batches_per_epoch and \
                trial.batches_per_epoch != self.context._epoch_len:
            logger.warning("searcher.max_length is in epochs of %d batches (records_per_epoch / "
                           "global_batch_size) but the training data loader has %d batches per "
                           "epoch: det trains to the searcher's %d batches",
                           trial.batches_per_epoch, self.context._epoch_len,
                           trial.target_batches)
        return Batch(int(trial.target_batches))

    def _run(self) -> None:
        try:
            if self.step_zero_validation and self.state["batches_trained"] == 0:
                self._validate()
            self._train_to(self._length())
        except _ShouldExit as e:
            if not e.skip_exit_checkpoint and not self._checkpoint_is_current():
                self._checkpoint()
        except InvalidHP:
            if not self._checkpoint_is_current():
                self._checkpoint()
            raise

    def _steps_until_complete(self, length: TrainUnit) -> int:
        done = self.state["epochs_trained"] if isinstance(length, Epoch) else \
            self.state["batches_trained"]
        return length.value - done

    def _checkpoint_is_current(self) -> bool:
        return self.state["last_ckpt"] == self.state["batches_trained"]

    def _validation_is_current(self) -> bool:
        return self.state["last_val"] == self.state["batches_trained"]

    def _train_to(self, length: TrainUnit) -> None:
        boundaries = [("train", length), ("validate", self.validation_period),
                      ("checkpoint", self.checkpoint_period), ("report", self.reporting_period)]
        while self._steps_until_complete(length) > 0:
            reached, metrics, stop = self._train_window(boundaries, length)
            self._report_training(metrics)
            if stop:
                raise _ShouldExit()
            progressed = False
            for kind in reached:
                if kind in ("train", "report") and not progressed:
                    self._report_progress(length)
                    progressed = True
                elif kind == "validate" and not self._validation_is_current():
                    self._validate()
                elif kind == "checkpoint" and not self._checkpoint_is_current():
                    self._checkpoint()
            if self._stop_requested():
                raise _ShouldExit()
        if not self._validation_is_current():
            self._validate()
        if not self._checkpoint_is_current():
            self._checkpoint()

    def _stop_requested(self) -> bool:
        """Whether to checkpoint and exit: preemption (should_preempt(): the chief's answer or
        any rank's SIGTERM) or context.set_stop_requested(True) on any rank."""
        return self._start_stop_check()[0]()

    def _start_stop_check(self) -> Tuple[Callable[[], bool], bool]:
        """_stop_requested started: a function that answers it, and whether the ranks are
        still exchanging their flags (then the caller can do other work before asking).
        Every rank asks after every batch; with several ranks both questions go in one
        collective of two flags (a tensor all-reduce over the torch process group), which
        costs a fraction of should_preempt()'s and an allgather's object collectives (four
        allgathers a batch: docs/performance.md, the Trial runner's cost), and only a stop
        sends the reasons. The flags are this rank's as of the call."""
        preempt = self.core.preempt
        stop = self.context.get_stop_requested()
        if self.dist.size == 1 or preempt._mode != core.PreemptMode.WorkersAskChief:
            answer = preempt.should_preempt() or (
                any(self.dist.allgather(stop)) if self.dist.size > 1 else stop)
            return (lambda: answer), False
        vote = preempt._vote()
        votes, in_flight = _start_any_rank(self.dist, self.context.device, [vote, stop])

        def wait() -> bool:
            any_vote, any_stop = votes()
            if any_vote:
                preempt._agree(self.dist.allgather((vote, preempt.reason)))
            return any_vote or any_stop
        return wait, in_flight

    def _next_batch(self) -> Any:
        """The next training batch: the one fetched ahead during the last stop check, else
        the loader's next."""
        if self._fetched:
            return self._fetched.pop()
        with self.core.train.timer("dataloader_next"):
            return next(self.batches)

    def _train_window(self, boundaries: List[Tuple[str, TrainUnit]],
                      length: TrainUnit) -> Tuple[List[str], List[Any], bool]:
        """Trains until a boundary is reached (or a stop is asked); which were reached, the
        per-batch metrics of this rank, and whether to stop."""
        for model in self.context.models:
            model.train()
        self.context.reset_reducers()
        epoch_len = self.context._require_epoch_len()
        metrics: List[Any] = []
        while True:
            batch_idx = self.state["batches_trained"]
            epoch_idx, in_epoch = divmod(batch_idx, epoch_len)
            batch = self._next_batch()
            self.context._current_batch_idx = batch_idx
            if in_epoch == 0:
                for callback in self.callbacks.values():
                    callback.on_training_epoch_start(epoch_idx)
            metrics.append(self._train_batch(batch, epoch_idx, batch_idx))
            if self.context.profiler is not None:
                self.context.profiler.step()
            self.state["batches_trained"] += 1
            epoch_end = in_epoch == epoch_len - 1
            if epoch_end:
                for callback in self.callbacks.values():
                    callback.on_training_epoch_end(epoch_idx)
                self.state["epochs_trained"] += 1
            reached = []
            for kind, unit in boundaries:
                if isinstance(unit, Epoch):
                    hit = epoch_end and unit.should_stop(epoch_idx + 1)
                else:
                    hit = unit.should_stop(batch_idx + 1)
                if kind == "train":
                    hit = hit or self.test_mode or self._steps_until_complete(length) <= 0
                if hit:
                    reached.append(kind)
            stop, in_flight = self._start_stop_check()
            if in_flight and not reached:
                # While the ranks exchange their flags, the batch to train next unless they
                # stop (then it goes unused: a resume starts at batches_trained, whatever
                # the loader has read).
                with self.core.train.timer("dataloader_next"):
                    self._fetched.append(next(self.batches))
            if stop():
                return reached, metrics, True
            if reached:
                return reached, metrics, False

    def _train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        """train_batch's metrics of this batch (in deterministic mode, the list of its
        micro-batches' metrics)."""
        # The phases' timings go with the next training report (group "timings"), as
        # Determined's PyTorchTrial profiler names them.
        timer = self.core.train.timer
        if self.context.experimental._auto_to_device:
            with timer("to_device"):
                batch = self.context.to_device(batch)
        if self.deterministic is not None:
            with timer("train_batch"):
                micro_metrics = self._train_micro_batches(batch, epoch_idx, batch_idx)
            if self.context.lr_schedulers:
                with timer("step_lr_schedulers"):
                    for scheduler in self.context.lr_schedulers:
                        self._step_lr_scheduler(batch_idx, scheduler)
            return micro_metrics
        with timer("train_batch"):
            out = self.trial.train_batch(batch=batch, epoch_idx=epoch_idx, batch_idx=batch_idx)
        if isinstance(out, torch.Tensor):
            out = {"loss": out}
        if self.context.experimental._auto_amp and self.context._should_communicate_and_update():
            # experimental.use_amp(): the scaler stepped every optimizer of this batch.
            self.context._scaler.update()
        if self.context.lr_schedulers:
            with timer("step_lr_schedulers"):
                for scheduler in self.context.lr_schedulers:
                    self._step_lr_scheduler(batch_idx, scheduler)
        with timer("from_device"):
            return _data._numbers(f"train_batch (batch {batch_idx})", out)

    def _train_micro_batches(self, batch: Any, epoch_idx: int,
                             batch_idx: int) -> List[Dict[str, float]]:
        """Deterministic mode: train_batch once per micro-batch of this rank's slice, its
        context.backward(loss) captured and back-propagated by DeterministicDDP (exact sums
        across micro-batches and ranks), then its step_optimizer calls run once; the
        micro-batches' metrics."""
        ctx = self.context
        step = ctx._step = _DeterministicStep()
        metrics: List[Dict[str, float]] = []

        def loss_fn(index: torch.Tensor) -> torch.Tensor:
            lo = int(index[0])
            step.begin()
            out = self.trial.train_batch(batch=_data._slice(batch, lo, lo + len(index)),
                                         epoch_idx=epoch_idx, batch_idx=batch_idx)
            if isinstance(out, torch.Tensor):
                out = {"loss": out}
            metrics.append(_data._numbers(f"train_batch (batch {batch_idx})", out))
            return step.take_loss(batch_idx)

        try:
            self.deterministic.backward(torch.arange(_data.data_length(batch)), loss_fn,
                                        step=batch_idx)
        finally:
            ctx._step = None
        for optimizer, clip_grads, auto_zero_grads, scaler in step.steps:
            ctx.step_optimizer(optimizer, clip_grads=clip_grads, auto_zero_grads=auto_zero_grads,
                               scaler=scaler)
        return metrics

    def _step_lr_scheduler(self, batch_idx: int, scheduler: LRScheduler) -> None:
        if not self.context._should_communicate_and_update():
            return  # Never between optimizer steps.
        mode, freq = scheduler._step_mode, scheduler._frequency
        aggregation = self.context._aggregation_frequency
        if mode == LRScheduler.StepMode.STEP_EVERY_BATCH:
            for i in range(batch_idx - aggregation + 1, batch_idx + 1):
                if (i + 1) % freq == 0:
                    scheduler.step()
        elif mode == LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
            if (batch_idx + 1) % freq == 0:
                scheduler.step()
        elif mode == LRScheduler.StepMode.STEP_EVERY_EPOCH:
            # Step for each epoch that ends before the next optimizer step.
            epoch_len = self.context._require_epoch_len()
            for e in range(batch_idx // epoch_len, (batch_idx + aggregation) // epoch_len):
                if (e + 1) % freq == 0:
                    scheduler.step()

    # -- reports --------------------------------------------------------------------------

    def _report_training(self, batch_metrics: List[Any]) -> None:
        avg, per_batch = _reducer.average_training(self.dist.allgather, batch_metrics,
                                                   micro_batches=self.deterministic is not None)
        avg.update(self._numbers("training", self.context.reduce_metrics(for_training=True)))
        if self.is_chief and avg:
            # As Determined's Trial API: the trial's batches and epochs go with every report
            # (unless the trial reports its own).
            avg["batches"] = avg.get("batches", self.state["batches_trained"])
            avg["epochs"] = avg.get("epochs", self.state["epochs_trained"])
            self._log_tensorboard("training", avg)
            self.core.train.report_training_metrics(
                steps_completed=self.state["batches_trained"], metrics=avg)
        for callback in self.callbacks.values():
            callback.on_training_workload_end(avg_metrics=avg, batch_metrics=per_batch)

    def _log_tensorboard(self, group: str, metrics: Dict[str, Any]) -> None:
        """Before the report: det.core copies the TensorBoard directory after each report."""
        if self.context.get_enable_tensorboard_logging():
            _tensorboard.log_metrics(self.context.get_tensorboard_writer(), group,
                                     self.state["batches_trained"], metrics)

    def _numbers(self, what: str, metrics: Dict[str, Any]) -> Dict[str, float]:
        return _data._numbers(f"{what} reducer", metrics)

    def _report_progress(self, length: TrainUnit) -> None:
        if not self.is_chief or self.local:
            return
        done = self.state["epochs_trained"] if isinstance(length, Epoch) else \
            self.state["batches_trained"]
        self.core.train.report_progress(min(1.0, done / max(1, cast(int, length.value))))

    @torch.no_grad()
    def _validate(self) -> Dict[str, float]:
        self.context.reset_reducers()
        for model in self.context.models:
            model.eval()
        for callback in self.callbacks.values():
            callback.on_validation_start()
        metrics: Dict[str, float] = {}
        if self.evaluate_batch_defined:
            for callback in self.callbacks.values():
                callback.on_validation_epoch_start()
            with_idx = _takes_batch_idx(self.trial.evaluate_batch)
            batch_metrics: List[Dict[str, float]] = []
            keys = None
            for idx, batch in enumerate(self.validation_loader):
                if self.context.experimental._auto_to_device:
                    batch = self.context.to_device(batch)
                out = (self.trial.evaluate_batch(batch, idx) if with_idx
                       else self.trial.evaluate_batch(batch))  # type: ignore[call-arg]
                values = _data._numbers(f"evaluate_batch (batch {idx})", out)
                if keys is None:
                    keys = list(values)
                elif set(keys) != set(values):
                    raise ValueError("Validation metric names must match across all batches of "
                                     f"data: {sorted(keys)} != {sorted(values)}.")
                batch_metrics.append(values)
                if self.test_mode:
                    break
            for callback in self.callbacks.values():
                callback.on_validation_epoch_end(batch_metrics)
            metrics, total = _reducer.reduce_validation(
                self.dist.allgather, batch_metrics, self.trial.evaluation_reducer())
            if total == 0:
                raise RuntimeError("validation_loader is empty.")
        elif self.is_chief:
            out = self.trial.evaluate_full_dataset(data_loader=self.validation_loader)
            if not isinstance(out, dict):
                raise TypeError(f"evaluate_full_dataset() must return a dictionary, got "
                                f"{type(out).__name__}.")
            metrics = _data._numbers("evaluate_full_dataset", out)
        metrics.update(self._numbers("validation", self.context.reduce_metrics(for_training=False)))
        metrics = self.dist.broadcast(metrics)
        for callback in self.callbacks.values():
            callback.on_validation_end(metrics)
        self.state["last_val"] = self.state["batches_trained"]
        # As Determined's Trial API: the trial's batches and epochs go with every validation
        # (unless the trial reports its own), so that searcher.time_metric can name them.
        metrics["batches"] = metrics.get("batches", self.state["batches_trained"])
        metrics["epochs"] = metrics.get("epochs", self.state["epochs_trained"])

        searcher_value = None
        if self.searcher_metric:
            if self.searcher_metric not in metrics:
                raise RuntimeError(
                    f"Search method is configured to use metric '{self.searcher_metric}' but "
                    f"model definition returned validation metrics {sorted(metrics)}. The metric "
                    "used by the search method must be one of the validation metrics returned "
                    "by the model definition.")
            searcher_value = metrics[self.searcher_metric]
        better = searcher_value is not None and (
            self.best_validation is None or
            (searcher_value < self.best_validation if self.smaller_is_better
             else searcher_value > self.best_validation))
        if better:
            self.best_validation = searcher_value
        if self.is_chief:
            self._log_tensorboard("validation", metrics)
            self.core.train.report_validation_metrics(
                steps_completed=self.state["batches_trained"], metrics=metrics)
        if not self._checkpoint_is_current() and (
                self.checkpoint_policy == "all" or (self.checkpoint_policy == "best" and better)):
            self._checkpoint()
        return metrics

    # -- checkpoints ----------------------------------------------------------------------

    def _checkpoint(self) -> None:
        self.state["last_ckpt"] = self.state["batches_trained"]
        uuid = ""
        if self.is_chief:
            metadata = {"steps_completed": self.state["batches_trained"],
                        "framework": f"torch-{torch.__version__}", "format": "pickle"}
            with self.core.checkpoint.store_path(metadata) as (path, storage_id):
                self._save(pathlib.Path(path))
                uuid = storage_id
        uuid = self.dist.broadcast(uuid)
        self.last_checkpoint_uuid = uuid
        for callback in self.callbacks.values():
            callback.on_checkpoint_upload_end(uuid=uuid)

    def _save(self, path: pathlib.Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        rng_state = {"cpu_rng_state": torch.random.get_rng_state(),
                     "np_rng_state": np.random.get_state(),
                     "random_rng_state": random.getstate()}
        if self.context.device.type == "cuda":
            rng_state["gpu_rng_state"] = torch.cuda.get_rng_state(self.context.device)
        checkpoint: Dict[str, Any] = {
            "models_state_dict": [_unwrapped(m).state_dict() for m in self.context.models],
            "optimizers_state_dict": [o.state_dict() for o in self.context.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in self.context.lr_schedulers],
            "callbacks": {name: c.state_dict() for name, c in self.callbacks.items()},
            "rng_state": rng_state,
        }
        if self.context._scaler is not None:
            checkpoint["scaler_state_dict"] = self.context._scaler.state_dict()
        for callback in self.callbacks.values():
            callback.on_checkpoint_save_start(checkpoint)
        torch.save(checkpoint, str(path / STATE_DICT_FILE))
        state = dict(self.state, best_validation=self.best_validation,
                     data_position=self.training.position(self.state["batches_trained"]))
        with (path / TRIAL_STATE_FILE).open("wb") as f:
            pickle.dump(state, f)
        trial_cls = type(self.trial)
        module, in_main = trial_cls.__module__, trial_cls.__module__ == "__main__"
        if in_main:
            # Defined in the entrypoint script: loaded later by the script's module name.
            main_file = getattr(sys.modules["__main__"], "__file__", None) or ""
            module = pathlib.Path(main_file).stem
        with (path / LOAD_DATA_FILE).open("w") as f:
            json.dump({"trial_type": "PyTorchTrial",
                       "experiment_config": self.context._exp_conf,
                       "hparams": self.context._hparams,
                       "trial_cls_spec": f"{module}:{trial_cls.__qualname__}",
                       "is_trainer": True, "trial_in_main": in_main}, f, default=str)
        storage = self.core.checkpoint.directory
        _write_code(path / CODE_DIR, skip=[path] + ([pathlib.Path(storage)] if storage else []))
        for callback in self.callbacks.values():
            callback.on_checkpoint_end(str(path))
            callback.on_checkpoint_write_end(str(path))

    def _load(self, path: pathlib.Path) -> None:
        state_file = path / STATE_DICT_FILE
        if not state_file.exists():
            logger.warning("checkpoint %s has no %s: starting from scratch", path,
                           STATE_DICT_FILE)
            return
        checkpoint = _torch_load(state_file)
        for callback in self.callbacks.values():
            callback.on_checkpoint_load_start(checkpoint)
        ctx = self.context
        models = checkpoint.get("models_state_dict", [])
        if len(models) != len(ctx.models):
            raise RuntimeError(f"the checkpoint holds {len(models)} models; the trial wrapped "
                               f"{len(ctx.models)}")
        for model, state in zip(ctx.models, models):
            _load_model_state(model, state)
        for optimizer, state in zip(ctx.optimizers, checkpoint.get("optimizers_state_dict", [])):
            optimizer.load_state_dict(state)
        for scheduler, state in zip(ctx.lr_schedulers,
                                    checkpoint.get("lr_schedulers_state_dict", [])):
            scheduler.load_state_dict(state)
        if "scaler_state_dict" in checkpoint and ctx._scaler is not None:
            ctx._scaler.load_state_dict(checkpoint["scaler_state_dict"])
        rng = checkpoint.get("rng_state")
        if rng:
            np.random.set_state(rng["np_rng_state"])
            random.setstate(rng["random_rng_state"])
            torch.random.set_rng_state(rng["cpu_rng_state"])
            if "gpu_rng_state" in rng and ctx.device.type == "cuda":
                torch.cuda.set_rng_state(rng["gpu_rng_state"], ctx.device)
        saved_callbacks = checkpoint.get("callbacks", {})
        for name, callback in self.callbacks.items():
            if name in saved_callbacks:
                callback.load_state_dict(saved_callbacks[name])
