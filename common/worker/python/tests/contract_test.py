"""The worker contract table (common/worker/contract/cases.json) for the det Python package:
each case's launch environment read by det._info, its steps run through det.core against a
real gRPC fake master on loopback (tests/fake_master.py's service, taught to fail a set
number of times), and what that master received checked against the case. The C++ harness
passes the same table (common/worker/contract/contract_test.cc). One test per case.

The table is found at $DET_CONTRACT_CASES, else in Bazel's runfiles, else beside this
checkout's common/worker/python."""

import contextlib
import json
import os
import tempfile
import time
import unittest
from unittest import mock
from typing import Any, Callable, Dict, Iterator, List, Tuple

import grpc

import det
from det import _client, _info
from det._proto import worker_pb2
from tests import fake_master


def _table_path() -> str:
    if os.environ.get("DET_CONTRACT_CASES"):
        return os.environ["DET_CONTRACT_CASES"]
    runfiles = os.environ.get("TEST_SRCDIR")
    if runfiles:
        path = os.path.join(runfiles, os.environ.get("TEST_WORKSPACE", "det"),
                            "common/worker/contract/cases.json")
        if os.path.exists(path):
            return path
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "contract", "cases.json")


with open(_table_path(), encoding="utf-8") as _f:
    TABLE: Dict[str, Any] = json.load(_f)

DEADLINE_S = 30.0


def _substitute(value: Any, directory: str) -> Any:
    if isinstance(value, str):
        return value.replace("$CHECKPOINTS", directory)
    if isinstance(value, dict):
        return {k: _substitute(v, directory) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, directory) for v in value]
    return value


class _ContractService(fake_master.FakeWorkerService):
    """fake_master's service, whose ReportMetrics can fail a set number of times (then
    succeed) as the table's `master.metrics_error.times` says."""

    def __init__(self, world_size: int = 1) -> None:
        super().__init__(world_size)
        self.metrics_failures: Tuple[Any, str, int] = (None, "", 0)
        self.refused_metrics = 0

    def ReportMetrics(self, request, context):
        with self.lock:
            code, message, times = self.metrics_failures
            if code is not None and times != 0:
                self.metrics_failures = (code, message, times - 1 if times > 0 else times)
                self.refused_metrics += 1
                context.abort(code, message)
        return super().ReportMetrics(request, context)


@contextlib.contextmanager
def _serve() -> Iterator[Tuple[_ContractService, str]]:
    """fake_master.serve() with a _ContractService."""
    with mock.patch.object(fake_master, "FakeWorkerService", _ContractService), \
            fake_master.serve() as (service, address):
        yield service, address


def _context_value(info: _info.ClusterInfo, name: str) -> Any:
    t = info.trial
    values: Dict[str, Callable[[], Any]] = {
        "experiment_id": lambda: t.experiment_id, "trial_id": lambda: t.trial_id,
        "run_id": lambda: t.trial_run_id, "trial_seed": lambda: t.trial_seed,
        "rank": lambda: info.rank, "world_size": lambda: info.world_size,
        "global_batch_size": lambda: t.global_batch_size,
        "per_slot_batch_size": lambda: t.per_slot_batch_size,
        "batches_per_epoch": lambda: t.batches_per_epoch,
        "target_batches": lambda: t.target_batches,
        "validation_period": lambda: t.validation_period,
        "checkpoint_period": lambda: t.checkpoint_period,
        "checkpoint_policy": lambda: t.checkpoint_policy,
        "searcher_metric": lambda: t.searcher_metric,
        "smaller_is_better": lambda: t.smaller_is_better,
        "deterministic": lambda: t.deterministic,
        "latest_checkpoint": lambda: info.latest_checkpoint_path or "",
        "checkpoint_dir": lambda: t.checkpoint_dir,
        "hparams": lambda: t.hparams, "data": lambda: info.user_data,
    }
    if name not in values:
        raise AssertionError(f"cases.json names a context value the Python package does not "
                             f"map: {name}")
    return values[name]()


def _until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.02)


class ContractTest(unittest.TestCase):
    """One test_<case name> per case of the table (added below)."""

    def assertMessageHas(self, error: BaseException, parts: List[str]) -> None:
        for part in parts:
            self.assertIn(part, str(error))

    def assertAuth(self, auth, want: Dict[str, Any]) -> None:
        self.assertEqual((auth.allocation_id, auth.token, auth.rank),
                         (want["allocation_id"], want["token"], want["rank"]))

    def run_case(self, case: Dict[str, Any]) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        directory = tmp.name
        every = TABLE["every_call"]
        with _serve() as (service, address):
            setup = case.get("master", {})
            if "preempt" in setup:
                service.set_preempt(setup["preempt"]["preempt"], setup["preempt"]["reason"])
            if "preempt_error" in setup:
                e = setup["preempt_error"]
                service.set_preempt_error(grpc.StatusCode[e["code"]], e.get("message", ""))
            if "metrics_error" in setup:
                e = setup["metrics_error"]
                service.metrics_failures = (grpc.StatusCode[e["code"]], e.get("message", ""),
                                            e.get("times", -1))

            spec = dict(TABLE["base"]["spec"])
            spec.update(case.get("spec", {}))
            spec = _substitute(spec, directory)
            spec_path = os.path.join(directory, "spec.json")
            with open(spec_path, "w", encoding="utf-8") as f:
                f.write(case["spec_text"] if "spec_text" in case else json.dumps(spec))
            env = {"DET_MASTER": address, "DET_TRIAL_SPEC_FILE": spec_path}
            env.update(TABLE["base"]["env"])
            env.update(_substitute(case.get("env", {}), directory))
            for name in case.get("unset", []):
                env.pop(name, None)
            expect = _substitute(case["expect"], directory)

            if "context_error" in expect:
                with self.assertRaises(det.ClusterEnvironmentError) as raised:
                    _info.cluster_info_from(env)
                self.assertMessageHas(raised.exception, expect["context_error"])
                return
            info = _info.cluster_info_from(env)
            assert info is not None
            for name, want in expect.get("context", {}).items():
                self.assertEqual(_context_value(info, name), want, name)

            steps = case.get("steps", [])
            if steps:
                with fake_master.environment(env), det.core.init() as core:
                    for step in steps:
                        with self.subTest(step=step):
                            self._step(core, service, step)
            self._check(service, expect, every, info)

    def _step(self, core: Any, service: _ContractService, step: Dict[str, Any]) -> None:
        op = step["op"]
        if op == "report":
            report = (core.train.report_training_metrics if step["group"] == "training" else
                      core.train.report_validation_metrics)
            if "error" in step:
                with self.assertRaises(_client.MasterError) as raised:
                    report(steps_completed=step["total_batches"], metrics=step["values"])
                self.assertMessageHas(raised.exception, step["error"])
            else:
                report(steps_completed=step["total_batches"], metrics=step["values"])
        elif op == "checkpoint":
            with core.checkpoint.store_path({"steps_completed": step["total_batches"]}) as (
                    path, _):
                for name, text in step["files"].items():
                    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
                        f.write(text)
        elif op == "should_preempt":
            if "until" in step:
                _until("should_preempt says stop", core.preempt.should_preempt)
                self.assertEqual(core.preempt.reason, step["reason"])
            elif "until_error" in step:
                errors: List[BaseException] = []

                def fails() -> bool:
                    try:
                        core.preempt.should_preempt()
                    except _client.MasterError as e:
                        errors.append(e)
                        return True
                    return False
                _until("should_preempt fails", fails)
                self.assertEqual(step["until_error"], "allocation_ended")
                self.assertIsInstance(errors[0], _client.AllocationEndedError)
                self.assertMessageHas(errors[0], step["error"])
            else:
                self.assertEqual(core.preempt.should_preempt(), step["expect"])
        elif op == "wait_preempt_requests":
            self.assertTrue(service.wait_for(
                lambda: len(service.preempt_requests) >= step["min"], timeout=DEADLINE_S))
        else:
            raise AssertionError(f"cases.json: unknown op {op}")

    def _check(self, service: _ContractService, expect: Dict[str, Any], every: Dict[str, Any],
               info: _info.ClusterInfo) -> None:
        if "metrics" in expect:
            got = []
            for r in service.metrics:
                self.assertAuth(r.auth, every["auth"])
                self.assertEqual(r.trial_id, every["trial_id"])
                for m in r.metrics:
                    self.assertEqual(m.trial_id, every["trial_id"])
                    if m.group == "timings":
                        continue  # the runtime's own; not part of the contract
                    got.append({"group": m.group, "total_batches": m.total_batches,
                                "values": dict(m.values)})
            self.assertEqual(got, expect["metrics"])
        if "refused_metrics" in expect:
            self.assertEqual(service.refused_metrics, expect["refused_metrics"])
        if "checkpoints" in expect:
            got_ckpts: List[worker_pb2.ReportCheckpointRequest] = list(service.checkpoints)
            self.assertEqual(len(got_ckpts), len(expect["checkpoints"]))
            for r, want in zip(got_ckpts, expect["checkpoints"]):
                self.assertAuth(r.auth, every["auth"])
                c = r.checkpoint
                self.assertEqual(c.total_batches, want["total_batches"])
                self.assertEqual(c.storage_path,
                                 os.path.join(info.trial.checkpoint_dir, c.uuid))
                for name, size in want["resources_include"].items():
                    self.assertEqual(c.resources.get(name), size, name)
                    self.assertTrue(os.path.exists(os.path.join(c.storage_path, name)), name)
        if "preempt_requests_min" in expect:
            asked = list(service.preempt_requests)
            self.assertGreaterEqual(len(asked), expect["preempt_requests_min"])
            for i, r in enumerate(asked):
                self.assertAuth(r.auth, every["auth"])
                # det.core.init's first ask does not wait (the master then knows the run
                # answers should_preempt); every later one long-polls.
                if i > 0:
                    self.assertGreater(r.wait_ms, 0)


def _add_case(case: Dict[str, Any]) -> None:
    def test(self: ContractTest) -> None:
        self.run_case(case)
    test.__doc__ = case.get("about", case["name"])
    setattr(ContractTest, "test_" + case["name"], test)


for _case in TABLE["cases"]:
    _add_case(_case)


if __name__ == "__main__":
    unittest.main()
