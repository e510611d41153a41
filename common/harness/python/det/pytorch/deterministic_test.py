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


class SingleProcessTest(unittest.TestCase):
    """Without torch.distributed initialized: a world of one."""

    def setUp(self):
        import torch
        from det.pytorch import deterministic
        self.torch, self.det = torch, deterministic
        torch.manual_seed(3)
        self.model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                         torch.nn.Linear(16, 3))

    def test_gradient_and_loss_are_the_float_ones_up_to_fixed_point_resolution(self):
        torch = self.torch
        x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
        ddp = self.det.deterministic_ddp(self.model, 32, 4)
        loss = ddp.backward((x, y), lambda a, b: torch.nn.functional.cross_entropy(ddp(a), b))
        got = [p.grad.clone() for p in self.model.parameters()]
        self.model.zero_grad()
        want = torch.nn.functional.cross_entropy(self.model(x), y)
        want.backward()
        self.assertAlmostEqual(loss, want.item(), delta=1e-6)
        for g, p in zip(got, self.model.parameters()):
            self.assertTrue(torch.allclose(g, p.grad, atol=1e-6, rtol=1e-5), (g, p.grad))
            self.assertFalse(torch.equal(g, torch.zeros_like(g)))

    def test_torch_only_path_gives_the_numpy_paths_bits(self):
        # Without numpy (a torch built without it) the widening adds and the mean are torch's
        # own operations: the same bits. A float64 parameter (its own group), a parameter no
        # micro-batch uses, and 6 micro-batches (not a power of two: the mean divides).
        torch, det = self.torch, self.det

        def run():
            torch.manual_seed(5)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                        torch.nn.Linear(16, 3))
            model.extra = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
            unused = torch.nn.Linear(3, 3)
            model.unused = unused
            ddp = det.DeterministicDDP(model, 24, 4)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x, y = torch.randn(24, 8), torch.randint(0, 3, (24,))
            losses = []
            for _ in range(3):
                losses.append(float.hex(ddp.backward(
                    (x, y), lambda a, b: torch.nn.functional.cross_entropy(
                        model[2](model[1](model[0](a))) + model.extra.sum().float(), b))))
                self.assertTrue(torch.equal(unused.weight.grad, torch.zeros(3, 3)))
                opt.step()
            return losses, [p.detach().clone() for p in model.parameters()]

        with_numpy = run()
        saved = det._np
        det._np = None
        try:
            without = run()
        finally:
            det._np = saved
        self.assertEqual(with_numpy[0], without[0])
        for a, b in zip(with_numpy[1], without[1]):
            self.assertTrue(torch.equal(a, b))

    def test_fixed_point_bound_keeps_sums_below_2_pow_53(self):
        for n in (1, 2, 3, 4, 16, 1000, 1024):
            b = self.det.fixed_point_bound(n)
            self.assertLessEqual(b * n, 2.0 ** 53, n)
            self.assertGreater(b * 2 * n, 2.0 ** 53, n)  # the largest power of two that fits
        self.assertEqual(self.det.fixed_point_bound(16) / self.det.FIXED_POINT_SCALE, 131072.0)

    def test_refuses_what_cannot_be_deterministic(self):
        torch, DDP = self.torch, self.det.DeterministicDDP
        with self.assertRaisesRegex(ValueError, "micro_batch_size 5 does not divide the per-rank batch 32"):
            DDP(self.model, 32, 5)
        with self.assertRaisesRegex(ValueError, "2048 micro-batches per global batch; at most 1024"):
            DDP(self.model, 2048, 1)
        with self.assertRaisesRegex(ValueError, "1 is a BatchNorm1d"):
            DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)), 32, 4)
        with self.assertRaisesRegex(ValueError, "parameter 0.weight is torch.float16"):
            DDP(torch.nn.Sequential(torch.nn.Linear(8, 8).half()), 32, 4)
        ddp = DDP(self.model, 32, 4)
        with self.assertRaisesRegex(ValueError, "has 16 samples; this rank's slice of global batch 32 has 32"):
            ddp.backward(torch.randn(16, 8), lambda a: ddp(a).sum())
        with self.assertRaisesRegex(FloatingPointError, "NaN"):
            ddp.backward(torch.randn(32, 8), lambda a: ddp(a).sum() * float("nan"))


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
