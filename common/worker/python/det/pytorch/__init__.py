"""det.pytorch: det's elastic-deterministic data order and bitwise-deterministic
data-parallel training for PyTorch (docs/pytorch-data-and-determinism.md), and the Trial API
with the names and semantics of Determined's determined.pytorch (PyTorchTrial,
PyTorchTrialContext, DataLoader, Trainer, init, ...).

Importing det.pytorch imports no torch; each name below loads its module on first use.
"""

import importlib

_EXPORTS = {
    "ElasticSampler": "sampler",
    "elastic_epoch_order": "elastic_order",
    "sample_key": "elastic_order",
    "DeterministicDDP": "deterministic",
    "deterministic_ddp": "deterministic",
    "pin_determinism": "deterministic",
    "FIXED_POINT_SCALE": "deterministic",
    "fixed_point_bound": "deterministic",
    # The Trial API (_harness/).
    "InvalidHP": "_harness.errors",
    "PyTorchCallback": "_harness.callback",
    "LRScheduler": "_harness.lr_scheduler",
    "TrainUnit": "_harness.units",
    "Batch": "_harness.units",
    "Epoch": "_harness.units",
    "DataLoader": "_harness.data",
    "TorchData": "_harness.data",
    "to_device": "_harness.data",
    "data_length": "_harness.data",
    "adapt_batch_sampler": "_harness.data",
    "Reducer": "_harness.reducer",
    "MetricReducer": "_harness.reducer",
    "PyTorchTrialContext": "_harness.context",
    "PyTorchExperimentalContext": "_harness.context",
    "init": "_harness.context",
    "PyTorchTrial": "_harness.trial",
    "Trainer": "_harness.trainer",
    "load_trial_from_checkpoint_path": "_harness.load",
    "CheckpointLoadContext": "_harness.load",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'det.pytorch' has no attribute '{name}'")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
