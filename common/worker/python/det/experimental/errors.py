"""Errors of det.experimental.client, named as Determined's SDK names them
(determined.common.api.errors): every failed call of the master raises an APIException, or
the subclass of its gRPC status code."""

from typing import Optional


class APIException(Exception):
    """A call to the master failed. `code` is the gRPC status code's name ("NOT_FOUND",
    "INVALID_ARGUMENT", ...); the message is the master's."""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class BadRequestException(APIException):
    """INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE: the master refused the request
    (a config error names its line, an action names the state that forbids it)."""


class NotFoundException(APIException):
    """NOT_FOUND: no experiment, trial or checkpoint of that id."""


class UnauthenticatedException(APIException):
    """UNAUTHENTICATED: no session, or it expired. Log in with `det user login` or
    client.login(user=..., password=...)."""


class ForbiddenException(APIException):
    """PERMISSION_DENIED: the caller may not do this (only an experiment's owner or an admin
    may kill it, ...)."""


class MasterNotFoundException(APIException):
    """UNAVAILABLE: the master cannot be reached at the address given."""


class MasterTimeoutException(APIException):
    """DEADLINE_EXCEEDED: the master did not answer in time."""


# gRPC status code name -> the exception raised for it.
_BY_CODE = {
    "INVALID_ARGUMENT": BadRequestException,
    "FAILED_PRECONDITION": BadRequestException,
    "OUT_OF_RANGE": BadRequestException,
    "NOT_FOUND": NotFoundException,
    "UNAUTHENTICATED": UnauthenticatedException,
    "PERMISSION_DENIED": ForbiddenException,
    "UNAVAILABLE": MasterNotFoundException,
    "DEADLINE_EXCEEDED": MasterTimeoutException,
}


def for_code(code: str, message: str) -> APIException:
    """The exception for gRPC status code `code` (its name) with `message`."""
    return _BY_CODE.get(code, APIException)(message, code)
