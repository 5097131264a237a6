"""Exceptions of the trainctl client: one class per gRPC status code.

Every failed call to the coordinator raises a TrainctlError subclass whose
``code`` is the ``grpc.StatusCode`` and whose ``message`` is the
coordinator's own message (which names the field, job, rank or node at
fault). Arguments the client itself rejects before any call raise
InvalidArgument too (also a ValueError), or TypeError for a wrong type or an
unknown keyword.

This module does not import grpc until ``code`` is read, so that
``import trainctl`` stays cheap for ``trainctl.report`` outside a task.
"""

from typing import Dict, Optional, Type


class TrainctlError(Exception):
    """A call to the coordinator failed.

    Attributes:
      message (str): the coordinator's message (or the client's, for
        UNAVAILABLE and a client-side deadline: it names the address).
      code (grpc.StatusCode): the gRPC status code.
      code_name (str): the code's name, e.g. "NOT_FOUND".
    """

    code_name = "UNKNOWN"

    def __init__(self, message: str, code_name: Optional[str] = None):
        super().__init__(message)
        self.message = message
        if code_name is not None:
            self.code_name = code_name

    @property
    def code(self):
        import grpc
        return grpc.StatusCode[self.code_name]

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(%r, code=%s)" % (type(self).__name__, self.message, self.code_name)


class Cancelled(TrainctlError):
    code_name = "CANCELLED"


class Unknown(TrainctlError):
    code_name = "UNKNOWN"


class InvalidArgument(TrainctlError, ValueError):
    """A bad argument: the message names the field (e.g. "spec.priority")."""
    code_name = "INVALID_ARGUMENT"


class DeadlineExceeded(TrainctlError):
    code_name = "DEADLINE_EXCEEDED"


class NotFound(TrainctlError, LookupError):
    """No such job (or sweep, or rank placed)."""
    code_name = "NOT_FOUND"


class AlreadyExists(TrainctlError):
    code_name = "ALREADY_EXISTS"


class PermissionDenied(TrainctlError):
    """Authenticated, but not allowed (another user's job, a wrong task token)."""
    code_name = "PERMISSION_DENIED"


class ResourceExhausted(TrainctlError):
    code_name = "RESOURCE_EXHAUSTED"


class FailedPrecondition(TrainctlError):
    """The job or cluster is not in a state that allows the call."""
    code_name = "FAILED_PRECONDITION"


class Aborted(TrainctlError):
    code_name = "ABORTED"


class OutOfRange(TrainctlError):
    code_name = "OUT_OF_RANGE"


class Unimplemented(TrainctlError):
    code_name = "UNIMPLEMENTED"


class Internal(TrainctlError):
    code_name = "INTERNAL"


class Unavailable(TrainctlError):
    """The coordinator could not be reached (it never answers UNAVAILABLE
    itself)."""
    code_name = "UNAVAILABLE"


class DataLoss(TrainctlError):
    code_name = "DATA_LOSS"


class Unauthenticated(TrainctlError):
    """No valid bearer token: set TRAINCTL_AUTH_TOKEN, `token` in the config
    file, or Client(token=...)."""
    code_name = "UNAUTHENTICATED"


_BY_NAME: Dict[str, Type[TrainctlError]] = {
    c.code_name: c
    for c in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound,
              AlreadyExists, PermissionDenied, ResourceExhausted,
              FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal,
              Unavailable, DataLoss, Unauthenticated)
}


def error_for(code_name: str, message: str) -> TrainctlError:
    """The exception for a status code name ("NOT_FOUND") and message; an
    unknown name gives a plain TrainctlError carrying it."""
    cls = _BY_NAME.get(code_name)
    if cls is None:
        return TrainctlError(message, code_name)
    return cls(message)


def from_rpc_error(err, address: str = "", timeout_s: Optional[float] = None) -> TrainctlError:
    """Converts a ``grpc.RpcError`` (a ``grpc.Call``: ``code()``, ``details()``)
    into its TrainctlError subclass, the one place this happens.

    As the CLI does (client/cli_common.cc, ToUserStatus): UNAVAILABLE says
    which address could not be reached and how to point elsewhere, and gRPC's
    bare "Deadline Exceeded" of a client-side deadline says how long was
    waited; every other message is the coordinator's, unchanged.
    """
    code = err.code()
    name = code.name if code is not None else "UNKNOWN"
    details = err.details() or name
    if name == "UNAVAILABLE":
        details = ("cannot reach the coordinator at %s: %s (is trainctl-coordinator "
                   "running? set TRAINCTL_COORDINATOR or Client(address=...))"
                   % (address, details))
    elif name == "DEADLINE_EXCEEDED" and details == "Deadline Exceeded" and timeout_s:
        details = "the coordinator at %s did not answer within %g s" % (address, timeout_s)
    return error_for(name, details)
