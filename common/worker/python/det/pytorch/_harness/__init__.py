"""det.pytorch's Trial API (PyTorchTrial, PyTorchTrialContext, DataLoader, Trainer, init,
...): the names det.pytorch exports, with the semantics of Determined's determined.pytorch.
Import them from det.pytorch; the modules here are private."""
