"""bad_input_test's worker (no torch: it starts fast): reports NaN and infinities as metrics,
tries what the Core API must refuse and prints each error, and writes its environment to
the file named by hyperparameter `env_out` (with copies of its launch files), so that the
test can call the Core API again after the allocation has ended."""

import json
import math
import os
import shutil

import det


def main():
    info = det.get_cluster_info()
    with det.core.init() as core:
        core.train.report_training_metrics(
            steps_completed=1, metrics={"loss": math.nan, "big": math.inf, "small": -math.inf})
        print("reported nan and infinities", flush=True)
        for what, call in (
                ("string metric", lambda: core.train.report_training_metrics(
                    steps_completed=2, metrics={"loss": "high"})),
                ("restore outside", lambda: core.checkpoint.restore_path("../../etc").__enter__()),
                ("metadata outside", lambda: core.checkpoint.get_metadata("/etc/passwd"))):
            try:
                call()
                print(f"{what}: accepted", flush=True)
            except (TypeError, ValueError) as e:
                print(f"{what}: {type(e).__name__}: {e}", flush=True)
        with core.checkpoint.store_path({"steps_completed": 1}):
            pass
        # The launch files (the trial spec, ...) go with the allocation: keep copies beside
        # the environment and point the saved variables at them.
        env = dict(os.environ)
        out = info.trial.hparams["env_out"]
        for name in ("DET_TRIAL_SPEC_FILE", "DET_HPARAMS_FILE", "DET_EXPERIMENT_CONFIG_FILE"):
            if env.get(name):
                copy = f"{out}.{name}"
                shutil.copyfile(env[name], copy)
                env[name] = copy
        with open(out, "w") as f:
            json.dump(env, f)
        for op in core.searcher.operations():
            op.report_completed(1.0)


if __name__ == "__main__":
    main()
