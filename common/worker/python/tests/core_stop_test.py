"""How det.core stops, against a real gRPC WorkerService on loopback (fake_master): init tells
the master at once that the run answers should_preempt() (so a stop gives it the grace
period), a SIGTERM during a checkpoint store waits for the store to be registered, and
det's temporary TensorBoard directory is removed at close after its last upload."""

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

import det
from det.core import _tensorboard
from tests import fake_master


class StorageTest(unittest.TestCase):
    """A temporary checkpoint storage, self.storage."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        os.makedirs(self.storage)


class InitAsksTheMasterTest(StorageTest):
    def setUp(self):
        super().setUp()
        self.stack = contextlib.ExitStack()
        self.addCleanup(self.stack.close)
        self.service, self.address = self.stack.enter_context(fake_master.serve())

    def env(self, **kw):
        return fake_master.environment(fake_master.allocation_env(self.address, self.storage, **kw))

    def test_init_asks_once_without_waiting_then_long_polls(self):
        # Before the script calls should_preempt(): a stop during its first checkpoint must
        # find the master knowing that this run answers it.
        with self.env(), det.core.init():
            # Answered before init returned (the long poll may have followed already).
            requests = list(self.service.preempt_requests)
            self.assertGreaterEqual(len(requests), 1)
            self.assertEqual(requests[0].wait_ms, 0)
            self.assertEqual((requests[0].auth.allocation_id, requests[0].auth.token,
                              requests[0].auth.rank), ("7.1", "tok", 0))
            self.assertTrue(self.service.wait_for(
                lambda: len(self.service.preempt_requests) > 1))
            self.assertGreater(self.service.preempt_requests[1].wait_ms, 0)

    def test_a_stop_decided_before_init_is_the_first_answer(self):
        self.service.set_preempt(True, "stopped early by the searcher")
        with self.env(), det.core.init() as core:
            # Told at once: no long poll follows.
            self.assertEqual(len(self.service.preempt_requests), 1)
            self.assertTrue(core.preempt.should_preempt())
            self.assertEqual(core.preempt.reason, "stopped early by the searcher")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def test_a_worker_that_is_not_the_chief_does_not_ask(self):
        with self.env(rank=1, world_size=2), contextlib.ExitStack() as stack:
            dist = det.core.DistributedContext(rank=1, size=2, local_rank=1, local_size=2,
                                               cross_rank=0, cross_size=1)
            stack.enter_context(det.core.init(distributed=dist))
            self.assertEqual(self.service.preempt_requests, [])

    def run_script(self, body: str) -> subprocess.CompletedProcess:
        """`body` run by a fresh interpreter as rank 0 of the allocation (its own process:
        SIGTERM may end it)."""
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("DET_"):
                del env[k]
        env.update(fake_master.allocation_env(self.address, self.storage))
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        script = textwrap.dedent("""\
            import os, signal, det
            with det.core.init() as core:
            """) + textwrap.indent(textwrap.dedent(body), "    ")
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=120)

    def test_a_sigterm_during_a_store_ends_the_process_once_the_checkpoint_is_registered(self):
        done = self.run_script("""\
            with core.checkpoint.store_path({"steps_completed": 10}) as (path, uuid):
                os.kill(os.getpid(), signal.SIGTERM)
                (path / "state").write_text("after the signal")
                print("wrote", flush=True)
            print("not reached", flush=True)
            """)
        self.assertEqual(done.returncode, -signal.SIGTERM, done.stdout + done.stderr)
        self.assertIn("wrote", done.stdout)
        self.assertNotIn("not reached", done.stdout)
        self.assertIn("SIGTERM received while a checkpoint is stored: exiting once it is "
                      "registered", done.stderr)
        [report] = self.service.checkpoints
        self.assertEqual(report.checkpoint.total_batches, 10)
        with open(os.path.join(report.checkpoint.storage_path, "state")) as f:
            self.assertEqual(f.read(), "after the signal")

    def test_a_sigterm_outside_a_store_ends_a_script_that_never_asked_at_once(self):
        done = self.run_script("""\
            os.kill(os.getpid(), signal.SIGTERM)
            print("not reached", flush=True)
            """)
        self.assertEqual(done.returncode, -signal.SIGTERM, done.stdout + done.stderr)
        self.assertNotIn("not reached", done.stdout)

    def test_a_sigterm_once_the_script_asks_is_a_preemption(self):
        done = self.run_script("""\
            assert not core.preempt.should_preempt()
            with core.checkpoint.store_path({"steps_completed": 3}) as (path, uuid):
                os.kill(os.getpid(), signal.SIGTERM)
            print("preempt:", core.preempt.should_preempt(), core.preempt.reason, flush=True)
            """)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("preempt: True SIGTERM received", done.stdout)
        self.assertEqual(len(self.service.checkpoints), 1)


class TensorboardDirectoryTest(StorageTest):
    def remote(self) -> pathlib.Path:
        return pathlib.Path(self.storage, "tensorboard", "experiment", "3", "trial", "7")

    def test_dets_own_directory_is_removed_at_close_after_its_uploads(self):
        with fake_master.serve() as (service, address), \
                fake_master.environment(fake_master.allocation_env(address, self.storage)), \
                det.core.init() as core:
            local = core.train.get_tensorboard_path()
            self.assertTrue(local.name.startswith("det-tensorboard-7.1-0-"), local)
            self.assertEqual(local.parent, pathlib.Path(tempfile.gettempdir()))
            (local / "events.1").write_text("reported")
            core.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
        self.assertFalse(local.exists())
        self.assertEqual((self.remote() / "events.1").read_text(), "reported")

    def test_in_manual_mode_only_what_the_script_uploaded_is_kept(self):
        with fake_master.serve() as (service, address), \
                fake_master.environment(fake_master.allocation_env(address, self.storage)), \
                det.core.init(tensorboard_mode=det.core.TensorboardMode.MANUAL) as core:
            local = core.train.get_tensorboard_path()
            (local / "events.1").write_text("uploaded")
            core.train.upload_tensorboard_files()
            (local / "events.2").write_text("never uploaded")
        self.assertFalse(local.exists())
        self.assertEqual(sorted(os.listdir(self.remote())), ["events.1"])

    def test_a_context_that_never_made_one_removes_nothing(self):
        with fake_master.serve() as (service, address), \
                fake_master.environment(fake_master.allocation_env(address, self.storage)), \
                det.core.init() as core:
            files = core.train._tensorboard
        self.assertIsNotNone(files)
        self.assertFalse(self.remote().exists())

    def test_a_directory_it_was_given_is_left_alone(self):
        given = pathlib.Path(self.tmp.name, "mine")
        files = _tensorboard.TensorboardFiles(given, pathlib.Path(self.tmp.name, "remote"))
        (files.local_dir / "events").write_text("x")
        self.assertEqual(files.sync(lambda _: True, lambda p, _: p, 0), 1)
        files.close()
        self.assertEqual((given / "events").read_text(), "x")


if __name__ == "__main__":
    unittest.main()
