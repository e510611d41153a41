"""python3 -m det.launch.torch_distributed, run as a real process."""

import os
import subprocess
import sys
import unittest

from det.launch import torch_distributed, wrap_rank

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


class WrapRankTest(unittest.TestCase):
    def wrap(self, argv, rank_env):
        env = dict(os.environ)
        env.pop("RANK", None)
        if rank_env is not None:
            env["RANK"] = rank_env
        return subprocess.run([sys.executable, "-m", "det.launch.wrap_rank"] + argv, env=env,
                              capture_output=True, text=True, timeout=60)

    def test_the_process_own_rank_runs_in_place(self):
        r = self.wrap(["2", "--", sys.executable, "-c",
                       "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                      "2")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (3, "out\n", "err\n"))

    def test_another_rank_lines_are_prefixed(self):
        r = self.wrap(["1", sys.executable, "-c",
                       "import sys; print('a'); print('b'); print('e', file=sys.stderr)"], "0")
        self.assertEqual((r.returncode, r.stdout, r.stderr),
                         (0, "[rank=1] a\n[rank=1] b\n", "[rank=1] e\n"))

    def test_bad_arguments_are_named(self):
        for argv, why in [([], "usage"), (["x", "true"], "RANK: expected an integer >= 0, got 'x'"),
                          (["-1", "true"], "RANK: expected an integer >= 0, got -1"),
                          (["0", "--"], "no COMMAND after RANK")]:
            with self.assertRaisesRegex(wrap_rank.WrapRankError, why):
                wrap_rank.parse(argv)
            r = self.wrap(argv, None)
            self.assertEqual(r.returncode, 2, argv)
            self.assertIn("usage: python3 -m det.launch.wrap_rank", r.stderr)
        r = self.wrap(["0", "/no/such/program"], "0")
        self.assertEqual(r.returncode, 127)
        self.assertIn("cannot run /no/such/program", r.stderr)
