"""det.pytorch: det's elastic-deterministic data order and bitwise-deterministic
data-parallel training for PyTorch (docs/pytorch-data-and-determinism.md).

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
