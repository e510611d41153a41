"""The SDK's connection to the master: det's user API (det.v1.Api, proto/api.proto) over
gRPC, the service the det CLI calls, on the same address (`-m`/DET_MASTER, default
localhost:8080) and with the same session tokens (DET_USER_TOKEN, else the CLI's
~/.det/auth.json, else a login with a user and password)."""

import json
import os
import stat
from typing import Any, Callable, Dict, Optional, Tuple

import grpc

from det._proto import api_pb2, api_pb2_grpc
from det.experimental import errors

DEFAULT_PORT = 8080
DEFAULT_MASTER = "localhost:8080"
# Each call's deadline, in seconds; long polls get their wait on top of it.
DEFAULT_TIMEOUT = 30.0
# Largest message received (the master sends no larger one).
_MAX_MESSAGE_BYTES = 128 << 20
# The master's environment variable for a CA file to trust (as the CLI reads it).
_CERT_FILE_ENV = "DET_MASTER_CERT_FILE"


def parse_master_address(master: str) -> str:
    """"host:port" for a master given as "http://host:port", "https://host:port",
    "host:port" or "host" (port 8080), as the det CLI reads -m: the key of its stored
    sessions. ValueError naming the address when it has no host, a path or a bad port."""
    original = master
    rest = master.strip()
    for scheme in ("http://", "https://"):
        if rest.startswith(scheme):
            rest = rest[len(scheme):]
            break
    rest = rest.rstrip("/")

    def bad(why: str) -> ValueError:
        return ValueError(f"invalid master address '{original}': {why}")

    if not rest:
        raise bad("no host")
    if "/" in rest:
        raise bad("unexpected path")
    host, port = rest, ""
    if rest.startswith("["):  # [IPv6]:port
        close = rest.find("]")
        if close < 0:
            raise bad("unclosed '['")
        host, after = rest[:close + 1], rest[close + 1:]
        if after:
            if not after.startswith(":"):
                raise bad("expected ':' after ']'")
            port = after[1:]
            if not port:
                raise bad("empty port")
    elif rest.count(":") > 1:  # a bare IPv6 address
        return f"[{rest}]:{DEFAULT_PORT}"
    elif ":" in rest:
        host, port = rest.rsplit(":", 1)
        if not port:
            raise bad("empty port")
    if not host or host == "[]":
        raise bad("no host")
    number = DEFAULT_PORT
    if port:
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise bad(f"bad port '{port}'")
        number = int(port)
    return f"{host}:{number}"


def auth_file_path() -> Optional[str]:
    """$HOME/.det/auth.json (the det CLI's session file), or None without a HOME."""
    home = os.environ.get("HOME")
    return os.path.join(home, ".det", "auth.json") if home else None


def load_stored_session(address: str, path: Optional[str] = None) -> Optional[Tuple[str, str]]:
    """(username, token) the det CLI keeps for `address` (host:port) in its auth file
    ({"masters": {"host:port": {"username", "token"}}}, cli/auth_store.h), or None when the
    file or the entry does not exist. PermissionError when others may read the file (as the
    CLI refuses it); ValueError when it is not such a file."""
    path = path or auth_file_path()
    if path is None:
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if st.st_mode & 0o077:
        raise PermissionError(
            f"'{path}' holds session tokens but other users may read it (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {path}`")
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict):
        raise ValueError(f"'{path}' is not a det auth file (JSON object); remove it and log "
                         "in again")
    masters = data.get("masters")
    entry = masters.get(address) if isinstance(masters, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        return None
    return str(entry.get("username", "")), entry["token"]


def _credentials(master: str, cert_path: Optional[str]) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials for the master, or None for plaintext: TLS with `cert_path` (or
    DET_MASTER_CERT_FILE) as the CA to trust, or with the system's CAs for an https://
    master; never plaintext for https://."""
    ca_file = cert_path or os.environ.get(_CERT_FILE_ENV) or None
    if ca_file:
        with open(ca_file, "rb") as f:
            return grpc.ssl_channel_credentials(root_certificates=f.read())
    if master.strip().startswith("https://"):
        return grpc.ssl_channel_credentials()
    return None


class Session:
    """A channel to the master's user API and the token its calls carry. Thread-compatible.

    `master`: as det's CLI takes it (see parse_master_address). `token`: the session token
    sent as "authorization: Bearer TOKEN"; None sends none (a master that checks users then
    answers UNAUTHENTICATED)."""

    def __init__(self, master: str, token: Optional[str] = None, username: Optional[str] = None,
                 cert_path: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.master = master
        self.address = parse_master_address(master)
        self.token = token
        self.username = username
        self.timeout = timeout
        options = [("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES)]
        creds = _credentials(master, cert_path)
        if creds is None:
            self._channel = grpc.insecure_channel(self.address, options=options)
        else:
            self._channel = grpc.secure_channel(self.address, creds, options=options)
        self._stub = api_pb2_grpc.ApiStub(self._channel)
        # Experiment id -> its config as a dict (configs never change once created).
        self._configs: Dict[int, Dict[str, Any]] = {}

    def close(self) -> None:
        self._channel.close()

    def _metadata(self) -> Tuple[Tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def _error(self, e: grpc.RpcError, method: str, timeout: float) -> errors.APIException:
        code = e.code() if hasattr(e, "code") else None
        name = code.name if code is not None else "UNKNOWN"
        detail = e.details() if hasattr(e, "details") else str(e)
        if name == "UNAVAILABLE":
            message = f"cannot reach the master at {self.address}: {detail}"
            if "http1" in (detail or "").lower():
                message += ("\n(that port speaks HTTP/1: it is the master's web and REST port; "
                            "the SDK talks gRPC to the master's grpc_listen port, 8080 by "
                            "default)")
        elif name == "DEADLINE_EXCEEDED":
            message = (f"the master at {self.address} did not answer {method} within "
                       f"{timeout:g} s")
        elif name == "UNAUTHENTICATED":
            message = (f"{detail or 'not logged in'} (log in with `det -m {self.master} user "
                       "login`, set DET_USER_TOKEN, or call client.login(user=..., "
                       "password=...))")
        else:
            message = detail or f"{method} failed with gRPC code {name}"
        return errors.for_code(name, message)

    def call(self, method: str, request: Any, extra_timeout: float = 0.0) -> Any:
        """Calls Api method `method` (its name, e.g. "GetExperiment") with `request` (for a
        client-streaming method, an iterator of its messages); raises an errors.APIException
        (by code) on failure."""
        timeout = self.timeout + extra_timeout
        try:
            return getattr(self._stub, method)(request, timeout=timeout,
                                               metadata=self._metadata())
        except grpc.RpcError as e:
            raise self._error(e, method, timeout) from None

    def experiment_config(self, experiment_id: int,
                          fetch: Optional[Callable[[], str]] = None) -> Dict[str, Any]:
        """The effective config of experiment `experiment_id` as a dict (cached)."""
        if experiment_id not in self._configs:
            if fetch is not None:
                text = fetch()
            else:
                text = self.call("GetExperiment", api_pb2.GetExperimentRequest(
                    id=experiment_id)).experiment.config_yaml
            self._configs[experiment_id] = parse_yaml(text)
        return self._configs[experiment_id]


def parse_yaml(text: str) -> Dict[str, Any]:
    """A YAML mapping (an experiment config as the master stores it) as a dict. Needs PyYAML
    (Debian's python3-yaml)."""
    if not text:
        return {}
    try:
        import yaml  # type: ignore[import]
    except ImportError:
        raise ImportError("reading an experiment's config needs PyYAML (Debian: apt install "
                          "python3-yaml; pip install PyYAML)") from None
    value = yaml.safe_load(text)
    return value if isinstance(value, dict) else {}
