"""python3 -m det.pytorch.run MODULE:CLASS: trains the PyTorchTrial MODULE:CLASS in a det
allocation as Determined's legacy `entrypoint: model_def:Trial` does: the context from the
trial spec (hyperparameters, aggregation frequency), the length from the searcher, the
validation and checkpoint periods (min_validation_period, min_checkpoint_period), the
reporting period (scheduling_unit) and the checkpoint policy from the spec, resuming from the
trial's latest checkpoint. The working directory (the context directory) is on sys.path."""

import argparse
import importlib
import logging
import os
import sys
from typing import Any, List, Optional

LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


def _trial_class(spec: str) -> type:
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise SystemExit(f"det.pytorch.run: expected MODULE:CLASS, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    value: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m det.pytorch.run",
                                     description="Train a det.pytorch.PyTorchTrial on det.")
    parser.add_argument("trial", help="MODULE:CLASS of the PyTorchTrial, e.g. model_def:MNistTrial")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

    import det
    from det import pytorch

    info = det.get_cluster_info()
    if info is None:
        raise SystemExit("det.pytorch.run: not in a det allocation (no DET_MASTER); train a "
                         "trial locally with det.pytorch.init() and Trainer.fit(max_length=...)")
    trial_class = _trial_class(args.trial)
    spec = info.trial
    with pytorch.init(hparams=dict(spec.hparams),
                      aggregation_frequency=int(spec.spec.aggregation_frequency or 1)) as context:
        trial = trial_class(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(
            validation_period=(pytorch.Batch(spec.validation_period)
                               if spec.validation_period > 0 else None),
            checkpoint_period=(pytorch.Batch(spec.checkpoint_period)
                               if spec.checkpoint_period > 0 else None),
            reporting_period=pytorch.Batch(int(spec.spec.scheduling_unit) or 100),
            checkpoint_policy=spec.checkpoint_policy or "best",
            latest_checkpoint=info.latest_checkpoint)
        # Before init() tears the process group down: the trial holds the DDP models.
        del trainer, trial
    return 0

