"""sdk_test's worker (det.core, no torch: it starts fast). Hyperparameter `q` (1 or 2) picks
its validation losses at batches 1 and 2:

    q=1: 0.30, 0.40        q=2: 0.20, 0.25

After each validation it stores a checkpoint (metadata {"steps_completed", "q"}) holding
weights.txt ("q=Q step=S" and a newline) and sub/extra.bin (the bytes 0..255). It first
prints the files of its context directory ("context files: [...]")."""

import os

import det

LOSSES = {1: [0.30, 0.40], 2: [0.20, 0.25]}


def main():
    files = sorted(os.path.relpath(os.path.join(d, f), ".")
                   for d, _, fs in os.walk(".") for f in fs)
    print(f"context files: {files}", flush=True)
    q = int(det.get_cluster_info().trial.hparams["q"])
    with det.core.init() as core:
        for step in (1, 2):
            core.train.report_training_metrics(steps_completed=step,
                                               metrics={"train_loss": 1.0 / step})
            core.train.report_validation_metrics(steps_completed=step,
                                                 metrics={"loss": LOSSES[q][step - 1]})
            with core.checkpoint.store_path({"steps_completed": step, "q": q}) as (path, uuid):
                (path / "weights.txt").write_text(f"q={q} step={step}\n")
                (path / "sub").mkdir()
                (path / "sub" / "extra.bin").write_bytes(bytes(range(256)))
            print(f"checkpoint {uuid} q={q} step={step}", flush=True)
            core.train.report_progress(step / 2)


if __name__ == "__main__":
    main()
