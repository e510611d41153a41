"""det's versions of Determined's published examples (examples/determined) in local mode:
the Trainer-API script as a user runs it (`python3 train.py --batches N`, no DET_MASTER),
and the trial classes of the legacy entrypoint form under det.pytorch.init() + Trainer.
tests/integration:pytorch_trial_test runs them on a real cluster."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

from det import pytorch
from tests import fake_master

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples", "determined")
PYTHONPATH = os.pathsep.join(p for p in sys.path if p)
VALIDATION = re.compile(r"det \(off-cluster, not reported\): validation metrics at batch (\d+): "
                        r"(.*)$", re.M)


class ExamplesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def copy(self, example):
        """The example's directory copied into the test's (what a user's checkout is)."""
        path = os.path.join(self.tmp.name, example)
        shutil.copytree(os.path.join(EXAMPLES, example), path)
        return path

    def test_mnist_trainer_script_trains_locally(self):
        work = self.copy("mnist_pytorch")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        env.update({"PYTHONPATH": PYTHONPATH, "OMP_NUM_THREADS": "1", "TMPDIR": self.tmp.name})
        run = subprocess.run([sys.executable, "train.py", "--batches", "4"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=240)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        validations = VALIDATION.findall(run.stdout)
        self.assertEqual([int(b) for b, _ in validations], [4], run.stdout)
        metrics = json.loads(validations[0][1])
        self.assertEqual(set(metrics), {"validation_loss", "accuracy", "batch", "batches",
                                        "epochs"})
        self.assertEqual(metrics["batch"], 3)  # current_train_batch() of the last batch.
        checkpoints = os.path.join(self.tmp.name, "det-checkpoints")
        (ckpt,) = [d for d in os.listdir(checkpoints) if d != "tensorboard"]
        self.assertTrue(os.path.exists(os.path.join(checkpoints, ckpt, "code", "train.py")))

    def fit_trial(self, example, spec, config, batches):
        """The config's hyperparameters, its trial class, `batches` batches in local mode;
        the validation metrics printed."""
        work = self.copy(example)
        with open(os.path.join(work, config)) as f:
            conf = yaml.safe_load(f)
        module, _, name = spec.partition(":")
        out = io.StringIO()
        cwd = os.getcwd()
        os.chdir(work)
        sys.path.insert(0, work)
        try:
            trial_class = getattr(__import__(module), name)
            with fake_master.environment({}), contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(io.StringIO()), \
                    pytorch.init(hparams=conf["hyperparameters"], exp_conf=conf,
                                 checkpoint_storage=os.path.join(self.tmp.name, "ckpt")) as ctx:
                trial = trial_class(ctx)
                pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(batches))
                del trial
        finally:
            os.chdir(cwd)
            sys.path.remove(work)
            for m in (module, "data", "model"):
                sys.modules.pop(m, None)
        return [json.loads(m) for _, m in VALIDATION.findall(out.getvalue())]

    def test_cifar10_trial_with_the_old_evaluate_batch(self):
        (metrics,) = self.fit_trial("cifar10_pytorch", "model_def:CIFARTrial", "const.yaml", 3)
        self.assertAlmostEqual(metrics["validation_accuracy"] + metrics["validation_error"], 1.0)

    def test_mnist_legacy_trial_reads_its_context(self):
        (metrics,) = self.fit_trial("mnist_pytorch", "model_def:MNistTrial",
                                    "const-legacy.yaml", 3)
        self.assertIn("validation_loss", metrics)
        self.assertGreaterEqual(metrics["accuracy"], 0.0)


if __name__ == "__main__":
    unittest.main()
