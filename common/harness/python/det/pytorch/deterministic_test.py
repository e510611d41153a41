"""Deterministic mode trains bitwise identically on 1, 2 and 4 ranks (real processes, Gloo
on loopback) and across a checkpoint taken on 4 ranks and resumed on 2: per-step losses and
final parameters equal the 1-rank run's.

Usage: deterministic_test.py (finds ddp_test_worker.py beside itself).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_test_worker.py")
STEPS = 40  # 32 steps an epoch: crosses an epoch boundary
DEADLINE_S = 100


def train(tmp, name, world, extra=()):
    """Runs `world` ranks of the worker to completion; returns rank 0's output."""
    store = os.path.join(tmp, name + ".store")
    out = os.path.join(tmp, name + ".json")
    env = dict(os.environ, WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = []
    for rank in range(world):
        log = open(os.path.join(tmp, f"{name}.{rank}.log"), "w")
        procs.append((subprocess.Popen(
            [sys.executable, WORKER, "--store", store, "--out", out, "--steps", str(STEPS),
             *extra], env=dict(env, RANK=str(rank)), stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + DEADLINE_S
    failed = []
    for rank, (p, log) in enumerate(procs):
        try:
            rc = p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            rc = "timeout"
        log.close()
        if rc != 0:
            with open(log.name) as f:
                failed.append(f"{name} rank {rank}: exit {rc}\n{f.read()[-3000:]}")
    if failed:
        raise AssertionError("\n".join(failed))
    with open(out) as f:
        return json.load(f)


class DeterministicDdpTest(unittest.TestCase):
    def test_bitwise_identical_on_1_2_4_ranks_and_across_a_resize(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
            one = train(tmp, "one", 1)
            self.assertEqual(len(one["losses"]), STEPS)
            first, last = float.fromhex(one["losses"][0]), float.fromhex(one["losses"][-1])
            self.assertLess(last, 0.8 * first, "the model did not learn: the check would be vacuous")
            for world in (2, 4):
                run = train(tmp, f"w{world}", world)
                self.assertEqual(run["losses"], one["losses"], f"{world} ranks")
                self.assertEqual(run["params"], one["params"], f"{world} ranks")
            ckpt = os.path.join(tmp, "ckpt.pt")
            before = train(tmp, "before", 4, ("--stop-after", "13", "--save", ckpt))
            after = train(tmp, "after", 2, ("--resume", ckpt))
            self.assertEqual(after["first_step"], 13)
            self.assertEqual(before["losses"] + after["losses"], one["losses"])
            self.assertEqual(after["params"], one["params"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
