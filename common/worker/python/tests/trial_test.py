"""det.pytorch's Trial API: a tiny PyTorchTrial (tests/trial_model.py) trained in local mode
and against the real gRPC fake master, in-process and as `python3 -m det.pytorch.run`
processes (one and two ranks, Gloo on loopback)."""

import contextlib
import inspect
import io
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import grpc
import torch

from det import pytorch
from det._proto import worker_pb2
from tests import fake_master, tfevents, trial_model

REPORT = re.compile(r"det \(off-cluster, not reported\): (\w+) metrics at batch (\d+): (.*)$")
PYTHONPATH = os.pathsep.join(p for p in sys.path if p)


def records(path, kind=None):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        out = [json.loads(line) for line in f]
    return [r for r in out if kind is None or r["kind"] == kind]


def torch_load(path):
    # torch >= 2.6 loads tensors alone by default; the checkpoint has RNG states too.
    if "weights_only" in inspect.signature(torch.load).parameters:
        return torch.load(path, map_location="cpu", weights_only=False)
    return torch.load(path, map_location="cpu")


@contextlib.contextmanager
def import_from(path):
    sys.path.insert(0, path)
    try:
        yield
    finally:
        sys.path.remove(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recorder(pytorch.PyTorchCallback):
    def __init__(self):
        self.events = []
        self.restored = None

    def on_trial_startup(self, first_batch_idx, checkpoint_uuid):
        self.events.append(("startup", first_batch_idx))

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        self.events.append(("workload", len(batch_metrics), avg_metrics))

    def on_training_epoch_end(self, epoch_idx):
        self.events.append(("epoch_end", epoch_idx))

    def on_validation_end(self, metrics):
        self.events.append(("validation", metrics))

    def on_checkpoint_upload_end(self, uuid):
        self.events.append(("checkpoint", uuid))

    def state_dict(self):
        return {"events_so_far": len(self.events)}

    def load_state_dict(self, state):
        self.restored = state


def with_recorder(cls):
    class Recorded(cls):
        def build_callbacks(self):
            self.recorder = Recorder()
            return {"recorder": self.recorder}
    Recorded.__name__ = cls.__name__
    Recorded.__qualname__ = cls.__qualname__
    Recorded.__module__ = cls.__module__
    return Recorded


class LocalTest(unittest.TestCase):
    """Local training mode: no DET_MASTER, one rank, checkpoints in a local directory."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        self.log = os.path.join(self.tmp.name, "log.jsonl")

    def fit(self, trial_cls=trial_model.TinyTrial, hparams=None, log=None, **fit_kwargs):
        hp = {"global_batch_size": 4, "lr": 0.05, "log": log or self.log, **(hparams or {})}
        out = io.StringIO()
        with fake_master.environment({}), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(io.StringIO()), \
                pytorch.init(hparams=hp, checkpoint_storage=self.storage) as context:
            trial = with_recorder(trial_cls)(context)
            trainer = pytorch.Trainer(trial, context)
            try:
                trainer.fit(**fit_kwargs)
            finally:
                self.reports = [(m.group(1), int(m.group(2)), json.loads(m.group(3)))
                                for m in map(REPORT.match, out.getvalue().splitlines()) if m]
        return trial, context

    def checkpoints(self):
        return sorted((os.path.join(self.storage, d) for d in os.listdir(self.storage)
                       if not d.startswith(".") and d != "tensorboard"), key=os.path.getmtime)

    def test_periods_reports_and_checkpoint_contents(self):
        trial, context = self.fit(max_length=pytorch.Batch(10),
                                  validation_period=pytorch.Batch(5),
                                  checkpoint_period=pytorch.Batch(5),
                                  reporting_period=pytorch.Batch(2))
        training = [(b, m) for g, b, m in self.reports if g == "training"]
        self.assertEqual([b for b, _ in training], [2, 4, 5, 6, 8, 10])
        # Each report averages the batches of its window; tensors became plain numbers.
        self.assertEqual(training[0][1]["batch_idx_metric"], 0.5)
        self.assertEqual(training[2][1]["batch_idx_metric"], 4.0)
        self.assertEqual(training[1][1]["rank_metric"], 0.0)
        self.assertEqual([(m["batches"], m["epochs"]) for _, m in training[:2]], [(2, 0), (4, 0)])
        self.assertIsInstance(training[0][1]["loss"], float)
        validation = [(b, m) for g, b, m in self.reports if g == "validation"]
        self.assertEqual([b for b, _ in validation], [5, 10])
        # The same metrics in TensorBoard (Determined's names), copied to the storage.
        tb = os.path.join(self.storage, "tensorboard", "experiment", "0", "trial", "0")
        [events] = [os.path.join(tb, f) for f in os.listdir(tb) if "tfevents" in f]
        series = tfevents.scalars(events)
        self.assertEqual([(s, round(v, 6)) for s, v in series["Determined/batch_idx_metric"]],
                         [(b, round(m["batch_idx_metric"], 6)) for b, m in training])
        self.assertEqual([s for s, _ in series["Determined/val_validation_loss"]], [5, 10])
        self.assertEqual(series["Determined/val_batches"], [(5, 5.0), (10, 10.0)])
        # Validation: every batch of the 16-record set, averaged (first ids 0, 4, 8, 12).
        self.assertEqual(validation[0][1]["first_id"], 6.0)
        self.assertEqual(len(records(self.log, "eval")), 8)
        # Checkpoints at 5 and 10 (policy "best" is "all" locally; both coincide).
        ckpts = self.checkpoints()
        self.assertEqual(len(ckpts), 2)
        self.assertEqual([e[1] for e in trial.recorder.events if e[0] == "checkpoint"],
                         [os.path.basename(c) for c in ckpts])
        last = ckpts[-1]
        self.assertTrue({"state_dict.pth", "trial_state.pkl", "load_data.json",
                         "metadata.json"} <= set(os.listdir(last)))
        state = torch_load(os.path.join(last, "state_dict.pth"))
        self.assertEqual(sorted(state), ["callbacks", "lr_schedulers_state_dict",
                                         "models_state_dict", "optimizers_state_dict",
                                         "rng_state"])
        self.assertTrue(torch.equal(state["models_state_dict"][0]["weight"],
                                    trial.model.weight.detach().cpu()))
        self.assertEqual(state["callbacks"]["recorder"], {"events_so_far": len(
            trial.recorder.events) - 1})
        self.assertTrue({"cpu_rng_state", "np_rng_state", "random_rng_state"} <=
                        set(state["rng_state"]))
        with open(os.path.join(last, "trial_state.pkl"), "rb") as f:
            tstate = pickle.load(f)
        self.assertEqual((tstate["batches_trained"], tstate["epochs_trained"],
                          tstate["last_val"], tstate["last_ckpt"]), (10, 0, 10, 10))
        # 64 records / 4 per batch: 16 batches per epoch; the next is batch 10 of epoch 0.
        self.assertEqual((tstate["data_position"]["epoch"],
                          tstate["data_position"]["samples_in_epoch"]), (0, 40))
        with open(os.path.join(last, "load_data.json")) as f:
            load_data = json.load(f)
        self.assertEqual(load_data["trial_cls_spec"], "tests.trial_model:TinyTrial")
        self.assertEqual(load_data["hparams"]["global_batch_size"], 4)
        with open(os.path.join(last, "metadata.json")) as f:
            self.assertEqual(json.load(f)["steps_completed"], 10)
        # The trial comes back from its checkpoint for inference.
        loaded = pytorch.load_trial_from_checkpoint_path(
            last, trial_class=trial_model.TinyTrial)
        self.assertTrue(torch.equal(loaded.model.weight, trial.model.weight.detach().cpu()))
        self.assertIsInstance(loaded.context, pytorch.CheckpointLoadContext)
        self.assertEqual(loaded.context.get_hparam("lr"), 0.05)

    def test_checkpoints_hold_the_code_and_load_from_it(self):
        # The model definition (the working directory) goes into code/, and
        # load_trial_from_checkpoint_path imports the trial class from there.
        work = os.path.join(self.tmp.name, "work")
        os.makedirs(os.path.join(work, "pkg", "__pycache__"))
        with open(os.path.join(work, "pkg", "copied_model.py"), "w") as f:
            f.write("from tests import trial_model\n\n\n"
                    "class CopiedTrial(trial_model.TinyTrial):\n"
                    "    def source(self):\n        return __file__\n")
        open(os.path.join(work, "pkg", "__init__.py"), "w").close()
        open(os.path.join(work, "pkg", "__pycache__", "x.pyc"), "w").close()
        cwd = os.getcwd()
        os.chdir(work)
        self.addCleanup(os.chdir, cwd)
        self.storage = os.path.join(work, "checkpoints")  # Inside the working directory.
        with import_from(work):
            from pkg import copied_model
        self.fit(copied_model.CopiedTrial, max_length=pytorch.Batch(2))
        last = self.checkpoints()[-1]
        code = os.path.join(last, "code")
        self.assertEqual(sorted(os.path.relpath(os.path.join(d, f), code)
                                for d, _, fs in os.walk(code) for f in fs),
                         ["pkg/__init__.py", "pkg/copied_model.py"])
        with open(os.path.join(last, "load_data.json")) as f:
            self.assertEqual(json.load(f)["trial_cls_spec"], "pkg.copied_model:CopiedTrial")
        # Only the checkpoint's copy is left.
        shutil.rmtree(os.path.join(work, "pkg"))
        for name in ("pkg", "pkg.copied_model"):
            del sys.modules[name]
        os.chdir(cwd)
        loaded = pytorch.load_trial_from_checkpoint_path(last)
        self.assertEqual(type(loaded).__name__, "CopiedTrial")
        self.assertEqual(loaded.source(), os.path.join(last, "code", "pkg", "copied_model.py"))
        # det.import_from_path forgets what it imported from code/ after the load.
        self.assertFalse("pkg.copied_model" in sys.modules)
        state = torch_load(os.path.join(last, "state_dict.pth"))
        self.assertTrue(torch.equal(loaded.model.weight, state["models_state_dict"][0]["weight"]))
        with self.assertRaisesRegex(ValueError, "failed to import Trial class as nope:Trial"):
            with open(os.path.join(last, "load_data.json")) as f:
                data = json.load(f)
            data["trial_cls_spec"] = "nope:Trial"
            with open(os.path.join(last, "load_data.json"), "w") as f:
                json.dump(data, f)
            pytorch.load_trial_from_checkpoint_path(last)

    def test_resume_continues_at_the_next_batch(self):
        # Uninterrupted: 20 batches (an epoch is 16), in another log.
        whole_log = os.path.join(self.tmp.name, "whole.jsonl")
        whole, _ = self.fit(max_length=pytorch.Batch(20), log=whole_log,
                            checkpoint_policy="none")
        whole_train = records(whole_log, "train")
        os.remove(os.path.join(self.checkpoints()[0], "state_dict.pth"))
        # Interrupted: stopped after batch 7 (set_stop_requested), then resumed to 20.
        first, _ = self.fit(max_length=pytorch.Batch(20), hparams={"stop_at": 6},
                            checkpoint_policy="none")
        ckpt = self.checkpoints()[-1]
        with open(os.path.join(ckpt, "trial_state.pkl"), "rb") as f:
            self.assertEqual(pickle.load(f)["batches_trained"], 7)
        second, _ = self.fit(max_length=pytorch.Batch(20), latest_checkpoint=ckpt,
                             checkpoint_policy="none")
        self.assertEqual(second.recorder.events[0], ("startup", 7))
        # fit(latest_checkpoint=...) is read after the trial is built: the loaders see it.
        self.assertEqual([r["initial_batch"] for r in records(self.log, "loader")], [0, 7])
        self.assertEqual(second.recorder.restored, {"events_so_far": len(
            first.recorder.events) - 1})
        train = records(self.log, "train")
        self.assertEqual([r["batch_idx"] for r in train], list(range(20)))
        self.assertEqual([r["ids"] for r in train], [r["ids"] for r in whole_train])
        epoch0 = [i for r in train[:16] for i in r["ids"]]
        self.assertEqual(sorted(epoch0), list(range(64)))  # No record twice in an epoch.
        self.assertEqual([r["epoch_idx"] for r in train], [0] * 16 + [1] * 4)
        self.assertTrue(torch.equal(second.model.weight, whole.model.weight))

    def test_paused_and_resumed_reports_the_same_metrics_as_uninterrupted(self):
        # Every batch's training loss and every validation, bitwise: the resumed run restores
        # weights, optimizer, RNG states and the data position (CPU, one rank).
        # 20 batches cross an epoch (16), so the LR scheduler steps too.
        periods = dict(max_length=pytorch.Batch(20), reporting_period=pytorch.Batch(1),
                       validation_period=pytorch.Batch(8), checkpoint_policy="none")
        hparams = {"shuffle": True, "lr_mode": "STEP_EVERY_EPOCH"}
        self.fit(log=os.path.join(self.tmp.name, "whole.jsonl"), hparams=hparams, **periods)
        whole = [r for r in self.reports if r[0] in ("training", "validation")]
        self.fit(hparams={**hparams, "stop_at": 9}, **periods)  # Stops after batch 10.
        first = [r for r in self.reports if r[0] in ("training", "validation")]
        ckpt = self.checkpoints()[-1]
        self.fit(hparams=hparams, latest_checkpoint=ckpt, **periods)
        second = [r for r in self.reports if r[0] in ("training", "validation")]
        self.assertEqual([r[1] for r in first if r[0] == "training"], list(range(1, 11)))
        self.assertEqual(first + second, whole)
        lrs = [r["lr"] for r in records(os.path.join(self.tmp.name, "whole.jsonl"), "train")]
        self.assertEqual((lrs[15], lrs[16]), (0.05, 0.025))
        self.assertEqual(len([r for r in whole if r[0] == "validation"]), 3)

    def test_set_profiler_writes_traces_to_the_tensorboard_directory(self):
        class Profiled(trial_model.TinyTrial):
            def __init__(self, context):
                super().__init__(context)
                context.set_profiler(activities=[torch.profiler.ProfilerActivity.CPU],
                                     schedule=torch.profiler.schedule(wait=1, warmup=1,
                                                                      active=2))
        self.fit(Profiled, max_length=pytorch.Batch(6), reporting_period=pytorch.Batch(1))
        tb = os.path.join(self.storage, "tensorboard", "experiment", "0", "trial", "0")
        traces = [f for f in os.listdir(tb) if f.endswith(".pt.trace.json")]
        self.assertEqual(len(traces), 1, os.listdir(tb))
        with open(os.path.join(tb, traces[0])) as f:
            trace = json.load(f)
        # The schedule's two active steps, each a ProfilerStep#N span around a training
        # batch (torch versions number them differently).
        events = trace["traceEvents"] if isinstance(trace, dict) else trace  # Both forms.
        steps = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
        self.assertEqual(len(steps), 2, steps)

    def test_shuffle_false_keeps_the_data_set_order(self):
        self.fit(max_length=pytorch.Batch(3), hparams={"shuffle": False})
        self.assertEqual([r["ids"] for r in records(self.log, "train")],
                         [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])

    def test_epoch_lengths_and_periods(self):
        trial, _ = self.fit(max_length=pytorch.Epoch(2), validation_period=pytorch.Epoch(1))
        self.assertEqual(len(records(self.log, "train")), 32)
        self.assertEqual([b for g, b, _ in self.reports if g == "validation"], [16, 32])
        self.assertIn(("epoch_end", 0), trial.recorder.events)
        self.assertIn(("epoch_end", 1), trial.recorder.events)

    def test_test_mode_and_step_zero_validation(self):
        self.fit(max_length=pytorch.Batch(10), test_mode=True, step_zero_validation=True)
        self.assertEqual(len(records(self.log, "train")), 1)
        self.assertEqual(len(records(self.log, "eval")), 2)  # One batch at 0, one at 1.
        self.assertEqual([b for g, b, _ in self.reports if g == "validation"], [0, 1])
        self.assertEqual(len(self.checkpoints()), 1)

    def test_old_evaluate_batch_signature(self):
        self.fit(trial_model.OldEvaluateTrial, max_length=pytorch.Batch(2))
        self.assertEqual(len(records(self.log, "eval_old")), 4)
        self.assertEqual([b for g, b, _ in self.reports if g == "validation"], [2])

    def test_evaluate_full_dataset(self):
        self.fit(trial_model.FullDatasetTrial, max_length=pytorch.Batch(2))
        self.assertEqual([m["records"] for g, _, m in self.reports if g == "validation"], [16])
        # The trial's own "batches" is kept; "epochs" is added (2 batches: epoch 0).
        self.assertEqual([(m["batches"], m["epochs"]) for g, _, m in self.reports
                          if g == "validation"], [(99.0, 0)])

    def test_lr_scheduler_step_modes(self):
        def lrs(mode, batches, freq=1, aggregation=None):
            log = os.path.join(self.tmp.name, f"{mode}-{freq}.jsonl")
            hp = {"lr_mode": mode, "lr_frequency": freq, "lr": 1.0, "log": log}
            trial, context = self.fit(hparams=hp, max_length=pytorch.Batch(batches), log=log)
            return [r["lr"] for r in records(log, "train")] + [trial.opt.param_groups[0]["lr"]]
        self.assertEqual(lrs("STEP_EVERY_BATCH", 4, freq=2), [1, 1, 0.5, 0.5, 0.25])
        self.assertEqual(lrs("STEP_EVERY_EPOCH", 17)[15:], [1, 0.5, 0.5])
        self.assertEqual(lrs("MANUAL_STEP", 3), [1, 1, 1, 1])
        self.assertEqual(lrs("STEP_EVERY_OPTIMIZER_STEP", 3), [1, 0.5, 0.25, 0.125])

    def test_aggregation_frequency_steps_every_other_batch(self):
        hp = {"global_batch_size": 4, "lr": 1.0, "log": self.log,
              "lr_mode": "STEP_EVERY_OPTIMIZER_STEP"}
        with fake_master.environment({}), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), \
                pytorch.init(hparams=hp, checkpoint_storage=self.storage,
                             aggregation_frequency=2) as context:
            trial = trial_model.TinyTrial(context)
            pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(4))
        self.assertEqual([r["lr"] for r in records(self.log, "train")], [1, 1, 0.5, 0.5])

    def test_invalid_hp_checkpoints_then_exits_0(self):
        # As Determined: the loop checkpoints, init()'s core context reports the early exit
        # (printed off-cluster) and exits 0.
        with self.assertRaises(SystemExit) as exited:
            self.fit(max_length=pytorch.Batch(10), hparams={"invalid_at": 3})
        self.assertEqual(exited.exception.code, 0)
        with open(os.path.join(self.checkpoints()[-1], "trial_state.pkl"), "rb") as f:
            self.assertEqual(pickle.load(f)["batches_trained"], 3)

    def test_use_amp_on_the_cpu_trains_as_float32_and_checkpoints_the_scaler(self):
        # torch disables the GradScaler and autocast without CUDA: the same losses as without
        # AMP, and the scaler's state in the checkpoint (as Determined's scaler_state_dict).
        self.fit(max_length=pytorch.Batch(6))
        plain = [r[2]["loss"] for r in self.reports if r[0] == "training"]
        amp_log = os.path.join(self.tmp.name, "amp.jsonl")
        with contextlib.redirect_stderr(io.StringIO()):
            _, context = self.fit(trial_model.AmpTrial, log=amp_log, max_length=pytorch.Batch(6))
        self.assertEqual([r[2]["loss"] for r in self.reports if r[0] == "training"], plain)
        self.assertIsNotNone(context._scaler)
        state = torch_load(os.path.join(self.checkpoints()[-1], "state_dict.pth"))
        self.assertIn("scaler_state_dict", state)

    def test_autocast_forward_pass_and_apex(self):
        class Half(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(2, 2)

            def forward(self, x):
                y = self.linear(x)
                return {"half": y.half(), "pair": (y.half(), y.double()), "n": 3}

        with fake_master.environment({}), contextlib.redirect_stderr(io.StringIO()), \
                pytorch.init(hparams={"global_batch_size": 4},
                             checkpoint_storage=self.storage) as context:
            model = Half()
            keys = list(model.state_dict())
            wrapped = context.autocast_forward_pass(model)
            self.assertIs(wrapped, model)
            self.assertEqual(list(wrapped.state_dict()), keys)
            out = wrapped(torch.ones(1, 2))
            self.assertEqual((out["half"].dtype, out["pair"][0].dtype, out["pair"][1].dtype),
                             (torch.float32, torch.float32, torch.float64))
            self.assertEqual(out["n"], 3)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            self.assertEqual(context.configure_apex_amp(model, opt, enabled=False), (model, opt))
            with self.assertRaisesRegex(NotImplementedError,
                                        r"configure_apex_amp \(NVIDIA apex\) is not supported.*"
                                        r"use_amp\(\)"):
                context.configure_apex_amp(model, opt)

    def test_api_misuse_is_named(self):
        class NoEvaluate(trial_model.TinyTrial):
            evaluate_batch = pytorch.PyTorchTrial.evaluate_batch
        with self.assertRaisesRegex(ValueError, "exactly one of"):
            self.fit(NoEvaluate, max_length=pytorch.Batch(1))
        with self.assertRaisesRegex(ValueError, "max_length must be defined"):
            self.fit()
        with self.assertRaisesRegex(ValueError, "per_slot_batch_size is undefined"):
            with fake_master.environment({}), contextlib.redirect_stderr(io.StringIO()), \
                    pytorch.init() as context:
                context.get_per_slot_batch_size()


def cluster_spec(storage, hparams, target_batches=12, validation_period=4, checkpoint_period=0,
                 latest_checkpoint="", scheduling_unit=2):
    spec = fake_master.trial_spec(storage, target_batches=target_batches,
                                  max_length=(target_batches, "batches"))
    spec.hparams_json = json.dumps({"global_batch_size": 8, "lr": 0.05, **hparams})
    spec.global_batch_size = 8
    spec.records_per_epoch = 64
    spec.batches_per_epoch = 8
    spec.validation_period = validation_period
    spec.checkpoint_period = checkpoint_period
    spec.scheduling_unit = scheduling_unit
    spec.latest_checkpoint = latest_checkpoint
    return spec


class ClusterTest(unittest.TestCase):
    """Against the real gRPC fake master: in-process, and `python3 -m det.pytorch.run` ranks."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.storage = os.path.join(self.tmp.name, "checkpoints")
        os.makedirs(self.storage)
        self.log = os.path.join(self.tmp.name, "log.jsonl")

    def run_ranks(self, service_address, spec, world_size=1, expect_rc=0,
                  trial="tests.trial_model:TinyTrial"):
        port = str(free_port())
        procs = []
        for rank in range(world_size):
            env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
            env.update(fake_master.allocation_env(service_address, self.storage, rank=rank,
                                                  world_size=world_size, spec=spec))
            env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": PYTHONPATH})
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "det.pytorch.run", trial],
                env=env, cwd=self.tmp.name, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True))
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=240)
            self.assertEqual(p.returncode, expect_rc, out)
            outs.append(out)
        return outs

    def test_in_process_reports_to_the_master(self):
        spec = cluster_spec(self.storage, {"log": self.log})
        with fake_master.serve() as (service, address), \
                fake_master.environment(fake_master.allocation_env(address, self.storage,
                                                                   spec=spec)), \
                contextlib.redirect_stderr(io.StringIO()), pytorch.init() as context:
            self.assertEqual((context.get_trial_id(), context.get_experiment_id()), (7, 3))
            self.assertEqual(context.get_per_slot_batch_size(), 8)
            self.assertEqual(context.get_hparam("lr"), 0.05)
            self.assertEqual(context.get_experiment_config()["searcher"]["metric"],
                             "validation_loss")
            trial = trial_model.TinyTrial(context)
            # max_length None: the searcher's 12 batches; validation every 4 (min_validation_period).
            pytorch.Trainer(trial, context).fit(validation_period=pytorch.Batch(4),
                                                reporting_period=pytorch.Batch(2))
        self.assertEqual([r.total_batches for r in service.rows("training")],
                         [2, 4, 6, 8, 10, 12])
        self.assertEqual([r.total_batches for r in service.rows("validation")], [4, 8, 12])
        self.assertEqual(service.rows("training")[0].values["batch_idx_metric"], 0.5)
        # Every validation says the trial's batches and epochs (an epoch is 8 batches here).
        self.assertEqual([(r.values["batches"], r.values["epochs"])
                          for r in service.rows("validation")], [(4, 0), (8, 1), (12, 1)])
        # Policy "best": a checkpoint after each validation that beat the trial's best.
        self.assertGreaterEqual(len(service.checkpoints), 1)
        self.assertEqual(service.checkpoints[-1].checkpoint.total_batches, 12)
        progress = [(r.total_batches, r.values["progress"]) for r in service.rows("progress")]
        self.assertEqual(progress[-1], (12, 1.0))
        # The loop's phases go with each training report (group "timings"), under
        # Determined's profiler names, 2 batches each.
        timings = service.rows("timings")
        self.assertEqual([r.total_batches for r in timings], [2, 4, 6, 8, 10, 12])
        for phase in ("dataloader_next", "to_device", "train_batch", "from_device"):
            for r in timings:
                self.assertEqual(r.values[f"{phase}_count"], 2, (phase, r.total_batches))
                self.assertGreater(r.values[f"{phase}_mean_ms"], 0, phase)

    def test_runner_preempts_with_a_checkpoint_and_resumes_without_repeats(self):
        with fake_master.serve() as (service, address):
            # SIGTERM during batch 4: should_preempt says so after it; checkpoint at 5 (and
            # at 4, after the first validation: policy "best").
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log,
                                                                "sigterm_at": 4}))
            self.assertEqual([c.checkpoint.total_batches for c in service.checkpoints], [4, 5])
            self.assertEqual([r.total_batches for r in service.rows("validation")], [4])
            latest = service.checkpoints[-1].checkpoint.storage_path
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log},
                                                 latest_checkpoint=latest))
        train = records(self.log, "train")
        self.assertEqual([r["batch_idx"] for r in train], list(range(12)))
        # The resumed trial knows its first batch when it is built (the spec's checkpoint).
        self.assertEqual([r["initial_batch"] for r in records(self.log, "init")], [0, 5])
        self.assertEqual([r["initial_batch"] for r in records(self.log, "loader")], [0, 5])
        epoch0 = [i for r in train[:8] for i in r["ids"]]
        self.assertEqual(sorted(epoch0), list(range(64)))
        self.assertEqual([r.total_batches for r in service.rows("validation")], [4, 8, 12])
        self.assertEqual(service.checkpoints[-1].checkpoint.total_batches, 12)

    def test_runner_preempted_and_resumed_reports_as_an_uninterrupted_run(self):
        # Through the runner's real preemption path (SIGTERM -> should_preempt -> checkpoint,
        # exit; a new process resumes from the spec's latest checkpoint): every batch's
        # training metrics and every validation equal an uninterrupted run's, bitwise.
        def reports(service):
            return [(r.group, r.total_batches, dict(r.values)) for g in ("training", "validation")
                    for r in service.rows(g)]

        with fake_master.serve() as (whole, address):
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log},
                                                 scheduling_unit=1))
        with fake_master.serve() as (service, address):
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log, "sigterm_at": 6},
                                                 scheduling_unit=1))
            latest = service.checkpoints[-1].checkpoint
            self.assertEqual(latest.total_batches, 7)
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log},
                                                 scheduling_unit=1,
                                                 latest_checkpoint=latest.storage_path))
            interrupted = reports(service)
        self.assertEqual(interrupted, reports(whole))
        self.assertEqual(len([r for r in interrupted if r[0] == "training"]), 12)

    def test_runner_invalid_hp_is_reported_and_the_run_exits_0(self):
        # As Determined: the chief checkpoints, reports INVALID_HP, and the process exits 0
        # (the master ends the trial as invalid and the searcher replaces it).
        with fake_master.serve() as (service, address):
            out = self.run_ranks(address, cluster_spec(self.storage, {"log": self.log,
                                                                      "invalid_at": 2}))
        self.assertEqual([c.checkpoint.total_batches for c in service.checkpoints], [2])
        self.assertEqual([e.reason for e in service.early_exits],
                         [worker_pb2.EARLY_EXIT_REASON_INVALID_HP])
        self.assertIn("the trial ends as invalid; exiting 0", out[0])

    def test_runner_invalid_hp_fails_the_run_on_a_master_without_the_call(self):
        # An older master (UNIMPLEMENTED): the run fails (restarted by the master) after
        # checkpointing, and its log says why.
        with fake_master.serve() as (service, address):
            service.early_exit_error = (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            out = self.run_ranks(address, cluster_spec(self.storage, {"log": self.log,
                                                                      "invalid_at": 2}),
                                 expect_rc=1)
        self.assertEqual([c.checkpoint.total_batches for c in service.checkpoints], [2])
        self.assertIn("det.InvalidHP (bad hparams at batch 2) is not reported", out[0])

    def test_two_ranks_shard_reduce_and_resume(self):
        with fake_master.serve(2) as (service, address):
            # Rank 1's SIGTERM during batch 2 stops both ranks after it.
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log, "sigterm_at": 2,
                                                                "sigterm_rank": 1}),
                           world_size=2)
            self.assertEqual([c.checkpoint.total_batches for c in service.checkpoints], [3])
            latest = service.checkpoints[-1].checkpoint.storage_path
            self.run_ranks(address, cluster_spec(self.storage, {"log": self.log},
                                                 latest_checkpoint=latest), world_size=2)
        train = records(self.log, "train")
        by_step = {}
        for r in train:
            by_step.setdefault(r["batch_idx"], {})[r["rank"]] = r["ids"]
        self.assertEqual(sorted(by_step), list(range(12)))
        for step, ranks in by_step.items():
            self.assertEqual(sorted(ranks), [0, 1], step)  # Each step once on each rank.
            self.assertEqual(len(ranks[0]), 4)
            self.assertFalse(set(ranks[0]) & set(ranks[1]))
        epoch0 = [i for s in range(8) for r in (0, 1) for i in by_step[s][r]]
        self.assertEqual(sorted(epoch0), list(range(64)))
        # Training metrics averaged over the ranks (0 and 1), reported by the chief alone.
        rows = service.rows("training")
        self.assertTrue(rows)
        for r in rows:
            self.assertEqual(r.values["rank_metric"], 0.5)
        # Validation batches split among the ranks: first ids 0, 8 on rank 0; 4, 12 on rank 1.
        evals = records(self.log, "eval")
        self.assertEqual({r["ids"][0] for r in evals if r["rank"] == 0}, {0, 8})
        self.assertEqual({r["ids"][0] for r in evals if r["rank"] == 1}, {4, 12})
        self.assertEqual([r.values["first_id"] for r in service.rows("validation")],
                         [6.0, 6.0, 6.0])
        self.assertEqual([r.total_batches for r in service.rows("validation")], [4, 8, 12])

    def test_deterministic_mode_is_bitwise_the_same_on_1_and_2_ranks_and_across_a_resize(self):
        # reproducibility.deterministic: each global batch of 8 trains as 4 micro-batches of
        # 2 (hyperparameters.micro_batch_size) through DeterministicDDP. Every step's training
        # loss and every final parameter are the same bits on 1 and 2 ranks and when a
        # 2-rank run stopped after batch 4 resumes on 1 rank; no batch is trained twice.
        def spec(log, **kwargs):
            s = cluster_spec(self.storage, {"log": log, "micro_batch_size": 2, **kwargs.pop(
                "hparams", {})}, scheduling_unit=1, validation_period=0, **kwargs)
            s.deterministic = True
            return s

        def losses(service):
            return [(r.total_batches, float.hex(r.values["loss"]))
                    for r in service.rows("training")]

        def train_steps(log):
            by_step = {}
            for r in records(log, "train"):
                by_step.setdefault(r["batch_idx"], []).append((r["rank"], r["ids"]))
            return by_step

        runs = {}
        for world in (1, 2):
            log = os.path.join(self.tmp.name, f"log{world}.jsonl")
            with fake_master.serve(world) as (service, address):
                self.run_ranks(address, spec(log), world_size=world,
                               trial="tests.trial_model:DeterministicTrial")
                runs[world] = (losses(service), train_steps(log),
                               service.checkpoints[-1].checkpoint.storage_path)
        resized_log = os.path.join(self.tmp.name, "resized.jsonl")
        with fake_master.serve(2) as (service, address):
            self.run_ranks(address, spec(resized_log, hparams={"sigterm_at": 4}), world_size=2,
                           trial="tests.trial_model:DeterministicTrial")
            self.assertEqual(service.checkpoints[-1].checkpoint.total_batches, 5)
            latest = service.checkpoints[-1].checkpoint.storage_path
        with fake_master.serve(1) as (resumed, address):
            self.run_ranks(address, spec(resized_log, latest_checkpoint=latest), world_size=1,
                           trial="tests.trial_model:DeterministicTrial")
        resized = losses(service) + losses(resumed)

        one, two = runs[1], runs[2]
        self.assertEqual([b for b, _ in one[0]], list(range(1, 13)))
        self.assertEqual(two[0], one[0])
        self.assertEqual(resized, one[0])
        # Every step trains the same 8 records as 4 micro-batches of 2, once: on 2 ranks
        # two micro-batches each (rank 0 the first half).
        resized_steps = train_steps(resized_log)
        for step in range(12):
            records_of = lambda run: sorted(i for _, ids in run[step] for i in ids)  # noqa: E731
            self.assertEqual([len(ids) for _, ids in one[1][step]], [2, 2, 2, 2], step)
            self.assertEqual(records_of(two[1]), records_of(one[1]), step)
            self.assertEqual(records_of(resized_steps), records_of(one[1]), step)
            self.assertEqual(sorted(r for r, _ in two[1][step]), [0, 0, 1, 1], step)
            ranks = sorted(r for r, _ in resized_steps[step])
            self.assertEqual(ranks, [0, 0, 1, 1] if step < 5 else [0, 0, 0, 0], step)
        # The final parameters, bit for bit.
        finals = [torch_load(os.path.join(path, "state_dict.pth"))["models_state_dict"][0]
                  for path in (one[2], two[2])]
        for name, value in finals[0].items():
            self.assertTrue(torch.equal(value, finals[1][name]), name)

    def test_deterministic_mode_refusals_name_the_setting(self):
        with fake_master.serve() as (_, address):
            out = self.run_ranks(
                address, _deterministic(cluster_spec(self.storage, {
                    "log": self.log, "micro_batch_size": 3})),
                trial="tests.trial_model:DeterministicTrial", expect_rc=1)
        self.assertIn("micro_batch_size 3 does not divide the per-rank batch 8", out[0])
        self.assertIn("hyperparameters.micro_batch_size is 3", out[0])


def _deterministic(spec):
    spec.deterministic = True
    return spec


if __name__ == "__main__":
    unittest.main()
