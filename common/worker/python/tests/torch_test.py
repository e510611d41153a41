"""DistributedContext.from_torch_distributed: object collectives over a real Gloo process
group of two processes, with det.core.init reporting through the fake master."""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import unittest

from tests import fake_master

WORKER = r"""
import json, sys
import torch.distributed as dist
import det
dist.init_process_group("gloo")
ctx = det.core.DistributedContext.from_torch_distributed()
with det.core.init(distributed=ctx) as core:
    out = {
        "rank": ctx.rank, "size": ctx.size, "local": [ctx.local_rank, ctx.local_size],
        "cross": [ctx.cross_rank, ctx.cross_size],
        "allgather": ctx.allgather({"r": ctx.rank}), "broadcast": ctx.broadcast(ctx.rank + 5),
        "gather": ctx.gather(ctx.rank), "preempt": core.preempt.should_preempt(),
    }
    if ctx.rank == 0:
        core.train.report_training_metrics(steps_completed=1, metrics={"loss": 2.0})
print(json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TorchDistributedTest(unittest.TestCase):
    def test_collectives_over_gloo(self):
        with tempfile.TemporaryDirectory() as tmp, fake_master.serve(2) as (service, address):
            port = str(free_port())
            procs = []
            for rank in range(2):
                env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
                env.update(fake_master.allocation_env(address, tmp, rank=rank, world_size=2))
                env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                            "OMP_NUM_THREADS": "1"})
                procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
            outs = []
            for p in procs:
                out, err = p.communicate(timeout=120)
                self.assertEqual(p.returncode, 0, err)
                outs.append(__import__("json").loads(out.strip().splitlines()[-1]))
        for rank, o in enumerate(outs):
            self.assertEqual((o["rank"], o["size"], o["local"], o["cross"]),
                             (rank, 2, [rank, 2], [0, 1]))
            self.assertEqual(o["allgather"], [{"r": 0}, {"r": 1}])
            self.assertEqual(o["broadcast"], 5)
            self.assertEqual(o["gather"], [0, 1] if rank == 0 else None)
            self.assertFalse(o["preempt"])
        # Collectives went over Gloo, not the master; reports still reach the master.
        self.assertEqual(service.rounds, {})
        self.assertEqual([dict(r.values) for r in service.rows("training")], [{"loss": 2.0}])


if __name__ == "__main__":
    unittest.main()
