"""det's Python SDK, with the names and behaviour of Determined's
`determined.experimental.client` (a Determined script changes `determined` to `det`):

    from det.experimental import client

    client.login(master="localhost:8080", user="admin", password="...")  # or the CLI's session
    exp = client.create_experiment(config="const.yaml", model_dir="model_dir")
    state = exp.wait()
    ckpt = exp.top_checkpoint()
    path = ckpt.download()

It talks to det's user API over gRPC (the det CLI's service and address: `-m`/DET_MASTER,
default localhost:8080). docs/sdk.md has the whole API.

Every function but login() uses the module's default client, logged in on first use as
login() with no arguments does. What det's master cannot do yet raises NotImplementedError
naming it."""

import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from det._proto import api_pb2, types_pb2
from det.experimental import _context, _session, errors
from det.experimental.checkpoint import (Checkpoint, CheckpointOrderBy, CheckpointSortBy,
                                         CheckpointState, CheckpointTrainingMetadata)
from det.experimental.experiment import (Experiment, ExperimentState, TrialOrderBy,
                                         TrialSortBy)
from det.experimental.model import Model, ModelOrderBy, ModelSortBy, ModelVersion
from det.experimental.trial import Trial, TrialMetrics, TrialState

# Determined's names of the order enums.
OrderBy = CheckpointOrderBy


def _config_text(config: Union[str, "os.PathLike[str]", Dict[str, Any]]) -> Dict[str, str]:
    """config_yaml and config_path of a config given as a file name or a dict."""
    if isinstance(config, dict):
        # JSON is YAML: no YAML writer needed.
        return {"config_yaml": json.dumps(config), "config_path": ""}
    path = os.fspath(config)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file '{path}' does not exist (create_experiment takes "
                                "a config file's path or a dict)")
    with open(path, encoding="utf-8") as f:
        return {"config_yaml": f.read(), "config_path": path}


class Determined:
    """A client of one det master, logged in as one user (Determined's
    determined.experimental.Determined).

    `master`: "host:port", "http://host:port", "https://host:port" or "host" (port 8080);
    default $DET_MASTER, else localhost:8080. The session: `token` when given; else with
    `password`, a login as `user` (default "admin"); else $DET_USER_TOKEN; else the det
    CLI's stored session for that master (~/.det/auth.json, written by `det user login`;
    with `user`, only that user's); else none (a master that checks users then refuses
    calls with UnauthenticatedException). `cert_path`: the CA file that signed the master's
    certificate (default $DET_MASTER_CERT_FILE; an https:// master without one uses the
    system's CAs). `noverify=True` raises NotImplementedError: det's client always checks the
    master's certificate."""

    def __init__(self, master: Optional[str] = None, user: Optional[str] = None,
                 password: Optional[str] = None, cert_path: Optional[str] = None,
                 noverify: bool = False, token: Optional[str] = None) -> None:
        if noverify:
            raise NotImplementedError("noverify: det's SDK always verifies the master's "
                                      "certificate; give the CA as cert_path instead")
        master = master or os.environ.get("DET_MASTER") or _session.DEFAULT_MASTER
        self._session = _session.Session(master, cert_path=cert_path)
        if token is not None:
            self._session.token, self._session.username = token, user
        elif password is not None:
            self._login(user or "admin", password)
        elif os.environ.get("DET_USER_TOKEN"):
            self._session.token = os.environ["DET_USER_TOKEN"]
        else:
            stored = _session.load_stored_session(self._session.address)
            if stored is not None:
                username, stored_token = stored
                if user is not None and username != user:
                    raise errors.UnauthenticatedException(
                        f"the det CLI's session for {self._session.address} is {username!r}'s, "
                        f"not {user!r}'s: log in as {user!r} with `det user login {user}` or "
                        "give a password", "UNAUTHENTICATED")
                self._session.token, self._session.username = stored_token, username

    def _login(self, user: str, password: str) -> None:
        resp = self._session.call("Login", api_pb2.LoginRequest(username=user,
                                                                password=password))
        self._session.token, self._session.username = resp.token, resp.user.username or user

    @property
    def master(self) -> str:
        """host:port of the master."""
        return self._session.address

    @property
    def token(self) -> Optional[str]:
        """The session token calls carry (None: none)."""
        return self._session.token

    def logout(self) -> None:
        """Ends the session on the master (the CLI's stored session too, when it is that one)."""
        self._session.call("Logout", api_pb2.LogoutRequest())
        self._session.token = None

    def whoami(self) -> str:
        """The username of the session."""
        return str(self._session.call("WhoAmI", api_pb2.WhoAmIRequest()).user.username)

    def close(self) -> None:
        self._session.close()

    def create_experiment(self, config: Union[str, "os.PathLike[str]", Dict[str, Any]],
                          model_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                          includes: Optional[Sequence[Union[str, "os.PathLike[str]"]]] = None,
                          parent_id: Optional[int] = None, project_id: Optional[int] = None,
                          template: Optional[str] = None,
                          activate: bool = True) -> Experiment:
        """Creates an experiment from `config` (a config file's path, or a dict) and the
        model context `model_dir` (uploaded as `det experiment create` uploads it: its
        .detignore applies; at most 64 MiB and 10,000 files), with each of `includes` (a file
        or directory) added under its own name. `template`: a stored template to merge the
        config over. `activate=False` creates it PAUSED (activate() starts it). The master's
        refusal (a config error names its line) raises BadRequestException. `parent_id`
        (forking) and `project_id` raise NotImplementedError: det has no experiment forks and
        no projects."""
        if parent_id is not None:
            raise NotImplementedError("create_experiment(parent_id=...): det's master cannot "
                                      "fork an experiment yet")
        if project_id is not None:
            raise NotImplementedError("create_experiment(project_id=...): det has no projects")
        request = api_pb2.CreateExperimentRequest(**_config_text(config),
                                                  template=template or "",
                                                  paused=not activate)
        if model_dir is not None or includes:
            request.context.extend(_context.read_context(
                os.fspath(model_dir) if model_dir is not None else None,
                [os.fspath(i) for i in includes or []]))
        resp = self._create(request)
        for w in resp.warnings:
            print(f"Warning: {w}")
        return Experiment._from_proto(resp.experiment, self._session)

    def _create(self, request: api_pb2.CreateExperimentRequest) -> Any:
        """CreateExperimentStream (the context in pieces of at most 1 MiB), or the unary call
        with a master older than the stream."""
        try:
            return self._session.call("CreateExperimentStream", _chunks(request),
                                      extra_timeout=600.0)
        except errors.APIException as e:
            if e.code != "UNIMPLEMENTED":
                raise
        return self._session.call("CreateExperiment", request, extra_timeout=600.0)

    def get_experiment(self, experiment_id: int) -> Experiment:
        """The experiment of id `experiment_id` (NotFoundException when there is none)."""
        e = Experiment(experiment_id, self._session)
        e.reload()
        return e

    def list_experiments(self, name: Optional[str] = None,
                         states: Optional[List[ExperimentState]] = None,
                         users: Optional[List[str]] = None,
                         archived: Optional[bool] = None,
                         labels: Optional[List[str]] = None) -> List[Experiment]:
        """Experiments, oldest first: those whose name contains `name`, in one of `states`,
        owned by one of `users`, with all of `labels`; archived ones only with
        `archived=True` (True: only archived ones; None/False: only unarchived ones)."""
        found: List[Experiment] = []
        offset = 0
        while True:
            req = api_pb2.ListExperimentsRequest(limit=100, offset=offset, name=name or "",
                                                 include_archived=bool(archived))
            if users is not None and len(users) == 1:
                req.user = users[0]
            for s in states or []:
                req.states.append(types_pb2.State.Value(s.value))
            resp = self._session.call("ListExperiments", req)
            for e in resp.experiments:
                if users is not None and e.owner not in users:
                    continue
                if archived and not e.archived:
                    continue
                if labels and not set(labels) <= set(e.labels):
                    continue
                found.append(Experiment._from_proto(e, self._session))
            offset += len(resp.experiments)
            if not resp.experiments or offset >= resp.total:
                break
        return sorted(found, key=lambda e: e.id)

    def get_trial(self, trial_id: int) -> Trial:
        """The trial of id `trial_id` (NotFoundException when there is none)."""
        t = Trial(trial_id, self._session)
        t.reload()
        return t

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        """The checkpoint of `uuid` (NotFoundException when there is none)."""
        c = self._session.call("GetCheckpoint", api_pb2.GetCheckpointRequest(uuid=uuid))
        return Checkpoint(self._session, c.checkpoint)

    # The model registry.

    def create_model(self, name: str, description: Optional[str] = "",
                     metadata: Optional[Dict[str, Any]] = None,
                     labels: Optional[List[str]] = None,
                     workspace_name: Optional[str] = None) -> Model:
        """Creates model `name` (1 to 128 letters, digits, '.', '_' or '-'), owned by the
        session's user. APIException with code ALREADY_EXISTS for a name taken.
        `workspace_name` raises NotImplementedError: det has no workspaces."""
        if workspace_name is not None:
            raise NotImplementedError("create_model(workspace_name=...): det has no workspaces")
        resp = self._session.call("CreateModel", api_pb2.CreateModelRequest(
            name=name, description=description or "", labels=list(labels or []),
            metadata_json=json.dumps(metadata) if metadata else ""))
        return Model(self._session, resp.model)

    def get_model(self, identifier: Union[str, int]) -> Model:
        """The model named `identifier` (an int: the model of that id). NotFoundException
        when there is none."""
        if isinstance(identifier, int):
            return self.get_model_by_id(identifier)
        resp = self._session.call("GetModel", api_pb2.GetModelRequest(name=identifier))
        return Model(self._session, resp.model)

    def get_model_by_id(self, model_id: int) -> Model:
        """The model of id `model_id` (NotFoundException when there is none)."""
        for m in self.list_models():
            if m.model_id == model_id:
                return m
        raise errors.NotFoundException(f"model {model_id} does not exist", "NOT_FOUND")

    def list_models(self, sort_by: ModelSortBy = ModelSortBy.NAME,
                    order_by: OrderBy = OrderBy.ASC, name: str = "", description: str = "",
                    model_id: Optional[int] = None, labels: Optional[List[str]] = None,
                    username: Optional[str] = None) -> List[Model]:
        """The models, sorted by `sort_by`: those whose name is `name` and whose
        description contains `description` (when given), of id `model_id`, with every one
        of `labels`, created by `username`."""
        resp = self._session.call("ListModels", api_pb2.ListModelsRequest(
            labels=list(labels or []), user=username or ""))
        models = [Model(self._session, m) for m in resp.models
                  if (not name or m.name == name) and description in m.description and
                  (model_id is None or m.id == model_id)]
        key = {
            ModelSortBy.NAME: lambda m: m.name,
            ModelSortBy.DESCRIPTION: lambda m: m.description,
            ModelSortBy.CREATION_TIME: lambda m: m.creation_time,
            ModelSortBy.LAST_UPDATED_TIME: lambda m: m.last_updated_time,
            ModelSortBy.NUM_VERSIONS: lambda m: m.num_versions,
        }.get(sort_by, lambda m: m.model_id)
        return sorted(models, key=key, reverse=order_by.value == "DESC")

    def get_models(self, sort_by: ModelSortBy = ModelSortBy.NAME,
                   order_by: OrderBy = OrderBy.ASC, name: str = "", description: str = "",
                   model_id: Optional[int] = None) -> List[Model]:
        """list_models() under the name Determined's older SDK used."""
        return self.list_models(sort_by, order_by, name, description, model_id)


def _chunks(request: api_pb2.CreateExperimentRequest) -> Iterator[api_pb2.CreateExperimentChunk]:
    """CreateExperimentStream's messages for `request`: the request without its context and
    the context's counts, then each file in pieces (an empty file is one empty piece)."""
    head = api_pb2.CreateExperimentRequest()
    head.CopyFrom(request)
    head.ClearField("context")
    yield api_pb2.CreateExperimentChunk(
        request=head, context_files=len(request.context),
        context_bytes=sum(len(f.content) for f in request.context))
    for f in request.context:
        size = len(f.content)
        offset = 0
        while True:
            piece = f.content[offset:offset + _context.CHUNK_BYTES]
            yield api_pb2.CreateExperimentChunk(file=api_pb2.ContextFileChunk(
                path=f.path, mode=f.mode, offset=offset, content=piece, size=size))
            offset += len(piece)
            if offset >= size:
                break


# The module's default client (Determined's module-level functions).
_client: Optional[Determined] = None


def login(master: Optional[str] = None, user: Optional[str] = None,
          password: Optional[str] = None, cert_path: Optional[str] = None,
          noverify: bool = False, token: Optional[str] = None) -> Determined:
    """Makes the module's default client (see Determined for the arguments) and returns it.
    Without a call to login(), the first function called logs in as login() would with no
    arguments: $DET_MASTER and $DET_USER_TOKEN, or the det CLI's stored session."""
    global _client
    _client = Determined(master=master, user=user, password=password, cert_path=cert_path,
                         noverify=noverify, token=token)
    return _client


def _default() -> Determined:
    if _client is None:
        login()
    assert _client is not None
    return _client


def create_experiment(config: Union[str, "os.PathLike[str]", Dict[str, Any]],
                      model_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                      includes: Optional[Sequence[Union[str, "os.PathLike[str]"]]] = None,
                      parent_id: Optional[int] = None, project_id: Optional[int] = None,
                      template: Optional[str] = None, activate: bool = True) -> Experiment:
    """Determined.create_experiment on the default client."""
    return _default().create_experiment(config, model_dir, includes=includes,
                                        parent_id=parent_id, project_id=project_id,
                                        template=template, activate=activate)


def get_experiment(experiment_id: int) -> Experiment:
    """Determined.get_experiment on the default client."""
    return _default().get_experiment(experiment_id)


def list_experiments(name: Optional[str] = None, states: Optional[List[ExperimentState]] = None,
                     users: Optional[List[str]] = None, archived: Optional[bool] = None,
                     labels: Optional[List[str]] = None) -> List[Experiment]:
    """Determined.list_experiments on the default client."""
    return _default().list_experiments(name=name, states=states, users=users,
                                       archived=archived, labels=labels)


def get_trial(trial_id: int) -> Trial:
    """Determined.get_trial on the default client."""
    return _default().get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    """Determined.get_checkpoint on the default client."""
    return _default().get_checkpoint(uuid)


def create_model(name: str, description: Optional[str] = "",
                 metadata: Optional[Dict[str, Any]] = None, labels: Optional[List[str]] = None,
                 workspace_name: Optional[str] = None) -> Model:
    """Determined.create_model on the default client."""
    return _default().create_model(name, description, metadata, labels, workspace_name)


def get_model(identifier: Union[str, int]) -> Model:
    """Determined.get_model on the default client."""
    return _default().get_model(identifier)


def get_model_by_id(model_id: int) -> Model:
    """Determined.get_model_by_id on the default client."""
    return _default().get_model_by_id(model_id)


def list_models(sort_by: ModelSortBy = ModelSortBy.NAME, order_by: OrderBy = OrderBy.ASC,
                name: str = "", description: str = "", model_id: Optional[int] = None,
                labels: Optional[List[str]] = None,
                username: Optional[str] = None) -> List[Model]:
    """Determined.list_models on the default client."""
    return _default().list_models(sort_by, order_by, name, description, model_id, labels,
                                  username)


def get_models(sort_by: ModelSortBy = ModelSortBy.NAME, order_by: OrderBy = OrderBy.ASC,
               name: str = "", description: str = "",
               model_id: Optional[int] = None) -> List[Model]:
    """Determined.get_models on the default client."""
    return _default().get_models(sort_by, order_by, name, description, model_id)


__all__ = [
    "Checkpoint", "CheckpointOrderBy", "CheckpointSortBy", "CheckpointState",
    "CheckpointTrainingMetadata", "Determined", "Experiment", "ExperimentState", "Model",
    "ModelOrderBy", "ModelSortBy", "ModelVersion", "OrderBy", "Trial", "TrialMetrics", "TrialOrderBy", "TrialSortBy", "TrialState", "create_experiment",
    "create_model", "get_checkpoint", "get_experiment", "get_model", "get_model_by_id",
    "get_models", "get_trial", "list_experiments", "list_models", "login",
]
