"""det.core against a real gRPC WorkerService on loopback (fake_master)."""

import contextlib
import io
import itertools
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
import warnings
from typing import Tuple

import grpc

import det
from det import _client
from det._proto import worker_pb2
from det.core import _checkpoint, _distributed, _preempt, _timings
from tests import fake_master


def self_signed_certificate(directory: str, name: str) -> Tuple[bytes, bytes, str]:
    """(key PEM, certificate PEM, certificate path) for 127.0.0.1, made by openssl."""
    key, cert = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    with open(key, "rb") as k, open(cert, "rb") as c:
        return k.read(), c.read(), cert


class TlsTest(unittest.TestCase):
    """A TLS master (agent.yaml master_cert_file, passed to workers as DET_MASTER_CERT_FILE)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        os.makedirs(self.storage)

    def test_reports_reach_a_tls_master_verified_against_the_clusters_ca(self):
        key, cert, cert_path = self_signed_certificate(self.tmp.name, "master")
        with fake_master.serve(tls=(key, cert)) as (service, address):
            env = fake_master.allocation_env(address, self.storage)
            env[_client.MASTER_CERT_FILE_ENV] = cert_path
            with fake_master.environment(env), det.core.init() as core:
                core.train.report_training_metrics(steps_completed=3, metrics={"loss": 0.5})
            self.assertEqual([r.total_batches for r in service.rows("training")], [3])

    def test_an_unreadable_ca_file_is_an_error_naming_it(self):
        missing = os.path.join(self.tmp.name, "nope.pem")
        with self.assertRaisesRegex(det.ClusterEnvironmentError,
                                    f"DET_MASTER_CERT_FILE: cannot read '{missing}'"):
            _client.master_channel(grpc, "127.0.0.1:1", {"DET_MASTER_CERT_FILE": missing})


class TopLevelTest(unittest.TestCase):
    def test_determineds_top_level_names_without_importing_torch(self):
        # det.InvalidHP and det.LOG_FORMAT as in Determined; `import det` stays torch-free.
        code = ("import logging, sys, det\n"
                "logging.Formatter(det.LOG_FORMAT).format(logging.makeLogRecord({'msg': 'x'}))\n"
                "assert issubclass(det.InvalidHP, Exception)\n"
                "print('torch' in sys.modules)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        self.assertEqual(out.strip(), "False")
        import det.pytorch
        self.assertIs(det.pytorch.InvalidHP, det.InvalidHP)


class CoreTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        os.makedirs(self.storage)
        self.stack = contextlib.ExitStack()
        self.service, self.address = self.stack.enter_context(fake_master.serve())
        self.addCleanup(self.stack.close)
        self.addCleanup(self.tmp.cleanup)
        # searcher.operations() is deprecated as in Determined 0.38; tests that check the
        # warning catch it themselves.
        self.stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore", FutureWarning)

    def env(self, **kw):
        return fake_master.environment(fake_master.allocation_env(self.address, self.storage, **kw))

    def test_training_metrics_and_timings_are_one_report(self):
        with self.env(), det.core.init() as core:
            with core.train.timer("train_batch"):
                pass
            core.train.record_timing("dataloader_next", 0.002)
            core.train.record_timing("dataloader_next", 0.004)
            core.train.report_training_metrics(steps_completed=10, metrics={"loss": 0.5})
        self.assertEqual(len(self.service.metrics), 1)
        req = self.service.metrics[0]
        self.assertEqual((req.auth.allocation_id, req.auth.token, req.auth.rank, req.trial_id),
                         ("7.1", "tok", 0, 7))
        self.assertEqual([(m.group, m.total_batches) for m in req.metrics],
                         [("training", 10), ("timings", 10)])
        self.assertEqual(dict(req.metrics[0].values), {"loss": 0.5})
        timings = dict(req.metrics[1].values)
        self.assertEqual(timings["dataloader_next_count"], 2)
        self.assertAlmostEqual(timings["dataloader_next_mean_ms"], 3.0)
        self.assertAlmostEqual(timings["dataloader_next_p50_ms"], 2.0)
        self.assertAlmostEqual(timings["dataloader_next_max_ms"], 4.0)
        self.assertIn("train_batch_p99_ms", timings)

    def test_rates_from_the_second_report(self):
        with self.env(), det.core.init() as core:
            core.train.report_training_metrics(steps_completed=10, metrics={"loss": 1})
            core.train.report_training_metrics(steps_completed=20, metrics={"loss": 1})
        timings = self.service.rows("timings")
        self.assertEqual(len(timings), 1)
        self.assertGreater(timings[0].values["samples_per_second"], 0)
        self.assertAlmostEqual(timings[0].values["samples_per_second"],
                               timings[0].values["batches_per_second"] * 64)

    def test_a_string_metric_is_a_type_error_naming_it_and_nothing_is_sent(self):
        with self.env(), det.core.init() as core:
            with self.assertRaisesRegex(TypeError, r"training metric 'acc' at steps_completed=3: "
                                                   r"expected a number .* got str 'high'"):
                core.train.report_training_metrics(steps_completed=3,
                                                   metrics={"loss": 1.0, "acc": "high"})
            with self.assertRaisesRegex(TypeError, r"validation metric 'x'.*NoneType"):
                core.train.report_validation_metrics(steps_completed=3, metrics={"x": None})
        self.assertEqual(self.service.metrics, [])

    def test_nan_and_infinities_are_numbers(self):
        import numpy as np
        with self.env(), det.core.init() as core:
            core.train.report_validation_metrics(
                steps_completed=5, metrics={"a": float("nan"), "b": float("inf"),
                                            "c": -math.inf, "d": np.float32(1.5), "e": 2})
        values = self.service.rows("validation")[0].values
        self.assertTrue(math.isnan(values["a"]))
        self.assertEqual((values["b"], values["c"], values["d"], values["e"]),
                         (math.inf, -math.inf, 1.5, 2.0))

    def test_master_refusal_is_a_master_error_with_its_reason(self):
        self.service.metrics_error = (grpc.StatusCode.PERMISSION_DENIED, "wrong token")
        with self.env(), det.core.init() as core:
            with self.assertRaisesRegex(det.MasterError, "ReportMetrics to master .*"
                                                         "PERMISSION_DENIED: wrong token"):
                core.train.report_training_metrics(steps_completed=1, metrics={"loss": 1})

    def test_a_report_after_the_allocation_ended_is_a_clear_error(self):
        # What det-master answers a worker of an allocation that is no longer running.
        self.service.metrics_error = (grpc.StatusCode.PERMISSION_DENIED,
                                      "allocation 7.1 is not running")
        with self.env(), det.core.init() as core:
            with self.assertRaisesRegex(det.AllocationEndedError,
                                        "ReportMetrics to master .*allocation 7.1 is not running; "
                                        "this process's allocation is over"):
                core.train.report_training_metrics(steps_completed=1, metrics={"loss": 1})

    def test_progress_is_recorded_in_batches(self):
        with self.env(target_batches=200), det.core.init() as core:
            core.train.report_progress(0.25)
            with self.assertRaisesRegex(ValueError, "progress: expected a number in"):
                core.train.report_progress(1.5)
        rows = self.service.rows("progress")
        self.assertEqual([(r.total_batches, r.values["progress"]) for r in rows], [(50, 0.25)])

    def test_store_path_writes_renames_and_registers(self):
        with self.env(), det.core.init() as core:
            with core.checkpoint.store_path({"steps_completed": 30, "note": "x"}) as (path, sid):
                self.assertTrue(os.path.isdir(path))
                with open(os.path.join(path, "model.pt"), "wb") as f:
                    f.write(b"12345")
                os.makedirs(os.path.join(path, "sub"))
                with open(os.path.join(path, "sub", "opt.pt"), "wb") as f:
                    f.write(b"1")
                self.assertEqual(self.service.checkpoints, [])
            final = os.path.join(self.storage, sid)
            self.assertEqual(os.listdir(self.storage), [sid])
            # Private to this OS user: the directories 0700, the files 0600.
            for p, mode in [(final, 0o700), (os.path.join(final, "sub"), 0o700),
                            (os.path.join(final, "model.pt"), 0o600),
                            (os.path.join(final, "sub", "opt.pt"), 0o600),
                            (os.path.join(final, "metadata.json"), 0o600)]:
                self.assertEqual(oct(os.stat(p).st_mode & 0o777), oct(mode), p)
            self.assertEqual(core.checkpoint.get_metadata(sid), {"steps_completed": 30, "note": "x"})
            with core.checkpoint.restore_path(sid) as restored:
                self.assertEqual(restored, pathlib.Path(final))
            with core.checkpoint.restore_path(final) as restored:
                self.assertEqual(restored, pathlib.Path(final))
        c = self.service.checkpoints[0].checkpoint
        self.assertEqual((c.uuid, c.storage_path, c.total_batches), (sid, final, 30))
        self.assertEqual(dict(c.resources), {"model.pt": 5, "sub/opt.pt": 1,
                                             "metadata.json": len(c.metadata_json)})
        self.assertEqual(json.loads(c.metadata_json), {"steps_completed": 30, "note": "x"})

    def test_store_path_failure_leaves_nothing(self):
        with self.env(), det.core.init() as core:
            with self.assertRaises(KeyError):
                with core.checkpoint.store_path({"steps_completed": 1}) as (path, _):
                    open(os.path.join(path, "half"), "w").close()
                    raise KeyError("boom")
        self.assertEqual(os.listdir(self.storage), [])
        self.assertEqual(self.service.checkpoints, [])

    def test_store_path_is_for_the_chief_unless_sharded(self):
        dist = _distributed.DistributedContext(rank=1, size=2, local_rank=1, local_size=2,
                                               cross_rank=0, cross_size=1)
        with self.env(rank=1, world_size=2), det.core.init(distributed=dist) as core:
            with self.assertRaisesRegex(RuntimeError, r"chief only; rank 1 called it"):
                with core.checkpoint.store_path({"steps_completed": 1}):
                    pass

    def test_paths_outside_the_storage_are_refused(self):
        with self.env(), det.core.init() as core:
            for bad in ["/etc", self.storage + "/../x", self.tmp.name + "/other/uuid"]:
                with self.assertRaisesRegex(ValueError, "outside the checkpoint storage"):
                    with core.checkpoint.restore_path(bad):
                        pass
            with self.assertRaisesRegex(ValueError, "is not a checkpoint name"):
                core.checkpoint.get_metadata("..")
            # What tests/integration/core_api/bad_input_test.cc reads in the trial's log.
            with self.assertRaisesRegex(ValueError, "^restore_path: '/etc/passwd' is outside the "
                                                    "checkpoint storage"):
                core.checkpoint.get_metadata("/etc/passwd")
            with self.assertRaisesRegex(FileNotFoundError, "checkpoint 'nope' does not exist"):
                with core.checkpoint.restore_path("nope"):
                    pass
            with self.assertRaisesRegex(TypeError, "steps_completed"):
                with core.checkpoint.store_path({"steps_completed": "3"}):
                    pass

    def test_no_checkpoint_storage_is_a_clear_error(self):
        env = fake_master.allocation_env(self.address, checkpoint_dir="")
        with fake_master.environment(env), det.core.init() as core:
            with self.assertRaisesRegex(RuntimeError, "has no checkpoint_storage"):
                with core.checkpoint.store_path({"steps_completed": 1}):
                    pass

    def test_should_preempt_answers_from_the_master(self):
        with self.env(), det.core.init() as core:
            self.assertFalse(core.preempt.should_preempt())
            # init's ask, then the long poll.
            self.assertTrue(self.service.wait_for(lambda: len(self.service.preempt_requests) > 1))
            self.assertGreater(self.service.preempt_requests[1].wait_ms, 0)
            self.service.set_preempt(True, "experiment 3 paused")
            deadline = threading.Event()
            for _ in range(600):
                if core.preempt.should_preempt():
                    break
                deadline.wait(0.05)
            self.assertTrue(core.preempt.should_preempt())
            self.assertEqual(core.preempt.reason, "experiment 3 paused")

    def test_should_preempt_after_the_allocation_ended_is_a_clear_error(self):
        with self.env(), det.core.init() as core:
            self.service.set_preempt_error(grpc.StatusCode.FAILED_PRECONDITION,
                                           "allocation 7.1 has ended")
            core.preempt.should_preempt()
            self.assertTrue(self.service.wait_for(lambda: self.service.preempt_requests))
            with self.assertRaisesRegex(det.AllocationEndedError,
                                        "should_preempt: .*allocation 7.1 has ended"):
                for _ in range(600):
                    core.preempt.should_preempt()
                    threading.Event().wait(0.05)

    def test_a_master_without_should_preempt_leaves_sigterm(self):
        self.service.set_preempt_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        with contextlib.redirect_stderr(io.StringIO()) as err, self.env(), \
                det.core.init() as core:
            # init's ask was refused: nothing polls.
            self.assertEqual(len(self.service.preempt_requests), 1)
            self.assertIsNone(core.preempt._thread)
            self.assertFalse(core.preempt.should_preempt())
            self.assertIn("does not offer it", err.getvalue())
            os.kill(os.getpid(), signal.SIGTERM)
            self.assertTrue(core.preempt.should_preempt())

    def test_sigterm_is_a_preemption_once_the_script_asks(self):
        with self.env(), det.core.init() as core:
            self.assertFalse(core.preempt.should_preempt())
            os.kill(os.getpid(), signal.SIGTERM)
            self.assertTrue(core.preempt.should_preempt())
            self.assertEqual(core.preempt.reason, "SIGTERM received")
        # Told to stop: a later SIGTERM while exiting is ignored.
        os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def test_the_handler_is_restored_when_not_stopping(self):
        with self.env(), det.core.init() as core:
            self.assertFalse(core.preempt.should_preempt())
        self.assertEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)

    def test_lengths_in_records_and_no_length(self):
        # Global batch 64: 6,400 records are 100 batches; a partial batch counts whole.
        with self.env(target_batches=100, max_length=(6400, "records")):
            trial = det.get_cluster_info().trial
            self.assertTrue(trial.has_length())
            self.assertEqual(trial.to_batches(6400), 100)
            self.assertEqual(trial.to_batches(6401), 101)
            self.assertEqual(trial.from_batches(100), 6400)
        # A searcher without max_length (Determined 0.38): no unit, target 0.
        with self.env(target_batches=0, max_length=(0, "")):
            self.assertFalse(det.get_cluster_info().trial.has_length())

    def test_searcher_operation_in_epochs(self):
        # 640 records / 64 per batch = 10 batches per epoch; the master asks for 20 batches.
        with self.env(target_batches=20, max_length=(4, "epochs")), det.core.init() as core:
            self.assertEqual(core.searcher.get_configured_units(), det.core.Unit.EPOCHS)
            ops = []
            with self.assertWarnsRegex(FutureWarning, "deprecated in Determined 0.38"):
                ops_iter = iter(core.searcher.operations())
                first = next(ops_iter)
            for op in itertools.chain([first], ops_iter):
                ops.append(op)
                self.assertEqual(op.length, 2)
                op.report_progress(1)
                op.report_completed(0.25)
                with self.assertRaisesRegex(RuntimeError, "already completed"):
                    op.report_completed(0.25)
            self.assertEqual(len(ops), 1)
        self.assertEqual([(r.total_batches, dict(r.values)) for r in self.service.rows("validation")],
                         [(20, {"validation_loss": 0.25})])
        self.assertEqual([r.total_batches for r in self.service.rows("progress")], [10])

    def test_report_completed_does_not_repeat_the_validation_report(self):
        with self.env(target_batches=50), det.core.init() as core:
            for op in core.searcher.operations():
                self.assertEqual(op.length, 50)
                core.train.report_validation_metrics(steps_completed=50,
                                                     metrics={"validation_loss": 0.5, "acc": 0.9})
                op.report_completed(0.5)
        self.assertEqual(len(self.service.rows("validation")), 1)

    def test_an_operation_left_incomplete_is_an_error(self):
        with self.env(), det.core.init() as core:
            with self.assertRaisesRegex(RuntimeError, "was not completed"):
                for _ in core.searcher.operations():
                    pass
            # Leaving the loop early (preemption) is fine.
            for _ in core.searcher.operations():
                break

    def test_cluster_info(self):
        spec = fake_master.trial_spec(self.storage)
        spec.latest_checkpoint = self.storage + "/abc-123"
        spec.data_json = '{"dir": "/data/fm"}'
        spec.validation_period = 30
        env = fake_master.allocation_env(self.address, self.storage, rank=1, world_size=2,
                                         spec=spec)
        # What det reads comes from the trial spec alone, not the user's copies.
        for name in ("DET_TRIAL_ID", "DET_TRIAL_SEED", "DET_HPARAMS_FILE", "DET_LATEST_CHECKPOINT",
                     "DET_EXPERIMENT_CONFIG_FILE"):
            del env[name]
        with fake_master.environment(env):
            info = det.get_cluster_info()
        self.assertEqual((info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed),
                         (7, 3, 42))
        self.assertEqual(info.trial.hparams, {"global_batch_size": 64, "learning_rate": 0.1})
        self.assertEqual((info.trial.global_batch_size, info.trial.per_slot_batch_size), (64, 32))
        self.assertEqual((info.trial.records_per_epoch, info.trial.batches_per_epoch), (640, 10))
        self.assertEqual((info.trial.searcher_metric, info.trial.smaller_is_better),
                         ("validation_loss", True))
        self.assertEqual((info.trial.validation_period, info.trial.checkpoint_dir),
                         (30, self.storage))
        self.assertEqual(info.user_data, {"dir": "/data/fm"})
        self.assertEqual(info.latest_checkpoint, "abc-123")
        self.assertEqual(info.latest_checkpoint_path, self.storage + "/abc-123")
        self.assertEqual((info.rank, info.world_size, info.allocation_id), (1, 2, "7.1"))
        self.assertEqual(info.task_type, "TRIAL")

    def test_each_rank_is_a_container_as_the_core_api_tutorial_counts_them(self):
        # Determined's 4_distributed.py launches len(slot_ids) workers per container, ranks
        # container_rank * len(slot_ids) + local_rank of len(container_addrs) * len(slot_ids);
        # det runs the entrypoint once per slot, so that is one worker per rank.
        env = fake_master.allocation_env(self.address, self.storage, rank=1, world_size=2)
        env["MASTER_ADDR"] = "10.0.0.1"
        with fake_master.environment(env):
            info = det.get_cluster_info()
        self.assertEqual(info.slot_ids, ["1"])
        self.assertEqual((info.container_rank, info.container_addrs), (1, ["10.0.0.1"] * 2))
        # Four ranks on two agents, seen from rank 3 (agent 1, local rank 1): the chief's
        # agent's address for ranks 0-1, this agent's for 2-3.
        env.update({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                    "CROSS_RANK": "1", "CROSS_SIZE": "2", "DET_COLLECTIVE_HOST": "10.0.0.2",
                    "DET_SLOT_IDS": "1"})
        with fake_master.environment(env):
            info = det.get_cluster_info()
        self.assertEqual((info.container_rank, info.container_addrs),
                         (3, ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"]))
        # A third agent's ranks: not told, so empty.
        env.update({"WORLD_SIZE": "6", "CROSS_SIZE": "3"})
        with fake_master.environment(env):
            info = det.get_cluster_info()
        self.assertEqual(info.container_addrs[4:], ["", ""])

    def test_missing_variables_inside_an_allocation_are_named(self):
        env = fake_master.allocation_env(self.address, self.storage)
        del env["DET_TRIAL_SPEC_FILE"]
        with fake_master.environment(env):
            with self.assertRaisesRegex(det.ClusterEnvironmentError,
                                        "DET_TRIAL_SPEC_FILE is not set .*det agent"):
                det.core.init()
        env["DET_TRIAL_SPEC_FILE"] = os.path.join(self.storage, "no-such-spec.json")
        with fake_master.environment(env):
            with self.assertRaisesRegex(det.ClusterEnvironmentError,
                                        "DET_TRIAL_SPEC_FILE names '.*no-such-spec.json', which "
                                        "cannot be read: .*No such file"):
                det.get_cluster_info()
        for bad, why in (("{", "is not a det.v1.TrialSpec"),
                         ('{"trial_id": "seven"}', "is not a det.v1.TrialSpec"),
                         ('{"no_such_field": 1}', "is not a det.v1.TrialSpec"),
                         ('{"hparams_json": "[1]"}', "DET_TRIAL_SPEC.hparams_json is not a JSON")):
            env["DET_TRIAL_SPEC_FILE"] = fake_master.launch_file("DET_TRIAL_SPEC", bad)
            with fake_master.environment(env):
                with self.assertRaisesRegex(det.ClusterEnvironmentError, why):
                    det.get_cluster_info()
        env = fake_master.allocation_env(self.address, self.storage)
        env["RANK"] = "x"
        with fake_master.environment(env):
            with self.assertRaisesRegex(det.ClusterEnvironmentError, "RANK is not an integer: 'x'"):
                det.get_cluster_info()

    # -- checkpoints as Determined's: pathlib.Path, upload/download, delete --------------

    def test_store_and_restore_paths_are_pathlib_paths(self):
        # Determined's Core API tutorial, as published.
        with self.env(), det.core.init() as core:
            with core.checkpoint.store_path({"steps_completed": 4}) as (path, storage_id):
                self.assertIsInstance(path, pathlib.Path)
                with (path / "checkpoint.pt").open("w") as f:
                    f.write("weights")
                with open(os.path.join(path, "extra.txt"), "w") as f:  # os.path still works.
                    f.write("x")
            with core.checkpoint.restore_path(storage_id) as path:
                self.assertIsInstance(path, pathlib.Path)
                self.assertEqual((path / "checkpoint.pt").read_text(), "weights")
                self.assertEqual(path, pathlib.Path(self.storage, storage_id))
            with core.checkpoint.restore_path(pathlib.Path(self.storage, storage_id),
                                              det.core.DownloadMode.NoSharedDownload,
                                              selector=lambda p: p == "x") as path:
                self.assertTrue((path / "extra.txt").exists())  # Shared storage: every file.

    def test_upload_and_download_take_str_or_pathlike_and_selectors(self):
        src = pathlib.Path(self.tmp.name, "src")
        (src / "sub").mkdir(parents=True)
        (src / "model.pt").write_text("m")
        (src / "sub" / "opt.pt").write_text("o")
        (src / "notes.txt").write_text("n")
        with self.env(), det.core.init() as core:
            sid = core.checkpoint.upload(src, {"steps_completed": 9},
                                         selector=lambda p: p.endswith(".pt"))
            sid2 = core.checkpoint.upload(str(src), {"steps_completed": 10})
            out = pathlib.Path(self.tmp.name, "out")
            core.checkpoint.download(sid, out)
            self.assertEqual(sorted(str(p.relative_to(out)) for p in out.rglob("*")
                                    if p.is_file()),
                             ["metadata.json", "model.pt", "sub/opt.pt"])
            out2 = os.path.join(self.tmp.name, "out2")
            core.checkpoint.download(sid2, out2, det.core.DownloadMode.NoSharedDownload,
                                     selector=lambda p: p.startswith("sub/"))
            self.assertEqual(os.listdir(out2), ["sub"])
            with self.assertRaisesRegex(RuntimeError, "would upload nothing"):
                core.checkpoint.upload(None)
            with self.assertRaisesRegex(FileNotFoundError, "is not a directory"):
                core.checkpoint.upload(pathlib.Path(self.tmp.name, "nope"), {"steps_completed": 1})
        self.assertEqual([c.checkpoint.total_batches for c in self.service.checkpoints], [9, 10])
        self.assertEqual(sorted(self.service.checkpoints[0].checkpoint.resources),
                         ["metadata.json", "model.pt", "sub/opt.pt"])

    def test_checkpoints_need_steps_completed_on_a_cluster(self):
        with self.env(), det.core.init() as core:
            with self.assertRaisesRegex(ValueError, "needs a 'steps_completed' item"):
                with core.checkpoint.store_path({"epoch": 1}):
                    self.fail("nothing is created")
        self.assertEqual(os.listdir(self.storage), [])
        with fake_master.environment({}), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), \
                det.core.init(checkpoint_storage=pathlib.Path(self.storage)) as core:
            with core.checkpoint.store_path() as (path, sid):
                pass
            self.assertEqual(core.checkpoint.get_metadata(sid), {})

    def test_delete_removes_files_not_the_registration(self):
        with self.env(), det.core.init() as core:
            with core.checkpoint.store_path({"steps_completed": 1}) as (path, sid):
                (path / "model.pt").write_text("m")
                (path / "opt").mkdir()
                (path / "opt" / "state.pt").write_text("o")
                (path / "notes.txt").write_text("n")
            core.checkpoint.delete(sid, globs=["**/*.pt"])
            with core.checkpoint.restore_path(sid) as p:
                self.assertEqual(sorted(os.listdir(p)), ["metadata.json", "notes.txt"])
            core.checkpoint.delete(sid)
            self.assertEqual(os.listdir(self.storage), [])
            with self.assertRaisesRegex(FileNotFoundError, f"checkpoint '{sid}' does not exist"):
                core.checkpoint.delete(sid)
            with self.assertRaisesRegex(ValueError, "outside the checkpoint storage"):
                core.checkpoint.delete("/etc/x")
        self.assertEqual(len(self.service.checkpoints), 1)

    def test_metadata_of_sharded_checkpoints_merges(self):
        merged, conflicts = _checkpoint.merge_metadata(
            [{"steps_completed": 3, "a": {"x": 1}}, {"a": {"y": 2}}, {"steps_completed": 3}])
        self.assertEqual((merged, conflicts), ({"steps_completed": 3, "a": {"x": 1, "y": 2}}, {}))
        _, conflicts = _checkpoint.merge_metadata([{"a": [1]}, {"a": [2]}, {"b": {"c": 1}},
                                                   {"b": 1}])
        self.assertEqual(conflicts, {"/a": [0, 1], "/b": [2, 3]})

    # -- the training context's other names ----------------------------------------------

    def test_set_status_goes_to_the_trial_log(self):
        out = io.StringIO()
        with self.env(), det.core.init() as core, contextlib.redirect_stdout(out):
            core.train.set_status("evaluating")
            with self.assertRaises(TypeError):
                core.train.set_status(3)
        self.assertIn("det: trial status: evaluating", out.getvalue())
        self.assertEqual(core.train.status, "evaluating")

    def test_what_the_master_cannot_answer_says_so(self):
        with self.env(), det.core.init() as core, contextlib.redirect_stdout(io.StringIO()) as out:
            for call in (lambda: core.train.set_metadata({"a": 1}), core.train.get_metadata):
                with self.assertRaisesRegex(NotImplementedError,
                                            r"proto/worker.proto.*no such call"):
                    call()
            core.train.report_early_exit(det.core.EarlyExitReason.USER_REQUESTED_STOP)
            core.train.report_early_exit("EXITED_REASON_USER_REQUESTED_STOP")
            with self.assertRaises(ValueError):
                core.train.report_early_exit("bored")
        self.assertIn("report_early_exit(USER_REQUESTED_STOP)", out.getvalue())
        self.assertEqual(self.service.metrics, [])
        self.assertEqual(self.service.early_exits, [])  # USER_REQUESTED_STOP sends nothing.

    def test_experiment_best_validation_comes_from_the_master(self):
        with self.env(), det.core.init() as core:
            self.assertIsNone(core.train.get_experiment_best_validation())
            self.service.best_validation = 0.25
            self.assertEqual(core.train.get_experiment_best_validation(), 0.25)
            self.service.best_validation = 0.0  # A real value, not "none yet".
            self.assertEqual(core.train.get_experiment_best_validation(), 0.0)
        auth = self.service.best_requests[0].auth
        self.assertEqual((auth.allocation_id, auth.token, auth.rank), ("7.1", "tok", 0))

    def test_experiment_best_validation_errors_of_the_master(self):
        with self.env(), det.core.init() as core:
            self.service.best_error = (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            with self.assertRaisesRegex(NotImplementedError,
                                        "get_experiment_best_validation.*does not offer it"):
                core.train.get_experiment_best_validation()
            self.service.best_error = (grpc.StatusCode.PERMISSION_DENIED,
                                       "allocation 7.1 is not running")
            with self.assertRaisesRegex(_client.AllocationEndedError, "is not running"):
                core.train.get_experiment_best_validation()
        self.assertIsNone(_client.OffClusterClient(io.StringIO()).get_experiment_best_validation())

    def test_invalid_hp_is_reported_to_the_master_then_exit_0(self):
        with self.assertRaises(SystemExit) as exited, self.env(), \
                contextlib.redirect_stderr(io.StringIO()) as err:
            with det.core.init():
                raise det.InvalidHP("lr too big")
        self.assertEqual(exited.exception.code, 0)
        self.assertEqual(len(self.service.early_exits), 1)
        req = self.service.early_exits[0]
        self.assertEqual(req.reason, worker_pb2.EARLY_EXIT_REASON_INVALID_HP)
        self.assertEqual((req.auth.allocation_id, req.auth.token, req.auth.rank), ("7.1", "tok", 0))
        self.assertIn("det.InvalidHP (lr too big): the trial ends as invalid", err.getvalue())

    def test_invalid_hp_without_the_masters_call_fails_the_run(self):
        # A master older than the package (no ReportEarlyExit): leaving init() with
        # det.InvalidHP keeps the exception (the run fails and is restarted) and says why.
        self.service.early_exit_error = (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        err = io.StringIO()
        with self.assertRaisesRegex(det.InvalidHP, "lr too big"), self.env(), \
                contextlib.redirect_stderr(err):
            with det.core.init():
                raise det.InvalidHP("lr too big")
        self.assertIn("det.InvalidHP (lr too big) is not reported: report_early_exit",
                      err.getvalue())
        self.assertIn("does not offer it", err.getvalue())

    def test_invalid_hp_is_reported_by_the_chief_then_exit_0(self):
        class Recording(_client.OffClusterClient):
            def __init__(self):
                super().__init__(io.StringIO())
                self.early_exits = []

            def report_early_exit(self, reason):
                self.early_exits.append(reason)

        for rank, expected in ((0, ["INVALID_HP"]), (1, [])):
            client = Recording()
            distributed = det.core.DistributedContext(rank=rank, size=2, local_rank=rank,
                                                      local_size=2, cross_rank=0, cross_size=1)
            context = det.core.Context(client=client, distributed=distributed, info=None,
                                       checkpoint_dir=self.storage,
                                       preempt_mode=det.core.PreemptMode.ChiefOnly,
                                       searcher_length=None)
            with self.assertRaises(SystemExit) as exited, \
                    contextlib.redirect_stderr(io.StringIO()) as err:
                with context:
                    raise det.InvalidHP("batch size too big")
            self.assertEqual(exited.exception.code, 0)
            self.assertEqual(client.early_exits, expected, f"rank {rank}")
            self.assertIn("the trial ends as invalid; exiting 0", err.getvalue())
            self.assertTrue(context._closed)

    def test_invalid_hp_off_cluster_prints_and_exits_0(self):
        out = io.StringIO()
        with fake_master.environment({}), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as e:
            with det.core.init(checkpoint_storage=self.storage):
                raise det.InvalidHP()
        self.assertEqual(e.exception.code, 0)
        self.assertIn("not reported): early exit: INVALID_HP", out.getvalue())

    def test_tensorboard_files_upload_in_manual_mode(self):
        with self.env(rank=0), det.core.init(
                tensorboard_mode=det.core.TensorboardMode.MANUAL) as core:
            tb = core.train.get_tensorboard_path()
            self.addCleanup(lambda: __import__("shutil").rmtree(tb, ignore_errors=True))
            self.assertIsInstance(tb, pathlib.Path)
            (tb / "events.out.tfevents.1").write_text("e1")
            (tb / "skip.log").write_text("s")
            core.train.upload_tensorboard_files(
                selector=lambda p: p.name.startswith("events"),
                mangler=lambda p, rank: pathlib.Path(f"rank{rank}") / p)
            remote = pathlib.Path(self.storage, "tensorboard", "experiment", "3", "trial", "7")
            self.assertEqual([str(p.relative_to(remote)) for p in remote.rglob("*")
                              if p.is_file()], ["rank0/events.out.tfevents.1"])

    def test_tensorboard_files_upload_on_each_report_in_auto_mode(self):
        with self.env(), det.core.init() as core:
            tb = core.train.get_tensorboard_path()
            self.addCleanup(lambda: __import__("shutil").rmtree(tb, ignore_errors=True))
            with self.assertRaisesRegex(RuntimeError, "only be used in MANUAL mode"):
                core.train.upload_tensorboard_files()
            (tb / "events.out.tfevents.2").write_text("e")
            core.train.report_training_metrics(steps_completed=1, metrics={"loss": 1})
        remote = pathlib.Path(self.storage, "tensorboard", "experiment", "3", "trial", "7")
        self.assertTrue((remote / "events.out.tfevents.2").exists())

    def test_batch_metrics_are_not_dropped_silently(self):
        with self.env(), det.core.init() as core, \
                contextlib.redirect_stderr(io.StringIO()) as err:
            core.train.report_training_metrics(steps_completed=2, metrics={"loss": 1},
                                               batch_metrics=[{"loss": 1}, {"loss": 1}])
        self.assertIn("batch_metrics are not stored", err.getvalue())

    # -- profiler ------------------------------------------------------------------------

    def test_profiler_reports_system_metrics_while_on(self):
        with self.env(), det.core.init() as core:
            core.train.report_training_metrics(steps_completed=5, metrics={"loss": 1})
            with self.assertRaisesRegex(ValueError, "sampling_interval"):
                core.profiler.on(sampling_interval=0.01)
            with self.assertRaisesRegex(ValueError, "samples_per_report"):
                core.profiler.on(samples_per_report=0)
            core.profiler.on(sampling_interval=0.1, samples_per_report=2)
            core.profiler.on()  # Idempotent.
            name = "system/a1/cpu/cpu_util_simple"
            self.assertTrue(self.service.wait_for(
                lambda: any(name in r.values for r in self.service.rows("timings"))))
            core.profiler.off()
            rows = [r for r in self.service.rows("timings") if name in r.values]
            self.assertFalse(core.profiler.is_on)
        self.assertEqual({r.total_batches for r in rows}, {5})
        values = rows[0].values
        self.assertIn("system/a1/memory/memory_free", values)
        self.assertGreater(values["system/a1/memory/memory_free"], 0)
        self.assertIn("system/a1/network/net_throughput_sent", values)
        threading.Event().wait(0.3)
        self.assertEqual(len([r for r in self.service.rows("timings") if name in r.values]),
                         len(rows))

    def test_profiler_collects_on_local_chiefs_only(self):
        dist = _distributed.DistributedContext(rank=1, size=2, local_rank=1, local_size=2,
                                               cross_rank=0, cross_size=1)
        with self.env(rank=1, world_size=2), det.core.init(distributed=dist) as core:
            core.profiler.on(sampling_interval=0.1, samples_per_report=1)
            self.assertFalse(core.profiler.is_on)
        with fake_master.environment({}), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()) as err, \
                det.core.init(checkpoint_storage=self.storage) as core:
            self.assertIsInstance(core.profiler, det.core.DummyProfilerContext)
            core.profiler.on()
            core.profiler.off()
        self.assertIn("no system metrics are collected", err.getvalue())

    # -- context, init, preemption, searcher -----------------------------------------------

    def test_context_start_and_close_are_idempotent(self):
        with self.env():
            core = det.core.init()
            self.assertIs(core.start(), core)
            with core:
                self.assertFalse(core.preempt.should_preempt())
            core.close()
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'no_such_option'"):
            det.core.init(no_such_option=1)

    def test_checkpoint_storage_given_on_a_cluster_is_ignored_loudly(self):
        with contextlib.redirect_stderr(io.StringIO()) as err, self.env(), \
                det.core.init(checkpoint_storage="/elsewhere") as core:
            self.assertEqual(core.checkpoint.directory, self.storage)
        self.assertIn("checkpoint_storage='/elsewhere') is ignored", err.getvalue())
        with contextlib.redirect_stderr(io.StringIO()) as err, self.env(), \
                det.core.init(checkpoint_storage=self.storage):
            pass
        self.assertNotIn("ignored", err.getvalue())

    def test_off_cluster_checkpoint_storage_forms(self):
        with fake_master.environment({}), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            for storage in ({"type": "directory", "container_path": self.storage},
                            {"type": "shared_fs", "host_path": self.tmp.name,
                             "storage_path": "checkpoints"}):
                with det.core.init(checkpoint_storage=storage) as core:
                    self.assertEqual(os.path.normpath(core.checkpoint.directory), self.storage)
            for bad, error in (("s3://bucket/x", ValueError), ({"type": "s3"}, ValueError),
                               (3, TypeError)):
                with self.assertRaises(error):
                    det.core.init(checkpoint_storage=bad)

    def test_preempt_context_lifecycle_and_dummy(self):
        dist = det.core.DummyDistributedContext()
        p = _preempt.PreemptContext(_client.OffClusterClient(), dist, on_cluster=False)
        with self.assertRaisesRegex(RuntimeError, "before PreemptContext.start"):
            p.should_preempt()
        with p:
            with self.assertRaisesRegex(RuntimeError, "already called"):
                p.start()
            self.assertFalse(p.should_preempt(auto_ack=False))
            p.acknowledge_preemption_signal()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with det.core.DummyPreemptContext(dist, det.core.PreemptMode.ChiefOnly) as d:
            self.assertFalse(d.should_preempt())
        worker = _distributed.DistributedContext(rank=1, size=2, local_rank=1, local_size=2,
                                                 cross_rank=0, cross_size=1)
        with det.core.DummyPreemptContext(worker, "CHIEF_ONLY") as d:
            with self.assertRaisesRegex(RuntimeError, "only the chief"):
                d.should_preempt()

    def test_searcher_names_of_determined(self):
        self.assertIs(det.core.SearcherMode("CHIEF_ONLY"), det.core.SearcherMode.ChiefOnly)
        self.assertIs(det.core.SearcherMode("CHEIF_ONLY"), det.core.SearcherMode.ChiefOnly)
        with self.env(target_batches=30), det.core.init() as core:
            core.searcher.acknowledge_out_of_ops()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                for op in core.searcher.operations(det.core.SearcherMode.ChiefOnly):
                    op.report_completed(0.5)
                    op.report_progress(op.length)  # The same length is fine.
                    with self.assertRaisesRegex(RuntimeError, "already completed"):
                        op.report_progress(1)
        spec = fake_master.trial_spec(self.storage)
        spec.searcher.max_length_unit = ""
        with fake_master.environment(fake_master.allocation_env(
                self.address, self.storage, spec=spec)), det.core.init() as core:
            self.assertIsNone(core.searcher.get_configured_units())
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            lengths = []
            for op in det.core.DummySearcherContext(det.core.DummyDistributedContext(),
                                                    length=4).operations():
                lengths.append(op.length)
                op.report_completed(0.1)
            self.assertEqual(lengths, [4])
            op = det.core.DummySearcherOperation(7, is_chief=True)
            op.report_completed(0.2)
        self.assertIn('validation metrics at batch 4: {"searcher_metric": 0.1}', out.getvalue())

    def test_dummy_contexts(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            dist = det.core.DummyDistributedContext()
            self.assertEqual((dist.get_rank(), dist.get_size(), dist.get_num_agents()), (0, 1, 1))
            ckpt = det.core.DummyCheckpointContext(dist, pathlib.Path(self.storage))
            with ckpt.store_path() as (path, sid):
                (path / "w").write_text("w")
            with ckpt.restore_path(sid) as path:
                self.assertEqual((path / "w").read_text(), "w")
            train = det.core.DummyTrainContext(pathlib.Path(self.tmp.name, "tb"))
            train.report_validation_metrics(3, {"x": 1.0})
            train.upload_tensorboard_files()
            self.assertEqual(train.get_tensorboard_path(), pathlib.Path(self.tmp.name, "tb"))
        self.assertIn(f"checkpoint {sid} at batch 0", out.getvalue())
        self.assertIn('validation metrics at batch 3: {"x": 1.0}', out.getvalue())
        self.assertIn("TensorBoard files stay in", out.getvalue())

    def test_every_public_name_of_determined_core(self):
        names = ["CheckpointContext", "Context", "DistributedContext", "DownloadMode",
                 "DummyCheckpointContext", "DummyDistributedContext", "DummyPreemptContext",
                 "DummyProfilerContext", "DummySearcherContext", "DummySearcherOperation",
                 "DummyTrainContext", "EarlyExitReason", "PreemptContext", "PreemptMode",
                 "ProfilerContext", "SearcherContext", "SearcherMode", "SearcherOperation",
                 "TensorboardMode", "TrainContext", "Unit", "init"]
        for name in names:
            self.assertTrue(hasattr(det.core, name), name)
        methods = {
            det.core.DistributedContext: [
                "from_torch_distributed", "from_horovod", "from_deepspeed", "get_rank",
                "get_size", "get_local_rank", "get_local_size", "get_cross_rank",
                "get_cross_size", "get_num_agents", "allgather", "gather", "broadcast",
                "allgather_local", "gather_local", "broadcast_local", "close"],
            det.core.CheckpointContext: ["store_path", "restore_path", "upload", "download",
                                         "get_metadata", "delete"],
            det.core.TrainContext: [
                "report_training_metrics", "report_validation_metrics", "report_metrics",
                "report_progress", "report_early_exit", "get_experiment_best_validation",
                "set_status", "upload_tensorboard_files", "get_tensorboard_path"],
            det.core.SearcherContext: ["operations", "acknowledge_out_of_ops",
                                       "get_configured_units"],
            det.core.SearcherOperation: ["report_progress", "report_completed", "length"],
            det.core.PreemptContext: ["should_preempt", "acknowledge_preemption_signal",
                                      "start", "close"],
            det.core.ProfilerContext: ["on", "off"],
            det.core.Context: ["start", "close"],
        }
        for cls, ms in methods.items():
            for m in ms:
                self.assertTrue(hasattr(cls, m), f"{cls.__name__}.{m}")
        self.assertEqual(det.core.EarlyExitReason.INVALID_HP.value, "EXITED_REASON_INVALID_HP")
        self.assertEqual([m.value for m in det.core.PreemptMode],
                         ["WORKERS_ASK_CHIEF", "CHIEF_ONLY", "WORKERS_ASK_MASTER"])

    def test_off_cluster_prints_what_it_would_report(self):
        out = io.StringIO()
        with fake_master.environment({}), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(io.StringIO()):
            self.assertIsNone(det.get_cluster_info())
            with det.core.init(checkpoint_storage=self.storage, searcher_length=3) as core:
                core.train.report_training_metrics(steps_completed=2, metrics={"loss": 0.5})
                with core.checkpoint.store_path({"steps_completed": 2}) as (path, sid):
                    pass
                self.assertFalse(core.preempt.should_preempt())
                self.assertEqual([op.length for op in core.searcher.operations()
                                  if op.report_completed(1.0) is None], [3])
                self.assertEqual(core.distributed.allgather("x"), ["x"])
        text = out.getvalue()
        self.assertIn('not reported): training metrics at batch 2: {"loss": 0.5}', text)
        self.assertIn(f"checkpoint {sid} at batch 2 in {self.storage}/{sid}", text)
        self.assertIn('validation metrics at batch 3: {"searcher_metric": 1.0}', text)
        self.assertTrue(os.path.isdir(os.path.join(self.storage, sid)))


class TimingsTest(unittest.TestCase):
    def test_nearest_rank_percentiles_as_the_cpp_harness(self):
        s = _timings.summarize({"x": [float(i) for i in range(1, 101)]})
        self.assertEqual((s["x_p50_ms"], s["x_p90_ms"], s["x_p99_ms"], s["x_max_ms"],
                          s["x_count"], s["x_mean_ms"]), (50.0, 90.0, 99.0, 100.0, 100.0, 50.5))
        self.assertEqual(_timings.summarize({"y": []}), {})


class DistributedTest(unittest.TestCase):
    """Three ranks as threads, each with its own connection, through the master's
    Rendezvous."""

    def run_ranks(self, size, body):
        with fake_master.serve(world_size=size) as (service, address):
            results, errors = [None] * size, []

            def rank_main(rank):
                try:
                    client = _client.GrpcWorkerClient(address, "7.1", "tok", rank, 7)
                    dist = _distributed.DistributedContext(
                        rank=rank, size=size, local_rank=rank % 2, local_size=2 if rank < 2 else 1,
                        cross_rank=rank // 2, cross_size=2, _client_for_rendezvous=client,
                        _rendezvous_prefix="7.1")
                    results[rank] = body(dist, client)
                    client.close()
                except BaseException as e:  # noqa: B902
                    errors.append(e)

            threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            if errors:
                raise errors[0]
            return results, service

    def test_object_collectives(self):
        def body(dist, _):
            return (dist.allgather({"rank": dist.rank}), dist.broadcast(f"from {dist.rank}"),
                    dist.gather(dist.rank * 10), dist.allgather_local(dist.rank),
                    dist.broadcast_local(dist.rank))

        results, service = self.run_ranks(3, body)
        for rank, (gathered, bcast, gathered0, local, blocal) in enumerate(results):
            self.assertEqual(gathered, [{"rank": 0}, {"rank": 1}, {"rank": 2}])
            self.assertEqual(bcast, "from 0")
            self.assertEqual(gathered0, [0, 10, 20] if rank == 0 else None)
            self.assertEqual(local, [0, 1] if rank < 2 else [2])
            self.assertEqual(blocal, 0 if rank < 2 else 2)
        self.assertEqual(sorted(service.rounds), [f"7.1/det-core/{i}" for i in range(1, 6)])

    def test_sharded_upload_unions_the_ranks_files(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory())
        storage = os.path.join(tmp, "storage")

        def body(dist, client):
            ckpt = _checkpoint.CheckpointContext(client, dist, storage)
            mine = pathlib.Path(tmp, f"rank{dist.rank}")
            (mine / "sub").mkdir(parents=True)
            (mine / f"part{dist.rank}.pt").write_text(str(dist.rank))
            (mine / "same.txt").write_text("identical")
            (mine / "sub" / "skip.tmp").write_text("x")
            sid = ckpt.upload(mine if dist.rank != 1 else None,
                              {"steps_completed": 6, f"rank{dist.rank}": dist.rank},
                              shard=True, selector=lambda p: not p.endswith(".tmp"))
            (mine / "same.txt").write_text(f"differs on {dist.rank}")
            try:
                ckpt.upload(mine, {"steps_completed": 7}, shard=True)
            except RuntimeError as e:
                conflict = str(e)
            # One rank's missing directory fails every rank (none waits for it).
            with self.assertRaisesRegex(FileNotFoundError, r"rank 2: upload: '.*' is not a dir"):
                ckpt.upload(mine if dist.rank != 2 else pathlib.Path(tmp, "nope"),
                            {"steps_completed": 8}, shard=True)
            return sid, conflict

        results, service = self.run_ranks(3, body)
        sid = results[0][0]
        self.assertEqual({r[0] for r in results}, {sid})
        self.assertEqual(sorted(os.listdir(os.path.join(storage, sid))),
                         ["metadata.json", "part0.pt", "part2.pt", "same.txt"])
        for _, conflict in results:
            self.assertRegex(conflict, r"refusing to upload with file conflicts: "
                                       r"same.txt uploaded by ranks \[0, 1, 2\]")
        self.assertEqual(os.listdir(storage), [sid])  # The refused one left nothing.
        c = service.checkpoints[0].checkpoint
        self.assertEqual(json.loads(c.metadata_json),
                         {"steps_completed": 6, "rank0": 0, "rank1": 1, "rank2": 2})
        self.assertEqual(len(service.checkpoints), 1)

    def test_sharded_store_path_refuses_conflicting_metadata(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory())

        def body(dist, client):
            ckpt = _checkpoint.CheckpointContext(client, dist, tmp)
            with self.assertRaisesRegex(RuntimeError, r"/steps_completed given differently by "
                                                      r"ranks \[0, 1, 2\]"):
                with ckpt.store_path({"steps_completed": dist.rank}, shard=True):
                    pass
            with ckpt.store_path({"steps_completed": 2}, shard=True) as (path, sid):
                self.assertIsInstance(path, pathlib.Path)
                (path / f"shard{dist.rank}").write_text("s")
            return sid

        results, _ = self.run_ranks(3, body)
        self.assertEqual(sorted(os.listdir(os.path.join(tmp, results[0]))),
                         ["metadata.json", "shard0", "shard1", "shard2"])

    def test_download_is_shared_by_the_workers_of_an_agent(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory())
        storage = os.path.join(tmp, "storage")
        os.makedirs(os.path.join(storage, "ck"))
        for name in ("a", "b", "c"):
            pathlib.Path(storage, "ck", name).write_text(name)
        picks = {0: "a", 1: "b", 2: "a"}

        def body(dist, client):
            ckpt = _checkpoint.CheckpointContext(client, dist, storage)
            # Ranks 0 and 1 share agent 0 (local_size 2); rank 2 is alone on agent 1.
            ckpt.download("ck", pathlib.Path(tmp, f"agent{dist.cross_rank}"),
                          selector=lambda p: p == picks[dist.rank])
            with self.assertRaisesRegex(FileNotFoundError, "'nope' does not exist"):
                ckpt.download("nope", pathlib.Path(tmp, "x"))
            return sorted(os.listdir(os.path.join(tmp, f"agent{dist.cross_rank}")))

        results, _ = self.run_ranks(3, body)
        self.assertEqual(results, [["a", "b"], ["a", "b"], ["a"]])

    def test_constructors_read_the_launchers_variables(self):
        torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                    "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
        with fake_master.environment(torchrun):
            d = det.core.DistributedContext.from_torch_distributed()
            self.assertEqual((d.get_rank(), d.get_size(), d.get_local_rank(), d.get_local_size(),
                              d.get_cross_rank(), d.get_cross_size(), d.get_num_agents()),
                             (3, 4, 1, 2, 1, 2, 2))
        deepspeed = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_SIZE": "2",
                     "CROSS_RANK": "1", "CROSS_SIZE": "2", "DET_CHIEF_IP": "10.0.0.1"}
        with fake_master.environment(deepspeed):
            d = det.core.DistributedContext.from_deepspeed()
            self.assertEqual((d.rank, d.size, d.local_rank, d.local_size, d.cross_rank,
                              d.cross_size, d.chief_ip), (2, 4, 0, 2, 1, 2, "10.0.0.1"))
        with fake_master.environment({}):
            # Determined's scripts: `try: ...from_torch_distributed() except KeyError: None`.
            with self.assertRaisesRegex(KeyError, "RANK"):
                det.core.DistributedContext.from_torch_distributed()
            with self.assertRaisesRegex(KeyError, "RANK"):
                det.core.DistributedContext.from_deepspeed()

        class Hvd:
            rank, size, local_rank, local_size = (lambda: 5), (lambda: 8), (lambda: 1), (lambda: 4)
            cross_rank, cross_size = (lambda: 1), (lambda: 2)

        d = det.core.DistributedContext.from_horovod(Hvd, chief_ip="h0")
        self.assertEqual((d.rank, d.size, d.local_rank, d.local_size, d.cross_rank,
                          d.cross_size, d.chief_ip), (5, 8, 1, 4, 1, 2, "h0"))
        d = det.core.DummyDistributedContext()
        self.assertEqual((d.allgather(1), d.gather(2), d.broadcast(3), d.allgather_local(4),
                          d.gather_local(5), d.broadcast_local()), ([1], [2], 3, [4], [5], None))
        with self.assertRaisesRegex(ValueError, "must all be given"):
            det.core.DistributedContext(rank=0, size=1)

    def test_should_preempt_is_the_chiefs_answer_on_every_rank(self):
        def body(dist, client):
            p = _preempt.PreemptContext(client, dist)
            p.start()
            try:
                first = p.should_preempt()
                if dist.rank == 0:
                    service_ref[0].set_preempt(True, "experiment 3 paused")
                    self.assertTrue(service_ref[0].wait_for(lambda: True))
                    while not p._local():
                        threading.Event().wait(0.02)
                dist.allgather(None)  # The chief has seen it.
                return first, p.should_preempt(), p.reason
            finally:
                p.close()

        service_ref = [None]
        orig = fake_master.serve

        @contextlib.contextmanager
        def capture(world_size):
            with orig(world_size) as (service, address):
                service_ref[0] = service
                yield service, address

        fake_master.serve = capture
        try:
            results, service = self.run_ranks(2, body)
        finally:
            fake_master.serve = orig
        self.assertEqual(results, [(False, True, "experiment 3 paused")] * 2)
        # Only the chief asks the master.
        self.assertEqual({r.auth.rank for r in service.preempt_requests}, {0})


if __name__ == "__main__":
    unittest.main()
