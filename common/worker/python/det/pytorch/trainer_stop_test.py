"""The Trainer's stop check on 2 ranks (real processes, Gloo on loopback, local mode): after
every batch one collective of two flags (a tensor all-reduce, no object collectives) tells
every rank whether to stop, and every rank stops after the same batch, checkpoints and exits
0 when any rank asked: context.set_stop_requested(True) on one rank, or a SIGTERM to the
chief or to another rank (should_preempt(), its reason shared). The batch each rank fetches
while the flags are exchanged is not lost when they stop: a resume trains it next.

Usage: trainer_stop_test.py (runs itself as the ranks: trainer_stop_test.py --worker ...).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

DEADLINE_S = 120
GLOBAL_BATCH = 8
RECORDS = 64  # 8 batches an epoch


# -- one rank (run as `trainer_stop_test.py --worker --out FILE --hparams JSON`) ------------

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "broadcast",
               "broadcast_object_list", "barrier")


def _count_collectives(counts):
    """Counts the Python-level torch.distributed collectives this process calls."""
    import torch.distributed as dist
    for name in COLLECTIVES:
        original = getattr(dist, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(*args, **kwargs)

        setattr(dist, name, counted)


def worker(args):
    import torch
    import torch.distributed as dist
    from det import pytorch

    hp = json.loads(args.hparams)
    # The process group over a file store (no port to pick); det.pytorch.init() uses it.
    dist.init_process_group("gloo", init_method="file://" + args.store,
                            rank=int(os.environ["RANK"]), world_size=2)
    counts = {}
    _count_collectives(counts)
    seen = []  # (batch_idx, collectives counted when it started, the sum of its inputs)

    class StopTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.rank = context.distributed.get_rank()
            torch.manual_seed(1)
            self.model = context.wrap_model(torch.nn.Linear(2, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def _data(self, n):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(n, 2, generator=g)
            return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))

        def build_training_data_loader(self):
            return pytorch.DataLoader(self._data(RECORDS), shuffle=True,
                                      batch_size=self.context.get_per_slot_batch_size())

        def build_validation_data_loader(self):
            return pytorch.DataLoader(self._data(GLOBAL_BATCH),
                                      batch_size=self.context.get_per_slot_batch_size())

        def train_batch(self, batch, epoch_idx, batch_idx):
            seen.append((batch_idx, dict(counts), float(batch[0].sum())))
            if hp.get("stop_at") == batch_idx and hp.get("stop_rank") == self.rank:
                self.context.set_stop_requested(True)
            if hp.get("sigterm_at") == batch_idx and hp.get("sigterm_rank") == self.rank:
                os.kill(os.getpid(), signal.SIGTERM)
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch, batch_idx):
            x, y = batch
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}

    with pytorch.init(hparams={"global_batch_size": GLOBAL_BATCH},
                      checkpoint_storage=args.storage) as context:
        trial = StopTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(hp["batches"]),
                                            reporting_period=pytorch.Batch(1000),
                                            latest_checkpoint=hp.get("latest"))
        reason = context._core.preempt.reason
        del trial
    dist.barrier()
    dist.destroy_process_group()
    with open(args.out, "w") as f:
        json.dump({"seen": seen, "reason": reason}, f)


# -- the tests ------------------------------------------------------------------------------

class TwoRankStopTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        self._runs = 0

    def train(self, **hparams):
        """Runs 2 ranks to their exit (each must exit 0), checkpointing to self.storage; each
        rank's output."""
        store = os.path.join(self.tmp.name, f"store{self._runs}")
        self._runs += 1
        procs = []
        for rank in range(2):
            env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
            env.update({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                        "LOCAL_WORLD_SIZE": "2", "GLOO_SOCKET_IFNAME": "lo",
                        "OMP_NUM_THREADS": "1"})
            out = os.path.join(self.tmp.name, f"rank{rank}.json")
            log = open(os.path.join(self.tmp.name, f"rank{rank}.log"), "w")
            self.addCleanup(log.close)
            procs.append((subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", "--out", out,
                 "--storage", self.storage, "--store", store, "--hparams", json.dumps(hparams)],
                env=env, cwd=self.tmp.name, stdout=log, stderr=subprocess.STDOUT), out, log))
        results = []
        for rank, (p, out, log) in enumerate(procs):
            try:
                rc = p.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                for q, _, _ in procs:
                    q.kill()
                rc = "timeout"
            log.flush()
            with open(log.name) as f:
                self.assertEqual(rc, 0, f"rank {rank}:\n{f.read()[-3000:]}")
            with open(out) as f:
                results.append(json.load(f))
        return results

    def checkpoints(self):
        """The steps_completed of every checkpoint written, sorted."""
        return sorted(self.checkpoint_ids())

    def checkpoint_ids(self):
        """steps_completed -> storage id of every checkpoint written."""
        ids = {}
        for name in os.listdir(self.storage):
            metadata = os.path.join(self.storage, name, "metadata.json")
            if os.path.exists(metadata):  # Not tensorboard/.
                with open(metadata) as f:
                    ids[json.load(f)["steps_completed"]] = name
        return ids

    def batches(self, result):
        return [b for b, _, _ in result["seen"]]

    def inputs(self, result):
        """batch_idx -> the sum of the inputs this rank trained it on."""
        return {b: total for b, _, total in result["seen"]}

    def test_one_tensor_all_reduce_a_batch_and_no_object_collective(self):
        results = self.train(batches=10)
        for rank, result in enumerate(results):
            self.assertEqual(self.batches(result), list(range(10)), rank)
            # Between the starts of batches 1 and 9: 8 stop checks, one all-reduce each.
            first, last = result["seen"][1][1], result["seen"][9][1]
            calls = {name: last.get(name, 0) - first.get(name, 0) for name in COLLECTIVES}
            self.assertEqual(calls, dict({n: 0 for n in COLLECTIVES}, all_reduce=8), rank)
        self.assertEqual(self.checkpoints(), [10])

    def test_stop_requested_on_the_other_rank_stops_both_after_that_batch(self):
        results = self.train(batches=20, stop_at=3, stop_rank=1)
        self.assertEqual([self.batches(r) for r in results], [[0, 1, 2, 3]] * 2)
        self.assertEqual([r["reason"] for r in results], ["", ""])  # Not a preemption.
        self.assertEqual(self.checkpoints(), [4])

    def test_stop_requested_on_the_chief_stops_both_after_that_batch(self):
        results = self.train(batches=20, stop_at=5, stop_rank=0)
        self.assertEqual([self.batches(r) for r in results], [list(range(6))] * 2)
        self.assertEqual(self.checkpoints(), [6])

    def test_sigterm_to_another_rank_preempts_both_with_its_reason(self):
        results = self.train(batches=20, sigterm_at=2, sigterm_rank=1)
        self.assertEqual([self.batches(r) for r in results], [[0, 1, 2]] * 2)
        self.assertEqual([r["reason"] for r in results], ["SIGTERM received"] * 2)
        self.assertEqual(self.checkpoints(), [3])

    def test_a_stop_loses_no_batch_the_ranks_fetched_while_checking(self):
        # Batch 6 is fetched during batch 5's stop check, which says stop: the resume trains
        # it, on the same inputs as a run that never stopped (mid-epoch: 8 batches an epoch).
        uninterrupted = self.train(batches=12)
        self.storage = os.path.join(self.tmp.name, "stopped")
        stopped = self.train(batches=12, stop_at=5, stop_rank=1)
        self.assertEqual([self.batches(r) for r in stopped], [list(range(6))] * 2)
        resumed = self.train(batches=12, latest=self.checkpoint_ids()[6])
        self.assertEqual([self.batches(r) for r in resumed], [list(range(6, 12))] * 2)
        for rank in range(2):
            self.assertEqual({**self.inputs(stopped[rank]), **self.inputs(resumed[rank])},
                             self.inputs(uninterrupted[rank]), rank)
        self.assertEqual(self.checkpoints(), [6, 12])

    def test_sigterm_to_the_chief_preempts_both(self):
        results = self.train(batches=20, sigterm_at=4, sigterm_rank=0)
        self.assertEqual([self.batches(r) for r in results], [list(range(5))] * 2)
        self.assertEqual([r["reason"] for r in results], ["SIGTERM received"] * 2)
        self.assertEqual(self.checkpoints(), [5])


if __name__ == "__main__":
    if "--worker" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--worker", action="store_true")
        parser.add_argument("--out", required=True)
        parser.add_argument("--storage", required=True)
        parser.add_argument("--store", required=True)
        parser.add_argument("--hparams", required=True)
        worker(parser.parse_args())
    else:
        unittest.main()
