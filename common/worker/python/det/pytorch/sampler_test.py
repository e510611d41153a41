"""ElasticSampler yields exactly the C++ ElasticLoader's order (elastic_order_tool), resumes
mid-epoch without replay, also at another world size, and refuses foreign states.

Usage: sampler_test.py PATH_TO_elastic_order_tool
"""

import json
import subprocess
import sys
import unittest
import unittest.mock

from det.pytorch import ElasticSampler, elastic_epoch_order, sample_key
from det.pytorch import elastic_order
from det.pytorch.elastic_order import Mt19937_64, mix64

TOOL = None


def cpp_windows(n, seed, nodes, batch, world, rank, steps, state=None):
    """[(epoch, first_position, [ids])] and the final state, from the C++ loader."""
    args = [TOOL, str(n), str(seed), str(nodes), str(batch), str(world), str(rank), str(steps)]
    if state is not None:
        args.append(json.dumps(state))
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[-1].startswith("state "), out[-1]
    windows = []
    for line in out[:-1]:
        f = [int(x) for x in line.split()]
        windows.append((f[0], f[1], f[2:]))
    return windows, json.loads(out[-1][len("state "):])


def py_batches(sampler, steps):
    """This rank's next `steps` batches, iterating epoch after epoch like the C++ loader."""
    out = []
    while len(out) < steps:
        it = iter(sampler)
        batch = []
        for i in it:
            batch.append(i)
            if len(batch) == sampler.per_rank_batch:
                out.append(batch)
                batch = []
                if len(out) == steps:
                    break
    return out


class OrderTest(unittest.TestCase):
    def test_epoch_order_equals_cpp(self):
        for n, seed, nodes in [(1, 0, 1), (7, 3, 2), (100, 7, 4), (1001, 42, 3), (1000, 9, 2000),
                               (4096, 2**64 - 1, 8), (60000, 12345, 1)]:
            windows, _ = cpp_windows(n, seed, nodes, n, 1, 0, 3)
            for epoch, (e, first, ids) in enumerate(windows):
                self.assertEqual((e, first), (epoch, 0))
                self.assertEqual(elastic_epoch_order(n, seed, epoch, nodes), ids,
                                 f"n {n} seed {seed} nodes {nodes} epoch {epoch}")

    def test_numpy_draws_equal_the_stdlib_engine(self):
        # The numpy path (the twist vectorized in three slices, split 64x32-bit products)
        # against the pure-Python engine, across twist boundaries (312 outputs each), for
        # seeds with high bits set and for the orders themselves; without numpy the order is
        # the stdlib loop's (which test_epoch_order_equals_cpp also checks against C++).
        for seed in (0, 1, 2**63 + 5, 2**64 - 1, 0xD6E8FEB86659FD93):
            for size in (2, 3, 312, 313, 624, 625, 2000):
                rng = Mt19937_64(seed)
                want = [(rng() * (i + 1)) >> 64 for i in range(size - 1, 0, -1)]
                self.assertEqual(elastic_order._fisher_yates_draws(seed, size), want,
                                 (seed, size))
        self.assertIsNone(elastic_order._fisher_yates_draws(1, 1))
        with unittest.mock.patch.dict(sys.modules, {"numpy": None}):
            self.assertIsNone(elastic_order._fisher_yates_draws(1, 100))
            for n, seed, nodes in [(7, 3, 2), (1001, 42, 3), (4096, 2**64 - 1, 1)]:
                stdlib = elastic_epoch_order(n, seed, 2, nodes)
                windows, _ = cpp_windows(n, seed, nodes, n, 1, 0, 3)
                self.assertEqual(stdlib, windows[2][2], (n, seed, nodes))

    def test_interleaves_partitions(self):
        order = elastic_epoch_order(100, 7, 0, 4)
        self.assertEqual([o // 25 for o in order], [p % 4 for p in range(100)])

    def test_mix64_and_sample_key_known_values(self):
        # splitmix64's published first output for state 0 is mix64(0).
        self.assertEqual(mix64(0), 0xE220A8397B1DCDAF)
        keys = {sample_key(5, e, p) for e in range(3) for p in range(1000)}
        self.assertEqual(len(keys), 3000)


class SamplerTest(unittest.TestCase):
    CASES = [  # n, seed, nodes, batch, world
        (1000, 9, 4, 64, 1), (1000, 9, 4, 64, 2), (1000, 9, 4, 64, 4), (997, 123, 3, 48, 3),
        (500, 2**63 + 5, 1, 20, 5), (256, 0, 8, 32, 8)]

    def test_every_rank_yields_the_cpp_slices_across_epochs(self):
        for n, seed, nodes, batch, world in self.CASES:
            steps = 2 * (n // batch) + 3  # crosses two epoch boundaries
            for rank in range(world):
                want, _ = cpp_windows(n, seed, nodes, batch, world, rank, steps)
                s = ElasticSampler(n, batch, seed=seed, num_canonical_nodes=nodes, rank=rank,
                                   world_size=world)
                got = py_batches(s, steps)
                self.assertEqual(got, [ids for _, _, ids in want],
                                 f"n {n} seed {seed} nodes {nodes} batch {batch} "
                                 f"world {world} rank {rank}")

    def test_len_and_set_epoch(self):
        s = ElasticSampler(1000, 64, seed=1, num_canonical_nodes=2, rank=1, world_size=2)
        self.assertEqual(len(s), 15 * 32)
        self.assertEqual(len(list(s)), 15 * 32)
        self.assertEqual(s.epoch, 1)  # exhausted: stands at the next epoch's start
        s.set_epoch(1)  # no-op: already there
        self.assertEqual(s.state_dict()["samples_in_epoch"], 0)
        s.set_epoch(5)
        want, _ = cpp_windows(1000, 1, 2, 64, 2, 1, 5 * 15 + 1)
        self.assertEqual(list(s)[:32], want[-1][2])

    def test_resume_mid_epoch_at_other_world_sizes(self):
        n, seed, nodes, batch = 1000, 77, 4, 64
        for k in (0, 1, 7, 14, 15, 20):  # 15 windows an epoch
            for w1, w2 in [(4, 2), (2, 4), (1, 4), (4, 1), (2, 2)]:
                a = ElasticSampler(n, batch, seed=seed, num_canonical_nodes=nodes, rank=0,
                                   world_size=w1)
                py_batches(a, k)
                state = json.loads(json.dumps(a.state_dict()))
                full, _ = cpp_windows(n, seed, nodes, batch, 1, 0, k + 20)
                for rank in range(w2):
                    b = ElasticSampler(n, batch, rank=rank, world_size=w2)  # seed/nodes: state's
                    b.load_state_dict(state)
                    got = py_batches(b, 20)
                    # The C++ loader restored from the Python state gives the same slices...
                    cpp, _ = cpp_windows(n, 0, 1, batch, w2, rank, 20, state=state)
                    self.assertEqual(got, [ids for _, _, ids in cpp], f"k {k} {w1}->{w2} r {rank}")
                    # ...which are the uninterrupted run's next windows: nothing replayed.
                    per = batch // w2
                    want = [ids[rank * per:(rank + 1) * per] for _, _, ids in full[k:]]
                    self.assertEqual(got, want, f"k {k} {w1}->{w2} rank {rank}")

    def test_loads_the_cpp_loader_state(self):
        _, state = cpp_windows(1000, 5, 3, 50, 1, 0, 27)
        s = ElasticSampler(1000, 50, rank=1, world_size=2)
        s.load_state_dict(json.dumps(state))
        want, _ = cpp_windows(1000, 5, 3, 50, 2, 1, 10, state=state)
        self.assertEqual(py_batches(s, 10), [ids for _, _, ids in want])

    def test_state_with_batches_consumed(self):
        s = ElasticSampler(1000, 50, seed=3, rank=0, world_size=1)
        it = iter(s)
        for _ in range(50 * 6):  # reads ahead 6 batches, as a DataLoader with workers would
            next(it)
        self.assertEqual(s.state_dict()["samples_in_epoch"], 300)
        self.assertEqual(s.state_dict(batches_consumed=2)["samples_in_epoch"], 100)
        for _ in it:  # read ahead past the end of epoch 0 (20 windows)
            pass
        self.assertEqual(s.state_dict()["epoch"], 1)
        state = s.state_dict(batches_consumed=19)
        self.assertEqual((state["epoch"], state["samples_in_epoch"]), (0, 950))
        b = ElasticSampler(1000, 50, rank=0, world_size=2)
        b.load_state_dict(state)  # the last window of epoch 0, then epoch 1
        want, _ = cpp_windows(1000, 3, 1, 50, 2, 0, 21)
        self.assertEqual(py_batches(b, 2), [ids for _, _, ids in want[19:]])

    def test_position_keys_follow_the_global_position(self):
        s = ElasticSampler(1000, 64, seed=11, rank=3, world_size=4)
        py_batches(s, 20)  # into epoch 1: 15 windows an epoch
        self.assertEqual(s.position_keys(4),
                         [sample_key(11, 1, 4 * 64 + 3 * 16 + i) for i in range(16)])

    def test_refuses_foreign_states_and_bad_arguments(self):
        s = ElasticSampler(1000, 50, dataset_fingerprint=0xABC)
        state = s.state_dict()
        other = ElasticSampler(1000, 50, dataset_fingerprint=0xDEF)
        with self.assertRaisesRegex(ValueError, "0000000000000abc.*0000000000000def"):
            other.load_state_dict(state)
        with self.assertRaisesRegex(ValueError, "version 0.*version 1"):
            s.load_state_dict(dict(state, version=0))
        with self.assertRaisesRegex(ValueError, "missing field 'epoch'"):
            s.load_state_dict({k: v for k, v in state.items() if k != "epoch"})
        with self.assertRaisesRegex(ValueError, "world_size 3 does not divide global_batch_size 50"):
            ElasticSampler(1000, 50, rank=0, world_size=3)
        with self.assertRaisesRegex(ValueError, "rank 2 is outside world_size 2"):
            ElasticSampler(1000, 50, rank=2, world_size=2)
        with self.assertRaisesRegex(ValueError, "larger than the data set"):
            ElasticSampler(10, 50)

    def test_works_in_a_dataloader(self):
        import torch
        data = torch.utils.data.TensorDataset(torch.arange(1000))
        s = ElasticSampler(1000, 64, seed=4, num_canonical_nodes=2, rank=1, world_size=4)
        loader = torch.utils.data.DataLoader(data, batch_size=16, sampler=s)
        got = [b[0].tolist() for _, b in zip(range(3), loader)]
        want, _ = cpp_windows(1000, 4, 2, 64, 4, 1, 3)
        self.assertEqual(got, [ids for _, _, ids in want])
        self.assertEqual(s.state_dict()["samples_in_epoch"], 3 * 64)

    def test_constructs_whatever_the_base_sampler_takes(self):
        # torch 1.13's Sampler.__init__ takes a data_source; torch 2.x's Sampler has no
        # __init__ at all (object's, which refuses arguments). Both bases must work.
        import torch

        def torch2_init(self, *args, **kwargs):
            if args or kwargs:
                raise TypeError("object.__init__() takes exactly one argument")

        def torch113_init(self, data_source):
            pass

        for init in (torch2_init, torch113_init):
            with unittest.mock.patch.object(torch.utils.data.Sampler, "__init__", init):
                s = ElasticSampler(100, 10, rank=0, world_size=1)
                self.assertEqual(len(list(iter(s))), 100)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main(verbosity=2)
