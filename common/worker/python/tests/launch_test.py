"""python3 -m det.launch.torch_distributed, run as a real process."""

import os
import subprocess
import sys
import unittest

from det.launch import torch_distributed

PRINT_ENV = ("import os, sys; print(sys.executable, *[os.environ.get(k, '-') for k in "
             "['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR']], sys.argv[1:])")


def run(argv, env):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("DET_") and k not in torch_distributed.REQUIRED}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "det.launch.torch_distributed"] + argv,
                          env=full, capture_output=True, text=True, timeout=60)


class LaunchTest(unittest.TestCase):
    def test_a_leading_python_runs_as_this_interpreter(self):
        self.assertEqual(torch_distributed.command(["python3", "train.py", "-x"], "/usr/bin/python3"),
                         ["/usr/bin/python3", "train.py", "-x"])
        self.assertEqual(torch_distributed.command(["--", "python3.11", "t.py"], "/p"), ["/p", "t.py"])
        self.assertEqual(torch_distributed.command(["python", "t.py"], "/p"), ["/p", "t.py"])
        self.assertEqual(torch_distributed.command(["./run.sh", "a"], "/p"), ["./run.sh", "a"])
        with self.assertRaisesRegex(torch_distributed.LaunchError, "usage"):
            torch_distributed.command([], "/p")

    def test_trial_runs_under_the_trial_runner(self):
        runner = ["/p", "-m", "det.pytorch.run", "model_def:MNistTrial"]
        self.assertEqual(torch_distributed.command(["--trial", "model_def:MNistTrial"], "/p"),
                         runner)
        self.assertEqual(torch_distributed.command(["--trial=model_def:MNistTrial"], "/p"),
                         runner)
        for bad, why in [(["--trial"], "needs MODULE:CLASS"),
                         (["--trial", "model_def"], "needs MODULE:CLASS.*'model_def'"),
                         (["--trial", ":Trial"], "needs MODULE:CLASS"),
                         (["--trial", "m:T", "extra"], "nothing after MODULE:CLASS, got extra")]:
            with self.assertRaisesRegex(torch_distributed.LaunchError, why):
                torch_distributed.command(bad, "/p")
        # As a process off-cluster: the runner itself says it needs an allocation.
        r = run(["--trial", "model_def:MNistTrial"], {})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("det.pytorch.run: not in a det allocation", r.stderr)

    def test_inside_an_allocation_the_agents_environment_passes_through(self):
        r = run(["python3", "-c", PRINT_ENV, "a", "b"],
                {"DET_MASTER": "127.0.0.1:1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                 "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [sys.executable, "1", "2", "1", "10.0.0.5", "['a',", "'b']"])

    def test_a_missing_variable_inside_an_allocation_is_named(self):
        r = run(["python3", "-c", "print('ran')"],
                {"DET_MASTER": "127.0.0.1:1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                 "LOCAL_WORLD_SIZE": "1"})
        self.assertEqual(r.returncode, 2)
        self.assertNotIn("ran", r.stdout)
        self.assertIn("did not set MASTER_ADDR, MASTER_PORT", r.stderr)

    def test_off_cluster_runs_one_process(self):
        r = run(["python3", "-c", PRINT_ENV], {})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[1:5], ["0", "1", "0", "127.0.0.1"])

    def test_a_command_that_does_not_exist(self):
        r = run(["no-such-command-det"], {})
        self.assertEqual(r.returncode, 127)
        self.assertIn("cannot run no-such-command-det", r.stderr)


if __name__ == "__main__":
    unittest.main()
