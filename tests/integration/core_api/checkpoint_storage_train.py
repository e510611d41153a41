"""checkpoint_storage_test's worker (no torch: it starts fast).

Hyperparameter `mode`:
  checkpoint: stores one checkpoint (a file `weights.txt`) through core.checkpoint, prints
    `checkpoint <storage_id> in <storage directory>` and completes its searcher operation.
  wait: prints `waiting for a preemption`, then asks should_preempt() until it answers true
    (at most 240 s) and prints `asked to stop`; it stores nothing.
"""

import time

import det


def main():
    info = det.get_cluster_info()
    mode = info.trial.hparams["mode"]
    with det.core.init() as core:
        if mode == "checkpoint":
            with core.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
                with open(path / "weights.txt", "w") as f:
                    f.write("weights of step 1\n")
            core.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
            print(f"checkpoint {storage_id} in {core.checkpoint.directory}", flush=True)
            for op in core.searcher.operations():
                op.report_completed(0.5)
            return
        core.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
        print("waiting for a preemption", flush=True)
        deadline = time.monotonic() + 240
        while not core.preempt.should_preempt():
            if time.monotonic() > deadline:
                raise TimeoutError("no preemption within 240 s")
            time.sleep(0.1)  # should_preempt() answers from a background long-poll.
        print(f"asked to stop ({core.preempt.reason})", flush=True)


if __name__ == "__main__":
    main()
