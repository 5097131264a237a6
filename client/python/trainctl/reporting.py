"""``trainctl.report``: a training process reports scalar metrics (loss,
val_loss, samples_per_s...) to the coordinator, identified by the launch
environment of its task (docs/design.md §4): TRAINCTL_COORDINATOR,
TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT, TRAINCTL_TOKEN, RANK, and
TRAINCTL_TLS_CA when the agent runs with TLS.

Batching, as worker/nccl/metrics_reporter.h does it and for the same reason:
the coordinator makes each report durable (one transaction, one fsync)
before it replies, about a millisecond or more, so report() only buffers.
The buffer is sent in one ReportMetrics call when it holds
``max_buffered_points`` (64) points or its oldest point is
``flush_interval_s`` (1 s) old -- checked at each report(), there is no
background thread -- and at interpreter exit (atexit). flush() sends now and
returns once the coordinator has stored every point. What a crash can lose
is what was not flushed.

Outside a trainctl task (no TRAINCTL_JOB_ID) report() and flush() do
nothing, and the first report() says so once with warnings.warn.
"""

import atexit
import math
import os
import re
import sys
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from trainctl.errors import (FailedPrecondition, InvalidArgument, ResourceExhausted,
                             TrainctlError, Unavailable)

_KEY = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")
# The coordinator's limit of points in one report.
MAX_POINTS_PER_REPORT = 1000

Point = Tuple[str, float, int]


def check_key(key: str) -> None:
    """Raises InvalidArgument unless ``key`` is 1 to 128 bytes of
    [A-Za-z0-9_.:/-] (the coordinator's rule)."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise InvalidArgument('metric key "%s": must be 1 to 128 characters of letters, '
                              "digits and _ . : / -" % (key,))


def to_float(key: str, value: Any) -> float:
    """``value`` as a finite float: ints, floats, numpy scalars and one-element
    tensors (anything with .item()). Raises TypeError for a non-number,
    InvalidArgument for NaN or infinity."""
    item = getattr(value, "item", None)
    if callable(item):
        value = item()
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError("metric %s: expected a number, got %s" % (key, type(value).__name__))
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TypeError("metric %s: expected a number, got %s"
                        % (key, type(value).__name__)) from None
    if not math.isfinite(f):
        raise InvalidArgument("metric %s: value must be finite, got %r" % (key, f))
    return f


class Reporter:
    """Buffers and sends one process's metric points. Thread-safe: one lock;
    a send happens under it, so concurrent reporters wait for it.

    ``send(points)`` delivers a list of (key, value, step) of at most
    MAX_POINTS_PER_REPORT points and returns once they are stored, or raises
    a TrainctlError (Unavailable: kept for the next try; anything else: the
    points are dropped, since sending them again cannot succeed).
    ``clock`` returns seconds (monotonic).
    """

    def __init__(self, send: Callable[[List[Point]], Any], *,
                 clock: Callable[[], float] = time.monotonic,
                 max_buffered_points: int = 64, flush_interval_s: float = 1.0,
                 max_pending_points: int = 100_000):
        self._send = send
        self._clock = clock
        self.max_buffered_points = max(1, min(max_buffered_points, MAX_POINTS_PER_REPORT))
        self.flush_interval_s = flush_interval_s
        self.max_pending_points = max_pending_points
        self._lock = threading.Lock()
        self._buffer: List[Point] = []
        self._oldest = 0.0
        self._next_step = 0
        self._unavailable_warned = False

    @property
    def pending(self) -> int:
        """Points buffered, not yet stored."""
        with self._lock:
            return len(self._buffer)

    def report(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        """Buffers one step's metrics; sends the buffer when it is due.

        ``step`` (int >= 0): the training step (or epoch, or any growing
        counter) of the values; None means one past the previous report()'s
        step (0 at first). Raises InvalidArgument for a bad key, a value that
        is not finite or a negative step (nothing of the call is buffered);
        TypeError for a value that is not a number; ResourceExhausted when
        max_pending_points wait (the coordinator unreachable for long); and
        the TrainctlError of a send it triggered other than Unavailable
        (Unavailable warns once and keeps the points for the next try).
        """
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            item = getattr(step, "item", None)  # a numpy or torch integer
            if not callable(item) or not isinstance(item(), int):
                raise TypeError("step: expected an int, got %s" % type(step).__name__)
            step = item()
        if step is not None and step < 0:
            raise InvalidArgument("step must be >= 0, got %d" % step)
        points = []
        for key, value in metrics.items():
            check_key(key)
            points.append((key, to_float(key, value)))
        with self._lock:
            if step is None:
                step = self._next_step
            self._next_step = step + 1
            if not points:
                return
            if len(self._buffer) + len(points) > self.max_pending_points:
                raise ResourceExhausted(
                    "%d metric points are waiting to be sent (is the coordinator "
                    "reachable?); these were not kept" % len(self._buffer))
            now = self._clock()
            if not self._buffer:
                self._oldest = now
            self._buffer.extend((k, v, step) for k, v in points)
            if (len(self._buffer) >= self.max_buffered_points
                    or now - self._oldest >= self.flush_interval_s):
                try:
                    self._flush_locked()
                except Unavailable as e:
                    if not self._unavailable_warned:
                        self._unavailable_warned = True
                        warnings.warn("trainctl.report(): %s; %d point(s) kept for the "
                                      "next try" % (e.message, len(self._buffer)),
                                      RuntimeWarning, stacklevel=3)

    def flush(self) -> None:
        """Sends every buffered point now (in reports of at most 1000) and
        returns once the coordinator has stored them (durable). Raises the
        TrainctlError of a failed send: Unavailable keeps the points for the
        next try; any other drops the refused report."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        while self._buffer:
            batch = self._buffer[:MAX_POINTS_PER_REPORT]
            try:
                self._send(batch)
            except Unavailable:
                raise  # kept
            except TrainctlError as e:
                del self._buffer[:len(batch)]
                self._oldest = self._clock()
                raise type(e)("%d metric point(s) refused: %s" % (len(batch), e.message),
                              e.code_name) from None
            del self._buffer[:len(batch)]
            self._oldest = self._clock()
            self._unavailable_warned = False


class GrpcMetricsSink:
    """Sends reports to the coordinator's ReportMetrics, authenticated by the
    attempt's token; the channel is made on the first send. Deadline 10 s a
    call."""

    def __init__(self, address: str, job_id: int, attempt: int, rank: int, token: str,
                 ca_pem: bytes = b"", timeout_s: float = 10.0):
        self.address, self.job_id, self.attempt, self.rank = address, job_id, attempt, rank
        self.token, self.ca_pem, self.timeout_s = token, ca_pem, timeout_s
        self._stub = None

    def __call__(self, points: List[Point]) -> None:
        import grpc
        from trainctl.v1 import metrics_pb2, service_pb2_grpc
        from trainctl.connection import Connection, make_channel
        from trainctl.errors import from_rpc_error

        if self._stub is None:
            self._stub = service_pb2_grpc.CoordinatorStub(
                make_channel(Connection(self.address, "", self.ca_pem)))
        request = metrics_pb2.ReportMetricsRequest(
            job_id=self.job_id, attempt=self.attempt, rank=self.rank, token=self.token,
            points=[metrics_pb2.MetricPoint(key=k, value=v, step=s) for k, v, s in points])
        try:
            self._stub.ReportMetrics(request, timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.address, self.timeout_s) from None


def reporter_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[Reporter]:
    """A Reporter for this task from its launch environment, or None outside
    a trainctl task (TRAINCTL_JOB_ID not set).

    Raises FailedPrecondition naming the variable when TRAINCTL_JOB_ID is set
    but TRAINCTL_ATTEMPT, TRAINCTL_COORDINATOR or RANK is missing or not a
    number, or TRAINCTL_TLS_CA cannot be read.
    """
    env = os.environ if environ is None else environ
    if not env.get("TRAINCTL_JOB_ID"):
        return None
    values: Dict[str, int] = {}
    for var, required in (("TRAINCTL_JOB_ID", True), ("TRAINCTL_ATTEMPT", True),
                          ("RANK", False)):
        text = env.get(var, "")
        if not text and not required:
            values[var] = 0
            continue
        try:
            values[var] = int(text)
        except ValueError:
            raise FailedPrecondition(
                "%s is %s: trainctl.report() runs inside a trainctl task, whose launch "
                "environment sets TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT and TRAINCTL_TOKEN"
                % (var, "not set" if not text else "not a number (%r)" % text)) from None
    address = env.get("TRAINCTL_COORDINATOR", "")
    if not address:
        raise FailedPrecondition("TRAINCTL_COORDINATOR is not set: trainctl.report() needs "
                                 "the coordinator's host:port from the task's environment")
    ca_pem = b""
    if env.get("TRAINCTL_TLS_CA"):
        try:
            with open(env["TRAINCTL_TLS_CA"], "rb") as f:
                ca_pem = f.read()
        except OSError as e:
            raise FailedPrecondition("cannot read the coordinator's CA certificate %s "
                                     "(TRAINCTL_TLS_CA): %s" % (env["TRAINCTL_TLS_CA"], e))
    sink = GrpcMetricsSink(address, values["TRAINCTL_JOB_ID"], values["TRAINCTL_ATTEMPT"],
                           values["RANK"], env.get("TRAINCTL_TOKEN", ""), ca_pem)
    return Reporter(sink)


# The process's reporter: made on the first report(); None outside a task.
_lock = threading.Lock()
_reporter: Optional[Reporter] = None
_resolved = False
_atexit_registered = False


def _default() -> Optional[Reporter]:
    global _reporter, _resolved, _atexit_registered
    with _lock:
        if not _resolved:
            _reporter = reporter_from_env()
            _resolved = True
            if _reporter is None:
                warnings.warn("trainctl.report(): not inside a trainctl task "
                              "(TRAINCTL_JOB_ID is not set); metrics are not recorded",
                              RuntimeWarning, stacklevel=3)
            elif not _atexit_registered:
                atexit.register(_flush_at_exit)
                _atexit_registered = True
        return _reporter


def _flush_at_exit() -> None:
    r = _reporter
    if r is None:
        return
    try:
        r.flush()
    except TrainctlError as e:
        sys.stderr.write("trainctl.report: at exit, %d metric point(s) not stored: %s\n"
                         % (r.pending, e.message))


def _reset(after_fork: bool = False) -> None:
    """Forgets the process's reporter (tests; and a forked child, whose copy
    of the parent's buffer and channel belongs to the parent)."""
    global _reporter, _resolved, _lock
    if after_fork:
        _lock = threading.Lock()
    _reporter = None
    _resolved = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _reset(after_fork=True))


def report(step: Optional[int] = None, **metrics: Any) -> None:
    """Reports scalars of one training step: ``report(loss=0.25, lr=3e-4,
    step=1200)``.

    Args:
      step (int, optional): training step (or epoch...), >= 0; None means one
        past the previous call's step (0 at first).
      **metrics (float): name -> value. Names are 1 to 128 characters of
        [A-Za-z0-9_.:/-] (pass a dict with ** for names such as "val/loss");
        values are finite numbers (ints, floats, numpy scalars, one-element
        tensors).

    Buffered and sent in batches (module docstring); durable after flush()
    or at interpreter exit. Outside a trainctl task: a no-op (one warning).
    Raises as Reporter.report.
    """
    r = _default()
    if r is not None:
        r.report(metrics, step)


def flush() -> None:
    """Sends every buffered point and returns once the coordinator stored
    them (durable). A no-op outside a trainctl task. Raises the TrainctlError
    of a failed send (Unavailable: the points stay buffered)."""
    r = _reporter if _resolved else None
    if r is not None:
        r.flush()
