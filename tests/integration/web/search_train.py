"""web_search_test's worker (det.core, no torch: it starts fast). Its losses are a function
of its hyperparameters `lr` (0.001, 0.01, 0.1 or 1) and `width` (8, 16, 32 or 64), so that
16 trials draw 16 curves apart from each other:

    base = 0.1 + 0.25 * index(width) + 0.06 * index(lr)
    training loss at step s = base + 1 / s
    validation loss at steps 2 and 4 = base + 0.5 / s

(the best trial is lr 0.001, width 8). It logs a warning and an error line, and stores one
checkpoint at the end. With hyperparameters `steps` (default 4) and `sleep` (seconds
between steps, default 0) it runs longer, and stops at the first step after a pause (it
checks core.preempt)."""

import logging
import sys
import time

import det

LRS = [0.001, 0.01, 0.1, 1.0]
WIDTHS = [8, 16, 32, 64]


def main():
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s: %(message)s")
    hp = det.get_cluster_info().trial.hparams
    base = 0.1 + 0.25 * WIDTHS.index(int(hp["width"])) + 0.06 * LRS.index(float(hp["lr"]))
    steps = int(hp.get("steps", 4))
    with det.core.init() as core:
        for step in range(1, steps + 1):
            core.train.report_training_metrics(steps_completed=step,
                                               metrics={"loss": base + 1.0 / step})
            logging.info("step %d of %d", step, steps)
            if step % 2 == 0:
                core.train.report_validation_metrics(steps_completed=step,
                                                     metrics={"validation_loss": base + 0.5 / step})
            core.train.report_progress(step / steps)
            if core.preempt.should_preempt():
                return
            time.sleep(float(hp.get("sleep", 0)))
        with core.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "weights.txt").write_text(f"base={base}\n")
        logging.warning("a warning from the worker")
        logging.error("an error from the worker")


if __name__ == "__main__":
    main()
