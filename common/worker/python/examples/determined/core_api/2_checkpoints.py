"""
Stage 2: checkpoints and preemption. Training can now stop and continue: paused and
activated (the same trial continues at its batch), or continued from a checkpoint by a new
experiment (a new trial: it keeps the "model weight" but starts counting batches at 0). The
checkpoint records the trial id so that load_state can tell the two apart.
"""

import logging
import pathlib
import sys
import time

import det


# NEW: write the state into checkpoint_directory (a pathlib.Path). Any files and
# directories under it become part of the checkpoint.
def save_state(x, steps_completed, trial_id, checkpoint_directory):
    with checkpoint_directory.joinpath("state").open("w") as f:
        f.write(f"{x},{steps_completed},{trial_id}")


# NEW: read the state back from a checkpoint directory.
def load_state(trial_id, checkpoint_directory):
    checkpoint_directory = pathlib.Path(checkpoint_directory)
    with checkpoint_directory.joinpath("state").open("r") as f:
        x, steps_completed, ckpt_trial_id = [int(field) for field in f.read().split(",")]
    if ckpt_trial_id == trial_id:
        return x, steps_completed
    else:
        # Another trial's checkpoint: keep the "model weight", restart the batch count.
        return x, 0


def main(core_context, latest_checkpoint, trial_id, increment_by):
    x = 0
    max_length = 100
    # NEW: start from the latest checkpoint when there is one.
    starting_batch = 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, starting_batch = load_state(trial_id, path)

    for batch in range(starting_batch, max_length):
        x += increment_by
        steps_completed = batch + 1
        time.sleep(0.1)
        logging.info(f"x is now {x}")
        if steps_completed % 10 == 0:
            core_context.train.report_training_metrics(
                steps_completed=steps_completed, metrics={"x": x}
            )
            core_context.train.report_progress(steps_completed / float(max_length))

            # NEW: checkpoint every 10 steps, so a crash loses at most 10.
            checkpoint_metadata = {"steps_completed": steps_completed}
            with core_context.checkpoint.store_path(checkpoint_metadata) as (path, uuid):
                save_state(x, steps_completed, trial_id, path)

            # NEW: ask whether to stop (a pause, a preemption by a more important task, an
            # early stop by the searcher).
            if core_context.preempt.should_preempt():
                # The checkpoint above holds everything: exit now, continue when activated.
                return

    core_context.train.report_validation_metrics(steps_completed=steps_completed, metrics={"x": x})


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)

    # NEW: what the cluster tells this task (det.get_cluster_info()), read here and passed to
    # main() so that main() could run off-cluster too.
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    latest_checkpoint = info.latest_checkpoint
    trial_id = info.trial.trial_id

    with det.core.init() as core_context:
        main(
            core_context=core_context,
            latest_checkpoint=latest_checkpoint,
            trial_id=trial_id,
            increment_by=1,
        )
