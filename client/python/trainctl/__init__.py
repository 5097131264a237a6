"""trainctl: the Python client of trainctl-coordinator.

Submit, wait for and inspect jobs from Python, and report training metrics
from inside a task::

    import trainctl
    client = trainctl.Client()            # TRAINCTL_COORDINATOR, config file...
    job = client.submit(["python", "train.py"], gpu_fraction=0.25)
    print(job.wait())                     # "succeeded"
    print(job.metrics()["loss"][-1])      # (step, value)

    # inside the task (train.py):
    trainctl.report(loss=0.25, step=100)

Errors of the coordinator are raised as TrainctlError subclasses carrying the
gRPC code and the coordinator's message (NotFound, InvalidArgument, ...).
The gRPC stubs (``trainctl.v1``) are generated at install or build time from
proto/trainctl/v1 (client/python/build_stubs.py); nothing generated is kept
in git.
"""

# The generated stubs may live in another sys.path entry than this source
# (a CMake build dir's client/python/gen/trainctl/v1 next to the checkout's
# client/python/trainctl): let `trainctl.v1` be found in either.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from trainctl.errors import (  # noqa: E402
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    TrainctlError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from trainctl.reporting import flush, report  # noqa: E402
from trainctl.units import parse_byte_size  # noqa: E402

__version__ = "0.1.0"


def __getattr__(name):
    # The client needs grpc and the generated stubs; report() outside a task
    # and the unit tests of the pure parts do not, so load it on first use.
    if name in ("Client", "Job", "Node", "Gpu", "Sweep", "JobArray"):
        from trainctl import client as _client
        return getattr(_client, name)
    raise AttributeError("module 'trainctl' has no attribute %r" % name)


__all__ = [
    "Client", "Job", "Node", "Gpu", "Sweep", "JobArray", "report", "flush", "parse_byte_size",
    "TrainctlError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded",
    "NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
    "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal",
    "Unavailable", "DataLoss", "Unauthenticated",
]
