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

    def test_native_numpy_and_torch_only_paths_give_the_same_bits(self):
        # The native library (fixed_point.cc, built beside deterministic.py), the numpy
        # fallback and the torch-only fallback (a torch built without numpy): the same
        # losses and parameters, bit for bit. A float64 parameter (its own group), a
        # parameter no micro-batch uses, 12 micro-batches (more than the native path holds
        # at once, and not a power of two: the mean divides).
        torch, det = self.torch, self.det
        self.assertIsNotNone(det.NATIVE, "the native library was not built beside "
                                         "deterministic.py (//common/worker/python/det/"
                                         "pytorch:_fixed_point.so)")
        self.assertLess(det._HELD_MICRO_BATCHES, 12)
        # Held gradients stay under _HELD_BYTES (256 MiB): 2 micro-batches of 100 MiB, one
        # of 300 MiB (sizes only: meta tensors have no storage).
        self.assertEqual(det._hold_limit([torch.zeros(10)]), det._HELD_MICRO_BATCHES)
        self.assertEqual(det._hold_limit([torch.empty(25 << 20, device="meta")]), 2)
        self.assertEqual(det._hold_limit([torch.empty(75 << 20, device="meta")]), 1)

        def run(held_bytes=None):
            saved_bytes = det._HELD_BYTES
            if held_bytes is not None:
                det._HELD_BYTES = held_bytes
            try:
                return train()
            finally:
                det._HELD_BYTES = saved_bytes

        def train():
            torch.manual_seed(5)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                        torch.nn.Dropout(0.2), torch.nn.Linear(16, 3))
            model.extra = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
            unused = torch.nn.Linear(3, 3)
            model.unused = unused
            ddp = det.DeterministicDDP(model, 24, 2, rng_seed=11)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x, y = torch.randn(24, 8), torch.randint(0, 3, (24,))
            losses = []
            for step in range(3):
                losses.append(float.hex(ddp.backward(
                    (x, y), lambda a, b: torch.nn.functional.cross_entropy(
                        model[3](model[2](model[1](model[0](a)))) + model.extra.sum().float(),
                        b), step=step)))
                self.assertTrue(torch.equal(unused.weight.grad, torch.zeros(3, 3)))
                opt.step()
            return losses, [p.detach().clone() for p in model.parameters()]

        native = run()
        # A model too large to hold two micro-batches' gradients: each added at once.
        native_one_at_a_time = run(held_bytes=1)
        saved_native, saved_np = det.NATIVE, det._np
        try:
            det.NATIVE = None
            with_numpy = run()
            det._np = None
            torch_only = run()
        finally:
            det.NATIVE, det._np = saved_native, saved_np
        for other in (native_one_at_a_time, with_numpy, torch_only):
            self.assertEqual(native[0], other[0])
            for a, b in zip(native[1], other[1]):
                self.assertTrue(torch.equal(a, b))

    def test_native_sum_is_the_clamped_rounded_exact_sum_at_the_edges(self):
        # Halves (rounded to even), -0.0, values at and past float32's and float64's integer
        # limits, past the bound, infinities, in both dtypes, summed over 1 to 6 parts (the
        # kernel's groups of four, two and one), replacing and accumulating: the integers
        # torch.clamp + torch.round + a float64 sum give. Two parameters in one call: the
        # second's slice follows the first's, and its missing parts (null) add nothing.
        torch, det = self.torch, self.det
        bound = det.fixed_point_bound(8)  # 2^50
        edges = [0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 3.4999998,
                 2.0 ** 22 + 0.5, 2.0 ** 23 - 0.5, 2.0 ** 23, 2.0 ** 23 + 1, 2.0 ** 24 + 2,
                 -(2.0 ** 23 + 1), 2.0 ** 49 + 2.0 ** 27, 2.0 ** 50, 2.0 ** 51, -(2.0 ** 60),
                 1e38, float("inf"), float("-inf"), 123456.5, -7.25]
        for dtype in (torch.float32, torch.float64):
            extra = [2.0 ** 49 + 0.5, 2.0 ** 48 - 0.5, -(2.0 ** 47 - 1.5)] \
                if dtype == torch.float64 else []
            values = torch.tensor(edges + extra, dtype=dtype)
            n = len(values)
            gen = torch.Generator().manual_seed(2)
            for count in range(1, 7):
                first = [values[torch.randperm(n, generator=gen)] * (1 if k % 2 else -1)
                         for k in range(count)]
                second = [torch.randn(n + 3, generator=gen, dtype=dtype) * 1e6]
                for accumulate in (False, True):
                    out = torch.full((2 * n + 3,), 5.0, dtype=torch.float64)
                    want = out.clone() if accumulate else torch.zeros_like(out)
                    for part in first:
                        want[:n] += torch.round(torch.clamp(part, -bound, bound)).double()
                    want[n:] += torch.round(torch.clamp(second[0], -bound, bound)).double()
                    self._native_sum(dtype, [first, second], bound, out, accumulate)
                    self.assertTrue(torch.equal(out, want), (dtype, count, out - want))
                    # The first add is 0.0 + value: never a -0.0 sum.
                    self.assertFalse(torch.signbit(out[out == 0]).any())
        nan = torch.tensor([float("nan"), 1.0], dtype=torch.float32)
        out = torch.zeros(2, dtype=torch.float64)
        self._native_sum(torch.float32, [[nan]], bound, out, False)
        self.assertTrue(torch.isnan(out[0]))
        self.assertEqual(out[1].item(), 1.0)

    def test_baseline_variant_gives_the_avx2_variants_bits(self):
        # The library's baseline (SSE2) variant, forced by DET_FIXED_POINT_BASELINE=1 in
        # processes of their own, is the one that runs there and passes the edge test and
        # the same-bits test too.
        import subprocess
        if self.det.NATIVE.det_fixed_point_isa() != 2:
            self.skipTest("this CPU has no AVX2: the other tests ran the baseline variant")
        env = dict(os.environ, DET_FIXED_POINT_BASELINE="1")
        isa = subprocess.run(
            [sys.executable, "-c", "from det.pytorch import deterministic as d; "
                                   "print(d.NATIVE.det_fixed_point_isa())"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(isa.stdout.strip(), "0", isa.stdout[-2000:])
        tests = ["SingleProcessTest.test_native_sum_is_the_clamped_rounded_exact_sum_at_the_edges",
                 "SingleProcessTest.test_native_numpy_and_torch_only_paths_give_the_same_bits"]
        run = subprocess.run([sys.executable, os.path.abspath(__file__), *tests], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout[-3000:])
        self.assertIn("Ran 2 tests", run.stdout)

    def _native_sum(self, dtype, params_parts, bound, out, accumulate):
        """det_fixed_sum_many over parameters whose parts are params_parts (a list of
        tensors per parameter; a shorter list leaves null parts), into out (their slices
        one after the other)."""
        import ctypes
        native = self.det.NATIVE
        self.assertIsNotNone(native)
        count = max(len(p) for p in params_parts)
        pointers = (ctypes.c_void_p * (len(params_parts) * count))()
        sizes = (ctypes.c_int64 * len(params_parts))()
        for j, parts in enumerate(params_parts):
            sizes[j] = parts[0].numel()
            for k, t in enumerate(parts):
                pointers[j * count + k] = t.data_ptr()
        self.assertEqual(sum(sizes), out.numel())
        fn = native.det_fixed_sum_many_f32 if dtype == self.torch.float32 \
            else native.det_fixed_sum_many_f64
        fn(pointers, sizes, len(params_parts), count, ctypes.c_double(bound),
           ctypes.c_void_p(out.data_ptr()), 1 if accumulate else 0)

    def test_a_step_that_raised_leaves_nothing_in_the_next(self):
        # A NaN loss raises after some micro-batches' gradients were computed (and, on the
        # native path, held): the next step's gradient is what a fresh wrapper computes.
        torch, det = self.torch, self.det
        x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
        ddp = det.DeterministicDDP(self.model, 32, 4)
        calls = []

        def nan_on_third(a, b):
            calls.append(1)
            loss = torch.nn.functional.cross_entropy(ddp(a), b)
            return loss * float("nan") if len(calls) == 3 else loss

        with self.assertRaisesRegex(FloatingPointError, "NaN"):
            ddp.backward((x, y), nan_on_third)
        loss_fn = lambda a, b: torch.nn.functional.cross_entropy(ddp(a), b)
        after = ddp.backward((x, y), loss_fn)
        got = [p.grad.clone() for p in self.model.parameters()]
        fresh = det.DeterministicDDP(self.model, 32, 4)
        self.assertEqual(float.hex(after), float.hex(fresh.backward((x, y), loss_fn)))
        for g, p in zip(got, self.model.parameters()):
            self.assertTrue(torch.equal(g, p.grad))

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
        # Not the CPU (meta stands in for a GPU here): refused at construction, naming it.
        with self.assertRaisesRegex(ValueError, "parameter 0.weight is on meta; "
                                                "deterministic mode runs on the CPU only"):
            DDP(torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta")), 32, 4)
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
