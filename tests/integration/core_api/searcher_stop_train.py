"""searcher_stop_test's worker (no torch: it starts fast). At batches 5 and 10 it reports the
validation `loss` (its trial id: the first trial is the better one), then stores that step's
checkpoint, and only then asks should_preempt(), as Determined's Core API tutorial does. In
trial `blocked_trial`, the store of batch 5 waits, its checkpoint half written, until the
test writes to the FIFO `release_fifo`: the test decides when the store ends."""

import det


def main():
    info = det.get_cluster_info()
    trial_id = info.trial.trial_id
    hparams = info.trial.hparams
    with det.core.init() as core:
        for steps in (5, 10):
            core.train.report_validation_metrics(steps_completed=steps,
                                                 metrics={"loss": float(trial_id)})
            with core.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (path / "state").write_text(f"{trial_id},{steps}")
                if trial_id == hparams["blocked_trial"] and steps == 5:
                    print("storing the checkpoint of batch 5", flush=True)
                    # Opening a FIFO for reading blocks until the test opens it to write.
                    with open(hparams["release_fifo"]) as fifo:
                        print(f"released: {fifo.read().strip()}", flush=True)
            if core.preempt.should_preempt():
                print(f"stopping after batch {steps}: {core.preempt.reason}", flush=True)
                return


if __name__ == "__main__":
    main()
