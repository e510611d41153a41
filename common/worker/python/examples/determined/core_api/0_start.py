"""
Stage 0 of the Core API tutorial: the script before any det integration.

The "model" is an integer that training increments; the later stages add det's Core API
to this loop one feature at a time.
"""

import logging
import sys
import time


def main(increment_by):
    x = 0
    for batch in range(100):
        x += increment_by
        time.sleep(0.1)
        print(f"x is now {x}")


if __name__ == "__main__":
    main(increment_by=1)
