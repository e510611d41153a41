"""det.experimental.client without a cluster: the master address and the CLI's session file,
the context directory's .detignore rules, and the SDK's calls against a real gRPC server on
loopback that implements a few methods of det.v1.Api (the rest answer UNIMPLEMENTED).
tests/integration/sdk runs the SDK against a real master and agent."""

import json
import os
import tempfile
import unittest
from concurrent import futures

import grpc

from det._proto import api_pb2, api_pb2_grpc, types_pb2
from det.experimental import _context, _session, client, errors

CONFIG = """name: t
searcher: {name: grid, metric: loss, smaller_is_better: true}
"""


class FakeApi(api_pb2_grpc.ApiServicer):
    """Experiment 1 with trials 1 (q=1) and 2 (q=2) and their checkpoints; a login of
    admin/pw; states given by `states` in turn on each GetExperiment."""

    def __init__(self):
        self.states = [types_pb2.STATE_ACTIVE, types_pb2.STATE_COMPLETED]
        self.tokens = []
        self.created = None
        self.chunks = []

    def _auth(self, context):
        md = dict(context.invocation_metadata())
        self.tokens.append(md.get("authorization"))

    def Login(self, request, context):
        if (request.username, request.password) != ("admin", "pw"):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong username or password")
        return api_pb2.LoginResponse(token="tok-1", user=api_pb2.User(username="admin"))

    def GetExperiment(self, request, context):
        self._auth(context)
        if request.id != 1:
            context.abort(grpc.StatusCode.NOT_FOUND, f"experiment {request.id} not found")
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return api_pb2.GetExperimentResponse(
            experiment=types_pb2.Experiment(id=1, name="t", state=state, config_yaml=CONFIG),
            trials=[types_pb2.Trial(id=i, experiment_id=1, state=types_pb2.STATE_COMPLETED,
                                    hparams_json=json.dumps({"q": i}), start_time_ms=10 - i)
                    for i in (1, 2)])

    def GetTrial(self, request, context):
        return api_pb2.GetTrialResponse(trial=types_pb2.Trial(
            id=request.id, experiment_id=1, hparams_json=json.dumps({"q": request.id})))

    def ListCheckpoints(self, request, context):
        # (uuid, trial, batch, loss): trial 1's best is its batch 1; the experiment's is
        # trial 2's batch 2; one of trial 2's has no loss.
        rows = [("a", 1, 1, 0.3), ("b", 1, 2, 0.4), ("c", 2, 1, None), ("d", 2, 2, 0.1)]
        out = []
        for uuid, trial, batch, loss in rows:
            if request.trial_id and request.trial_id != trial:
                continue
            c = types_pb2.Checkpoint(uuid=uuid, trial_id=trial, total_batches=batch,
                                     experiment_id=1, state=types_pb2.STATE_COMPLETED,
                                     report_time_ms=batch * 10 + trial,
                                     metadata_json=json.dumps({"steps_completed": batch}))
            if loss is not None:
                c.metrics["loss"] = loss
            out.append(c)
        return api_pb2.ListCheckpointsResponse(checkpoints=out)

    def CreateExperimentStream(self, request_iterator, context):
        self._auth(context)
        self.chunks = list(request_iterator)
        return api_pb2.CreateExperimentResponse(experiment=types_pb2.Experiment(
            id=1, state=types_pb2.STATE_ACTIVE, config_yaml=CONFIG))


class FakeModels(FakeApi):
    """FakeApi with a model registry of its own: models by name and their versions, each
    version's checkpoint a checkpoint of ListCheckpoints; the requests it got in `calls`."""

    def __init__(self):
        super().__init__()
        self.models = {}
        self.versions = {}
        self.calls = []

    def _model(self, name, context):
        if name not in self.models:
            context.abort(grpc.StatusCode.NOT_FOUND, f"model '{name}' does not exist")
        m = types_pb2.Model()
        m.CopyFrom(self.models[name])
        m.num_versions = len(self.versions[name])
        return m

    def CreateModel(self, request, context):
        self.calls.append(request)
        if request.name in self.models:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"model '{request.name}' already exists")
        self.models[request.name] = types_pb2.Model(
            id=len(self.models) + 1, name=request.name, description=request.description,
            labels=request.labels, metadata_json=request.metadata_json, username="admin",
            creation_time_ms=1000 + len(self.models))
        self.versions[request.name] = []
        return api_pb2.CreateModelResponse(model=self._model(request.name, context))

    def GetModel(self, request, context):
        return api_pb2.GetModelResponse(model=self._model(request.name, context))

    def ListModels(self, request, context):
        return api_pb2.ListModelsResponse(models=[self._model(n, context) for n in self.models])

    def PatchModel(self, request, context):
        self.calls.append(request)
        m = self.models[request.name]
        if request.HasField("description"):
            m.description = request.description
        labels = [l for l in list(m.labels) + [l for l in request.add_labels if l not in m.labels]
                  if l not in request.remove_labels]
        del m.labels[:]
        m.labels.extend(labels)
        if request.HasField("metadata_json"):
            m.metadata_json = request.metadata_json
        return api_pb2.PatchModelResponse(model=self._model(request.name, context))

    def RegisterModelVersion(self, request, context):
        self.calls.append(request)
        self._model(request.model_name, context)
        versions = self.versions[request.model_name]
        checkpoint = types_pb2.Checkpoint(uuid=request.checkpoint_uuid, trial_id=2,
                                          total_batches=2, experiment_id=1,
                                          state=types_pb2.STATE_COMPLETED)
        v = types_pb2.ModelVersion(
            id=100 + len(versions), model_id=self.models[request.model_name].id,
            model_name=request.model_name, version=len(versions) + 1,
            checkpoint_uuid=request.checkpoint_uuid, checkpoint=checkpoint, notes=request.notes,
            metadata_json=request.metadata_json)
        versions.append(v)
        return api_pb2.RegisterModelVersionResponse(model_version=v)

    def GetModelVersion(self, request, context):
        self._model(request.model_name, context)
        versions = self.versions[request.model_name]
        if request.version <= 0:
            if not versions:
                context.abort(grpc.StatusCode.NOT_FOUND,
                              f"model '{request.model_name}' has no versions")
            return api_pb2.GetModelVersionResponse(model_version=versions[-1])
        for v in versions:
            if v.version == request.version:
                return api_pb2.GetModelVersionResponse(model_version=v)
        context.abort(grpc.StatusCode.NOT_FOUND,
                      f"model '{request.model_name}' has no version {request.version}")

    def ListModelVersions(self, request, context):
        return api_pb2.ListModelVersionsResponse(
            model=self._model(request.model_name, context),
            model_versions=self.versions[request.model_name])

    def DeleteModel(self, request, context):
        self.calls.append(request)
        self._model(request.name, context)
        del self.models[request.name]
        return api_pb2.DeleteModelResponse()


class SdkTest(unittest.TestCase):
    def setUp(self):
        self.api = FakeModels()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_ApiServicer_to_server(self.api, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.tmp = tempfile.TemporaryDirectory()
        self.env = dict(os.environ)
        os.environ["HOME"] = self.tmp.name
        os.environ.pop("DET_USER_TOKEN", None)
        os.environ.pop("DET_MASTER", None)

    def tearDown(self):
        self.server.stop(None)
        self.tmp.cleanup()
        os.environ.clear()
        os.environ.update(self.env)

    def master(self):
        return f"127.0.0.1:{self.port}"

    def write_auth(self, entries, mode=0o600):
        os.makedirs(os.path.join(self.tmp.name, ".det"), mode=0o700, exist_ok=True)
        path = os.path.join(self.tmp.name, ".det", "auth.json")
        with open(path, "w") as f:
            json.dump({"masters": entries}, f)
        os.chmod(path, mode)

    def test_master_address_reads_as_the_cli_reads_it(self):
        p = _session.parse_master_address
        self.assertEqual(p("localhost"), "localhost:8080")
        self.assertEqual(p("http://h:9000/"), "h:9000")
        self.assertEqual(p("https://h"), "h:8080")
        self.assertEqual(p("[::1]:81"), "[::1]:81")
        self.assertEqual(p("::1"), "[::1]:8080")
        for bad, why in (("", "no host"), ("h:0", "bad port"), ("h/x", "unexpected path"),
                         ("h:", "empty port")):
            with self.assertRaisesRegex(ValueError, why):
                p(bad)

    def test_login_uses_the_cli_session_of_that_master(self):
        self.write_auth({self.master(): {"username": "admin", "token": "stored"},
                         "other:8080": {"username": "bob", "token": "other"}})
        d = client.login(master=f"http://{self.master()}")
        self.assertEqual(d.token, "stored")
        self.assertEqual(client.get_experiment(1).name, "t")
        self.assertEqual(self.api.tokens[-1], "Bearer stored")
        with self.assertRaisesRegex(errors.UnauthenticatedException, "'bob'"):
            client.Determined(master=self.master(), user="bob")

    def test_token_env_wins_over_the_file_and_a_password_logs_in(self):
        self.write_auth({self.master(): {"username": "admin", "token": "stored"}})
        os.environ["DET_USER_TOKEN"] = "from-env"
        self.assertEqual(client.Determined(master=self.master()).token, "from-env")
        self.assertEqual(client.Determined(master=self.master(), user="admin",
                                           password="pw").token, "tok-1")
        with self.assertRaisesRegex(errors.UnauthenticatedException, "wrong username"):
            client.Determined(master=self.master(), user="admin", password="nope")

    def test_a_session_file_others_may_read_is_refused(self):
        self.write_auth({self.master(): {"username": "admin", "token": "stored"}}, mode=0o644)
        with self.assertRaisesRegex(PermissionError, "chmod 600"):
            client.Determined(master=self.master())

    def test_errors_are_typed(self):
        d = client.Determined(master=self.master())
        with self.assertRaisesRegex(errors.NotFoundException, "experiment 7 not found"):
            d.get_experiment(7)
        with self.assertRaises(errors.APIException) as e:
            d.get_trial(1).kill()  # KillTrial is not implemented by the fake
        self.assertEqual(e.exception.code, "UNIMPLEMENTED")
        unreachable = client.Determined(master="127.0.0.1:1")
        unreachable._session.timeout = 2
        with self.assertRaisesRegex(errors.MasterNotFoundException, "cannot reach the master"):
            unreachable.get_experiment(1)
        with self.assertRaisesRegex(errors.NotFoundException, "model 'm' does not exist"):
            d.get_model("m")
        with self.assertRaisesRegex(NotImplementedError, "fork"):
            d.create_experiment({"name": "x"}, parent_id=3)

    def test_wait_polls_until_the_experiment_ends(self):
        self.api.states = [types_pb2.STATE_ACTIVE, types_pb2.STATE_ACTIVE,
                           types_pb2.STATE_COMPLETED]
        e = client.Determined(master=self.master()).get_experiment(1)
        self.assertEqual(e.wait(interval=0.01), client.ExperimentState.COMPLETED)
        self.api.states = [types_pb2.STATE_PAUSED]
        with self.assertRaisesRegex(ValueError, "paused"):
            e.wait(interval=0.01)
        self.api.states = [types_pb2.STATE_ACTIVE]
        with self.assertRaises(TimeoutError):
            e.wait(interval=0.01, timeout=0.05)

    def test_checkpoints_sort_by_the_searcher_metric(self):
        d = client.Determined(master=self.master())
        e = d.get_experiment(1)
        self.assertEqual(e.top_checkpoint().uuid, "d")
        self.assertEqual([c.uuid for c in e.top_n_checkpoints(5)], ["d", "a"])
        self.assertEqual(e.top_checkpoint(sort_by="loss", smaller_is_better=False).uuid, "b")
        # A checkpoint without the metric comes last either way.
        self.assertEqual([c.uuid for c in e.list_checkpoints()], ["d", "a", "b", "c"])
        self.assertEqual([c.uuid for c in e.list_checkpoints(order_by=client.OrderBy.DESC)],
                         ["b", "a", "d", "c"])
        self.assertEqual(
            [c.uuid for c in e.list_checkpoints(sort_by=client.CheckpointSortBy.BATCH_NUMBER,
                                                max_results=2)], ["a", "c"])
        t = d.get_trial(1)
        self.assertEqual(t.top_checkpoint().uuid, "a")
        self.assertEqual(t.select_checkpoint(latest=True).uuid, "b")
        top = e.top_checkpoint()
        self.assertEqual(top.training.hparams, {"q": 2})
        self.assertEqual(top.training.validation_metrics, {"avgMetrics": {"loss": 0.1}})
        self.assertEqual(top.training.experiment_config["searcher"]["metric"], "loss")
        self.assertEqual(top.metadata, {"steps_completed": 2})
        self.assertEqual(e.await_first_trial().id, 2)  # trial 2 started first

    def test_download_copies_the_storage_directory(self):
        d = client.Determined(master=self.master())
        c = d.get_trial(1).top_checkpoint()
        src = os.path.join(self.tmp.name, "storage", c.uuid)
        os.makedirs(os.path.join(src, "sub"))
        with open(os.path.join(src, "sub", "w.bin"), "wb") as f:
            f.write(b"\x00\x01")
        os.symlink("sub/w.bin", os.path.join(src, "link"))
        c.storage_path = src
        out = c.download(os.path.join(self.tmp.name, "out"))
        with open(os.path.join(out, "sub", "w.bin"), "rb") as f:
            self.assertEqual(f.read(), b"\x00\x01")
        with open(os.path.join(out, "link"), "rb") as f:
            self.assertEqual(f.read(), b"\x00\x01")
        with open(os.path.join(out, "metadata.json")) as f:
            self.assertEqual(json.load(f), {"steps_completed": 1})
        os.symlink("/etc/hostname", os.path.join(src, "escape"))
        with self.assertRaisesRegex(PermissionError, "outside the checkpoint"):
            c.download(os.path.join(self.tmp.name, "out2"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "out2")))
        c.storage_path = "/nonexistent/storage"
        with self.assertRaisesRegex(FileNotFoundError, "mounted at the same path"):
            c.download(os.path.join(self.tmp.name, "out3"))

    def test_create_streams_the_context_in_pieces(self):
        ctx = os.path.join(self.tmp.name, "ctx")
        os.makedirs(os.path.join(ctx, "junk"))
        os.makedirs(os.path.join(ctx, "__pycache__"))
        with open(os.path.join(ctx, "big.bin"), "wb") as f:
            f.write(b"x" * (_context.CHUNK_BYTES + 5))
        for name in ("empty.txt", "junk/a", "__pycache__/m.pyc", ".detignore"):
            with open(os.path.join(ctx, name), "w") as f:
                f.write("junk/\n" if name == ".detignore" else "")
        d = client.Determined(master=self.master())
        e = d.create_experiment({"name": "t"}, model_dir=ctx)
        self.assertEqual(e.id, 1)
        head = self.api.chunks[0]
        self.assertEqual(json.loads(head.request.config_yaml), {"name": "t"})
        self.assertEqual((head.context_files, head.context_bytes), (2, _context.CHUNK_BYTES + 5))
        pieces = [(c.file.path, c.file.offset, len(c.file.content)) for c in self.api.chunks[1:]]
        self.assertEqual(pieces, [("big.bin", 0, _context.CHUNK_BYTES),
                                  ("big.bin", _context.CHUNK_BYTES, 5), ("empty.txt", 0, 0)])


    def test_models_and_their_versions(self):
        d = client.Determined(master=self.master())
        m = d.create_model("mnist", description="digits", metadata={"team": "a"},
                           labels=["prod"])
        self.assertEqual((m.name, m.description, m.metadata, m.labels, m.username),
                         ("mnist", "digits", {"team": "a"}, ["prod"], "admin"))
        self.assertEqual(json.loads(self.api.calls[-1].metadata_json), {"team": "a"})
        with self.assertRaises(errors.APIException) as e:
            d.create_model("mnist")
        self.assertEqual(e.exception.code, "ALREADY_EXISTS")
        self.assertIsNone(m.get_version())  # No versions yet: None, as in Determined.
        with self.assertRaisesRegex(errors.NotFoundException, "has no version 3"):
            m.get_version(3)

        top = d.get_experiment(1).top_checkpoint()
        v1 = m.register_version(top.uuid, notes="first")
        self.assertEqual((v1.model_version, v1.model_name, v1.notes, v1.checkpoint.uuid),
                         (1, "mnist", "first", top.uuid))
        self.assertEqual(self.api.calls[-1].checkpoint_uuid, "d")
        m.register_version("a")
        self.assertEqual(m.get_version().model_version, 2)
        self.assertEqual(m.get_version(1).checkpoint.uuid, "d")
        self.assertEqual([v.model_version for v in m.list_versions()], [2, 1])
        self.assertEqual([v.model_version for v in m.list_versions(client.OrderBy.ASC)], [1, 2])

        # Labels: set_labels sends what to add and what to remove.
        m.set_labels(["cnn", "prod"])
        self.assertEqual((list(self.api.calls[-1].add_labels),
                          list(self.api.calls[-1].remove_labels)), (["cnn"], []))
        m.remove_label("prod")
        m.add_label("v2")
        self.assertEqual(m.labels, ["cnn", "v2"])
        m.set_description("handwritten digits")
        m.add_metadata({"b": 2})
        m.remove_metadata(["team"])
        self.assertEqual(d.get_model("mnist").metadata, {"b": 2})
        self.assertEqual(d.get_model("mnist").description, "handwritten digits")
        self.assertEqual(d.get_model(1).name, "mnist")

        d.create_model("cifar")
        self.assertEqual([x.name for x in d.list_models()], ["cifar", "mnist"])
        self.assertEqual([x.name for x in d.list_models(
            sort_by=client.ModelSortBy.NUM_VERSIONS, order_by=client.OrderBy.DESC)],
            ["mnist", "cifar"])
        d.get_model("cifar").delete()
        with self.assertRaisesRegex(errors.NotFoundException, "model 'cifar' does not exist"):
            d.get_model("cifar")
        with self.assertRaisesRegex(NotImplementedError, "workspaces"):
            d.create_model("x", workspace_name="w")


class DetignoreTest(unittest.TestCase):
    def test_gitignore_rules(self):
        rules = _context.ContextIgnore("\n".join([
            "# a comment", "*.log", "!keep.log", "/top.txt", "build/", "a/**/z", "data/*.csv",
            "\\#hash", "x[0-9]", "trail\\ ", "logs/**",
        ]))
        ignored = rules.ignored
        self.assertTrue(ignored(".git", True))
        self.assertTrue(ignored("pkg/__pycache__", True))
        self.assertTrue(ignored("m.pyc", False))
        self.assertTrue(ignored("d/e.log", False))
        self.assertFalse(ignored("d/keep.log", False))
        self.assertTrue(ignored("top.txt", False))
        self.assertFalse(ignored("d/top.txt", False))
        self.assertTrue(ignored("d/build", True))
        self.assertFalse(ignored("d/build", False))
        self.assertTrue(ignored("a/z", False))
        self.assertTrue(ignored("a/b/c/z", False))
        self.assertTrue(ignored("data/t.csv", False))
        self.assertFalse(ignored("data/sub/t.csv", False))
        self.assertTrue(ignored("#hash", False))
        self.assertTrue(ignored("x7", False))
        self.assertFalse(ignored("xa", False))
        self.assertTrue(ignored("trail ", False))
        self.assertTrue(ignored("logs/a/b", False))
        self.assertFalse(ignored("logs", True))

    def test_links_out_of_the_context_and_limits_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            ctx = os.path.join(tmp, "ctx")
            os.makedirs(ctx)
            with open(os.path.join(ctx, "a.py"), "w") as f:
                f.write("print(1)\n")
            os.symlink("a.py", os.path.join(ctx, "b.py"))
            files = _context.read_context(ctx)
            self.assertEqual([(f.path, f.content) for f in files],
                             [("a.py", b"print(1)\n"), ("b.py", b"print(1)\n")])
            with self.assertRaisesRegex(ValueError, "more than 1 files"):
                _context.read_context(ctx, max_files=1)
            with self.assertRaisesRegex(ValueError, "more than the limit of 4"):
                _context.read_context(ctx, max_bytes=4)
            os.symlink("/etc/hostname", os.path.join(ctx, "c"))
            with self.assertRaisesRegex(ValueError, "symbolic link to /etc/hostname"):
                _context.read_context(ctx)


if __name__ == "__main__":
    unittest.main()
