"""The Trainer API (Determined 0.21+): FashionTrial (model_def.py) trained by a script, on a
det cluster or locally with the same code.

On det (`entrypoint: python3 train.py`, configs/examples/trial-trainer.yaml) the agent starts
one process per slot; det.pytorch.init() joins them (DDP over Gloo, NCCL on GPUs) and takes
the trial's hyperparameters, seed and config; fit() resumes from the trial's latest
checkpoint after a pause or a restart. Without --batches/--epochs it trains to the
searcher's length.

Locally (no DET_MASTER): `python3 train.py --batches 200` trains one process with the
hyperparameters below and checkpoints under $TMPDIR/det-checkpoints."""

import argparse
import logging

import det
from det import pytorch

import data
from model_def import FashionTrial

# The hyperparameters of a local run (on a cluster they come from the experiment config;
# these are configs/examples/trial-const.yaml's).
LOCAL_HPARAMS = {"global_batch_size": 64, "learning_rate": 0.002, "lr_decay": 0.7,
                 "n_filters1": 32, "n_filters2": 64, "hidden": 128, "dropout": 0.25}


def run(max_length, validation_period, local: bool) -> None:
    info = det.get_cluster_info()
    if local:
        hparams = LOCAL_HPARAMS
        exp_conf = {"data": {"dir": data.DEFAULT_DIR}}
        latest_checkpoint = None
    else:
        hparams = info.trial.hparams
        exp_conf = None  # The trial's config.
        latest_checkpoint = info.latest_checkpoint  # Resume after a pause or a restart.

    with pytorch.init(hparams=hparams, exp_conf=exp_conf) as train_context:
        trial = FashionTrial(train_context)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=max_length, validation_period=validation_period,
                    latest_checkpoint=latest_checkpoint)
        # Dropped before init() ends the process group (the trial holds the DDP model).
        del trainer, trial


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    parser = argparse.ArgumentParser()
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--batches", type=int, help="train this many batches")
    length.add_argument("--epochs", type=int, help="train this many epochs")
    parser.add_argument("--validation-batches", type=int,
                        help="validate (and checkpoint a new best) every N batches; default: "
                             "after every epoch and at the end")
    args = parser.parse_args()

    local = det.get_cluster_info() is None
    if args.batches:
        max_length = pytorch.Batch(args.batches)
    elif args.epochs:
        max_length = pytorch.Epoch(args.epochs)
    else:
        # On a cluster: the searcher's length; locally, one epoch.
        max_length = pytorch.Epoch(1) if local else None
    validation_period = (pytorch.Batch(args.validation_batches) if args.validation_batches
                         else pytorch.Epoch(1))
    run(max_length, validation_period, local)


if __name__ == "__main__":
    main()
