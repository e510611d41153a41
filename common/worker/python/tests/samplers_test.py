"""det.pytorch.samplers (Determined's determined.pytorch.samplers), chained into real torch
DataLoaders."""

import itertools
import unittest

import torch

from det.pytorch import samplers


def take(iterable, n):
    return list(itertools.islice(iterable, n))


class SamplersTest(unittest.TestCase):
    def test_repeat_never_ends_and_keeps_the_length(self):
        base = torch.utils.data.SequentialSampler(range(3))
        repeat = samplers.RepeatSampler(base)
        self.assertEqual(len(repeat), 3)
        self.assertEqual(take(repeat, 7), [0, 1, 2, 0, 1, 2, 0])
        batches = torch.utils.data.BatchSampler(base, batch_size=2, drop_last=False)
        self.assertEqual(take(samplers.RepeatBatchSampler(batches), 3), [[0, 1], [2], [0, 1]])

    def test_ranks_share_without_overlap_and_report_equal_lengths(self):
        base = range(10)
        shares = [list(samplers.DistributedSampler(base, 3, r)) for r in range(3)]
        self.assertEqual(shares, [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]])
        self.assertEqual({len(samplers.DistributedSampler(base, 3, r)) for r in range(3)}, {4})
        batches = torch.utils.data.BatchSampler(range(10), batch_size=2, drop_last=False)
        per_rank = [list(samplers.DistributedBatchSampler(batches, 2, r)) for r in range(2)]
        self.assertEqual(per_rank, [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]])
        self.assertEqual(len(samplers.DistributedBatchSampler(batches, 2, 1)), 3)
        for bad in [(0, 0), (2, 2), (2, -1)]:
            with self.assertRaisesRegex(ValueError, "num_workers|rank"):
                samplers.DistributedSampler(base, *bad)

    def test_a_skip_around_a_repeat_skips_once(self):
        batches = torch.utils.data.BatchSampler(range(6), batch_size=2, drop_last=False)
        resumed = samplers.SkipBatchSampler(samplers.RepeatBatchSampler(batches), 2)
        self.assertEqual(take(resumed, 4), [[4, 5], [0, 1], [2, 3], [4, 5]])
        # Inside the repeat, the skip starts again at every epoch.
        every_epoch = samplers.RepeatBatchSampler(samplers.SkipBatchSampler(batches, 2))
        self.assertEqual(take(every_epoch, 2), [[4, 5], [4, 5]])
        self.assertEqual(len(samplers.SkipBatchSampler(batches, 2)), 3)
        self.assertEqual(list(samplers.SkipSampler(range(5), 3)), [3, 4])
        self.assertEqual(list(samplers.SkipSampler(range(2), 5)), [])
        with self.assertRaisesRegex(ValueError, "skip must be >= 0"):
            samplers.SkipSampler(range(2), -1)

    def test_shuffle_is_reproducible_and_differs_between_epochs(self):
        a = samplers.ReproducibleShuffleSampler(range(20), seed=7)
        b = samplers.ReproducibleShuffleSampler(range(20), seed=7)
        epochs_a = [list(a) for _ in range(3)]
        self.assertEqual(epochs_a, [list(b) for _ in range(3)])
        self.assertEqual([sorted(e) for e in epochs_a], [list(range(20))] * 3)
        self.assertNotEqual(epochs_a[0], epochs_a[1])
        self.assertNotEqual(list(samplers.ReproducibleShuffleSampler(range(20), seed=8)),
                            epochs_a[0])
        batches = torch.utils.data.BatchSampler(range(8), batch_size=2, drop_last=False)
        shuffled = list(samplers.ReproducibleShuffleBatchSampler(batches, seed=1))
        self.assertEqual(sorted(shuffled), [[0, 1], [2, 3], [4, 5], [6, 7]])

    def test_a_chain_in_a_data_loader(self):
        # Shuffle, skip the 2 batches trained before a resume, shard for rank 1 of 2.
        data = torch.arange(32).float()
        records = samplers.ReproducibleShuffleSampler(torch.utils.data.SequentialSampler(data),
                                                      seed=3)
        batches = torch.utils.data.BatchSampler(records, batch_size=4, drop_last=True)
        chain = samplers.DistributedBatchSampler(samplers.SkipBatchSampler(batches, 2), 2, 1)
        loader = torch.utils.data.DataLoader(data, batch_sampler=chain)
        got = [b.tolist() for b in loader]
        order = list(samplers.ReproducibleShuffleSampler(range(32), seed=3))
        all_batches = [order[i:i + 4] for i in range(0, 32, 4)][2:]
        self.assertEqual(got, [[float(x) for x in b] for b in all_batches[1::2]])


if __name__ == "__main__":
    unittest.main()
