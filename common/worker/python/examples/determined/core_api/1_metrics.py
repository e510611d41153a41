"""
Stage 1: create the Core API context and report metrics with it.
"""

import logging
import sys
import time

# NEW: import det
import det


def main(core_context, increment_by):
    x = 0
    for batch in range(100):
        x += increment_by
        steps_completed = batch + 1
        time.sleep(0.1)
        logging.info(f"x is now {x}")
        # NEW: report training metrics every 10 steps.
        if steps_completed % 10 == 0:
            core_context.train.report_training_metrics(
                steps_completed=steps_completed, metrics={"x": x}
            )
            # NEW: report how far training got.
            core_context.train.report_progress(batch/100.0)
    # NEW: report a "validation" metric once, at the end.
    core_context.train.report_validation_metrics(steps_completed=steps_completed, metrics={"x": x})


if __name__ == "__main__":
    # NEW: log with det.LOG_FORMAT, which carries the level of each line into the trial log.
    logging.basicConfig(level=logging.DEBUG, format=det.LOG_FORMAT)
    # One line at each level, to show them in the log.
    logging.debug("debug-level message")
    logging.info("info-level message")
    logging.warning("warning-level message")
    logging.error("error-level message")

    # NEW: create the context and hand it to main().
    with det.core.init() as core_context:
        main(core_context=core_context, increment_by=1)
