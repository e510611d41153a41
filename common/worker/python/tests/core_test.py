"""det.core against a real gRPC WorkerService on loopback (fake_master)."""

import contextlib
import io
import json
import math
import os
import signal
import tempfile
import threading
import unittest

import grpc

import det
from det import _client
from det.core import _distributed, _preempt, _timings
from tests import fake_master


class CoreTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        os.makedirs(self.storage)
        self.stack = contextlib.ExitStack()
        self.service, self.address = self.stack.enter_context(fake_master.serve())
        self.addCleanup(self.stack.close)
        self.addCleanup(self.tmp.cleanup)

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
            self.assertEqual(core.checkpoint.get_metadata(sid), {"steps_completed": 30, "note": "x"})
            with core.checkpoint.restore_path(sid) as restored:
                self.assertEqual(restored, final)
            with core.checkpoint.restore_path(final) as restored:
                self.assertEqual(restored, final)
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
            self.assertTrue(self.service.wait_for(lambda: self.service.preempt_requests))
            self.assertFalse(core.preempt.should_preempt())
            self.assertGreater(self.service.preempt_requests[0].wait_ms, 0)
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
            self.assertTrue(self.service.wait_for(lambda: self.service.preempt_requests))
            core.preempt._thread.join(30)
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

    def test_searcher_operation_in_epochs(self):
        # 640 records / 64 per batch = 10 batches per epoch; the master asks for 20 batches.
        with self.env(target_batches=20, max_length=(4, "epochs")), det.core.init() as core:
            self.assertEqual(core.searcher.get_configured_units(), "epochs")
            ops = []
            for op in core.searcher.operations():
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
        # What det reads comes from DET_TRIAL_SPEC alone, not the user's copies.
        for name in ("DET_TRIAL_ID", "DET_TRIAL_SEED", "DET_HPARAMS", "DET_LATEST_CHECKPOINT",
                     "DET_EXPERIMENT_CONFIG"):
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

    def test_missing_variables_inside_an_allocation_are_named(self):
        env = fake_master.allocation_env(self.address, self.storage)
        del env["DET_TRIAL_SPEC"]
        with fake_master.environment(env):
            with self.assertRaisesRegex(det.ClusterEnvironmentError,
                                        "DET_TRIAL_SPEC is not set .*det agent"):
                det.core.init()
        for bad, why in (("{", "is not a det.v1.TrialSpec"),
                         ('{"trial_id": "seven"}', "is not a det.v1.TrialSpec"),
                         ('{"no_such_field": 1}', "is not a det.v1.TrialSpec"),
                         ('{"hparams_json": "[1]"}', "DET_TRIAL_SPEC.hparams_json is not a JSON")):
            env["DET_TRIAL_SPEC"] = bad
            with fake_master.environment(env):
                with self.assertRaisesRegex(det.ClusterEnvironmentError, why):
                    det.get_cluster_info()
        env = fake_master.allocation_env(self.address, self.storage)
        env["RANK"] = "x"
        with fake_master.environment(env):
            with self.assertRaisesRegex(det.ClusterEnvironmentError, "RANK is not an integer: 'x'"):
                det.get_cluster_info()

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
