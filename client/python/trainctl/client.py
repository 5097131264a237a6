"""The user API of trainctl-coordinator from Python: Client (submit, sweep,
jobs, nodes) and Job (wait, logs, metrics, cancel, why).

Every call has a deadline (10 s; WaitJob long-polls up to 30 s a call) and
raises a TrainctlError subclass on failure (trainctl.errors). Job states are
the lower-case names the CLI prints: "pending", "scheduled", "running",
"succeeded", "failed", "cancelled".
"""

import codecs
import datetime
import os
import pwd
import secrets
import time
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from trainctl import connection as _conn
from trainctl import reporting as _reporting
from trainctl import spec as _spec
from trainctl import sweep as _sweep
from trainctl.errors import FailedPrecondition, InvalidArgument, from_rpc_error

try:
    from trainctl.v1 import accounting_pb2, auth_pb2, metrics_pb2, sched_pb2, service_pb2
    from trainctl.v1 import service_pb2_grpc
    from trainctl.v1 import types_pb2
    from trainctl.v1 import web_pb2
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "trainctl: the generated gRPC stubs (trainctl.v1) are missing (%s). Install the "
        "package (pip install --no-build-isolation client/python), or put the build "
        "dir's client/python/gen on PYTHONPATH next to client/python" % e) from e

# Deadline of every unary call but WaitJob, seconds.
RPC_TIMEOUT_S = 10.0
# How long one WaitJob call long-polls on the server, and the slack its
# client deadline adds for the network, seconds.
WAIT_POLL_S = 30.0
WAIT_SLACK_S = 5.0

FINAL_STATES = ("succeeded", "failed", "cancelled")


def local_account_name() -> str:
    """The account this process runs as, from the password database
    (``pwd.getpwuid(os.geteuid())``): what a job submitted without
    authentication is charged to, never "". Without an entry for the uid (a
    container's arbitrary uid): $USER, else "uid<N>"."""
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
        if name:
            return name
    except KeyError:
        pass
    return os.environ.get("USER") or "uid%d" % os.geteuid()


def state_name(state: int) -> str:
    """JOB_STATE_RUNNING -> "running"."""
    return types_pb2.JobState.Name(state)[len("JOB_STATE_"):].lower()


def _state_value(name: str) -> int:
    if not isinstance(name, str):
        raise TypeError("state: expected a str such as 'running', got %s" % type(name).__name__)
    full = "JOB_STATE_" + name.upper()
    if name.upper() == "UNSPECIFIED" or full not in types_pb2.JobState.keys():
        raise InvalidArgument("state=%r: expected one of pending, scheduled, running, "
                              "succeeded, failed, cancelled" % name)
    return types_pb2.JobState.Value(full)


def _format_age(seconds: float) -> str:
    """"45s", "12m5s", "3h4m", "2d3h", as the CLI writes ages."""
    s = max(0, int(seconds))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%ds" % (s // 60, s % 60)
    if s < 86400:
        return "%dh%dm" % (s // 3600, s % 3600 // 60)
    return "%dd%dh" % (s // 86400, s % 86400 // 3600)


def format_why(why, now_s: Optional[float] = None) -> str:
    """The text `trainctl why` prints for a WhyJobResponse (client/cli_why.cc),
    without the final newline. ``now_s``: seconds since the epoch (for the
    reservation's ETA); default now."""
    if why.state != types_pb2.JOB_STATE_PENDING:
        return why.summary
    now_s = time.time() if now_s is None else now_s
    lines = ["Job %d is pending in queue %s (number %d in the scheduling order)."
             % (why.job_id, why.queue, why.position),
             "Why:          " + why.summary]
    if why.quota:
        lines.append("Quota:        " + why.quota)
    for e in why.excluded_nodes:
        lines.append("Excluded:     " + e)
    if why.preempted_for_job_id:
        lines.append("Preempted:    for job %d (%d time%s); restarts once job %d starts"
                     % (why.preempted_for_job_id, why.preemptions,
                        "" if why.preemptions == 1 else "s", why.preempted_for_job_id))
    holder = ("this job" if why.reservation_job_id == why.job_id
              else "job %d" % why.reservation_job_id)
    if why.reservation_job_id and not why.reservation:
        lines.append("Reservation:  none: %s is first in line, but no nodes it may use can "
                     "take it even when they drain" % holder)
    elif why.reservation_job_id:
        eta = "unknown (a job there has no --time-limit)"
        if why.reservation_eta_ms > 0:
            at = why.reservation_eta_ms / 1000.0
            eta = "in %s (%s)" % (_format_age(at - now_s),
                                  datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
                                  .strftime("%Y-%m-%d %H:%M:%S UTC"))
        lines.append("Reservation:  %s %s, estimated start %s" % (
            "this job holds" if why.reservation_job_id == why.job_id
            else "job %d holds" % why.reservation_job_id, why.reservation, eta))
    if why.nodes:
        lines.append("Nodes:")
        lines.extend("  " + n for n in why.nodes)
    return "\n".join(lines)


def _window(since, until, default_days: int = 30) -> Tuple[int, int]:
    """(since_ms, until_ms) of an accounting window: ``until`` a datetime
    (naive: UTC) or None (now); ``since`` a datetime, a timedelta before
    ``until``, or None (``default_days`` before it)."""
    def ms(at: datetime.datetime) -> int:
        aware = at if at.tzinfo else at.replace(tzinfo=datetime.timezone.utc)
        return int(aware.timestamp() * 1000)
    if until is not None and not isinstance(until, datetime.datetime):
        raise InvalidArgument("until: a datetime, got %r" % (until,))
    until_ms = ms(until) if until is not None else int(time.time() * 1000)
    if since is None:
        since = datetime.timedelta(days=default_days)
    if isinstance(since, datetime.timedelta):
        since_ms = until_ms - int(since.total_seconds() * 1000)
    elif isinstance(since, datetime.datetime):
        since_ms = ms(since)
    else:
        raise InvalidArgument("since: a datetime or a timedelta, got %r" % (since,))
    if since_ms < 0 or since_ms >= until_ms:
        raise InvalidArgument("since: must be after 1970 and before until")
    return since_ms, until_ms


class Job:
    """One job of the coordinator. Cheap: holds the client, the id and the
    job as last read (``proto``, a ``trainctl.v1.Job``); ``state`` and the
    other attributes are of that read until refresh() or wait()."""

    def __init__(self, client: "Client", job_id: int, proto=None):
        self._client = client
        self.id = int(job_id)
        self.proto = proto

    def __repr__(self) -> str:
        return "Job(id=%d, state=%r)" % (self.id, self.state if self.proto else None)

    def __eq__(self, other) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _read(self):
        if self.proto is None:
            self.refresh()
        return self.proto

    @property
    def state(self) -> str:
        """Lower-case state name as of the last read ("running")."""
        return state_name(self._read().state)

    @property
    def done(self) -> bool:
        """Whether the last read state is final (succeeded, failed, cancelled)."""
        return self.state in FINAL_STATES

    @property
    def name(self) -> str:
        return self._read().spec.name

    @property
    def reason(self) -> str:
        """Why it waits, failed or was cancelled, in a user's words ("" if none)."""
        return self._read().reason

    @property
    def attempt(self) -> int:
        """0 for the first attempt; a restart is a new attempt."""
        return self._read().attempt

    @property
    def params(self) -> Dict[str, str]:
        """A sweep trial's hyper-parameters (name -> value as substituted)."""
        return dict(self._read().spec.params)

    @property
    def exit_code(self) -> Optional[int]:
        """How the job's processes ended, as of the last read (an int; None
        while the job is not final: call wait() or refresh()).

        The exit code of the rank of the job's last attempt that failed
        first (earliest end, then lowest rank: the cause, not the ranks the
        teardown then stopped; `trainctl wait` takes its exit status from
        the same rank, capped to 1-125, where this is not capped). A rank
        killed by a signal counts as 128 + the signal number, as shells
        report it. 0 when no rank failed: a succeeded job, but also one
        cancelled or failed before any rank ran, so look at ``state`` too.
        Reads the job first if it was never read (GetJob); raises that
        call's TrainctlError (NotFound for an unknown job).
        """
        job = self._read()
        if state_name(job.state) not in FINAL_STATES:
            return None
        failed = [t for t in job.tasks if t.exit_code != 0 or t.signal != 0]
        if not failed:
            return 0
        first = min(failed, key=lambda t: (t.end_time_ms, t.rank))
        return first.exit_code if first.exit_code != 0 else 128 + first.signal

    @property
    def stopped_early(self) -> Optional[int]:
        """The step of the rung at which the sweep's early-stopping rule
        (ASHA, ``EarlyStop`` of the spec) ended this trial, as of the last
        read; None when it did not (a user's cancel included): such a trial
        is CANCELLED, and this tells the two apart. Reads the job first if it
        was never read (GetJob); raises that call's TrainctlError."""
        step = self._read().stopped_early_at_step
        return int(step) if step > 0 else None

    @property
    def gpu_hours(self) -> float:
        """GPU-hours the job has used, all its attempts together, as of the
        last read (a float, in hours): GPUs held x wall-clock hours, a share
        of a GPU counted as its reserved fraction of the GPU's memory; a
        running attempt counts up to the moment of the read, so call
        refresh() for a newer figure. 0.0 for a job never placed. Reads the
        job first if it was never read (GetJob); raises that call's
        TrainctlError (NotFound for an unknown job)."""
        return self._read().gpu_hours

    def refresh(self) -> "Job":
        """Reads the job again (GetJob); returns self. Raises NotFound for an
        unknown job, PermissionDenied for another user's."""
        self.proto = self._client._call("GetJob", service_pb2.GetJobRequest(job_id=self.id)).job
        return self

    def wait(self, timeout: Optional[float] = None) -> str:
        """Waits until the job is final and returns its state: "succeeded",
        "failed" or "cancelled".

        Long-polls the coordinator's WaitJob (each call returns as soon as the
        job ends, or after 30 s), so the end is seen at once without polling.
        ``timeout``: seconds (float) or None (forever). Raises TimeoutError
        naming the job and its state when the timeout passes first; the
        TrainctlError of a failed call (NotFound for an unknown job).
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            poll = WAIT_POLL_S
            if deadline is not None:
                poll = min(poll, deadline - time.monotonic())
            request = service_pb2.WaitJobRequest(job_id=self.id,
                                                 timeout_ms=max(1, int(poll * 1000)))
            response = self._client._call("WaitJob", request,
                                          timeout=max(poll, 0.0) + WAIT_SLACK_S)
            self.proto = response.job
            if response.done:
                return self.state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("job %d is still %s after %g s; wait again with "
                                   "job.wait() or `trainctl wait %d`"
                                   % (self.id, self.state, timeout, self.id))

    def logs(self, rank: int = 0) -> str:
        """The log of ``rank`` of the job's current attempt so far, as text
        (UTF-8, undecodable bytes replaced). Raises NotFound for an unknown
        job or a rank not placed yet."""
        chunks, offset = [], 0
        while True:
            r = self._client._call("GetLogs", service_pb2.GetLogsRequest(
                job_id=self.id, rank=rank, offset=offset))
            chunks.append(r.data)
            offset = r.next_offset
            if r.eof or not r.data:
                break
        return b"".join(chunks).decode("utf-8", errors="replace")

    def stream_logs(self, rank: int = 0, follow: bool = True) -> Iterator[str]:
        """Yields the log of ``rank`` as text chunks as the rank writes them
        (StreamLogs), until the job is final and its log fully sent; a restart
        continues with the new attempt's log. With ``follow=False``, only
        what is there now. Following a job not placed yet waits for its
        placement. Raises NotFound / InvalidArgument as the coordinator says;
        the iterator has no deadline (close it to stop early)."""
        request = web_pb2.StreamLogsRequest(job_id=self.id, rank=rank, follow=follow)
        stream = self._client._stream("StreamLogs", request)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        attempt = None
        try:
            for chunk in stream:
                if attempt is not None and chunk.attempt != attempt:
                    tail = decoder.decode(b"", final=True)
                    if tail:
                        yield tail
                    decoder.reset()
                attempt = chunk.attempt
                text = decoder.decode(chunk.data)
                if text:
                    yield text
        except grpc.RpcError as e:
            raise from_rpc_error(e, self._client.address) from None
        finally:
            stream.cancel()
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def cancel(self) -> "Job":
        """Cancels the job (its ranks get SIGTERM, then SIGKILL after the grace
        period); returns self, read again. Raises NotFound, PermissionDenied,
        or FailedPrecondition as the coordinator says."""
        self.proto = self._client._call(
            "CancelJob", service_pb2.CancelJobRequest(job_id=self.id)).job
        return self

    def metrics(self, key: Optional[str] = None) -> Dict[str, List[Tuple[int, float]]]:
        """The job's reported metrics: key -> [(step, value), ...] in report
        order (every attempt and rank). ``key``: only that metric."""
        r = self._client._call("GetMetrics", metrics_pb2.GetMetricsRequest(
            job_id=self.id, key=key or ""))
        return {s.key: [(p.step, p.value) for p in s.points] for s in r.series}

    def why(self) -> str:
        """Why the job waits (queue position, quota, what each node lacks, the
        reservation it waits behind and its ETA), or, once it is not pending,
        its state and why: the text `trainctl why JOB` prints."""
        return format_why(self._client._call("WhyJob", sched_pb2.WhyJobRequest(job_id=self.id)))


class Gpu:
    """One GPU of a node: ``index``, ``uuid``, ``name`` (model),
    ``memory_total_bytes``, ``memory_used_bytes``, ``utilization_pct``
    (0-100), and ``tasks``: (job_id, rank, reserved_bytes) placed on it."""

    def __init__(self, proto, tasks=()):
        self.proto = proto
        self.index = proto.index
        self.uuid = proto.uuid
        self.name = proto.name
        self.memory_total_bytes = proto.memory_total_bytes
        self.memory_used_bytes = proto.memory_used_bytes
        self.utilization_pct = proto.utilization_pct
        self.tasks = [(t.job_id, t.rank, t.reserved_bytes) for t in tasks]

    def __repr__(self) -> str:
        return "Gpu(index=%d, name=%r, tasks=%d)" % (self.index, self.name, len(self.tasks))


class Node:
    """One node as the coordinator sees it: ``name``, ``address``, ``state``
    ("ready", "lost", or, when an admin took it out of service, "draining",
    "drained" or "down"), ``reason``, ``drained_by`` and ``drain_deadline_ms``
    (ms since the Unix epoch, 0: none) of a drain or down ("" / 0 in
    service), ``gpus`` (list of Gpu), ``fake_gpus`` (bool) and ``proto`` (the
    ``trainctl.v1.Node``)."""

    def __init__(self, view):
        node = view.node
        self.proto = node
        self.name = node.name
        self.address = node.address
        self.state = types_pb2.NodeState.Name(node.state)[len("NODE_STATE_"):].lower()
        if view.service_state > service_pb2.NODE_SERVICE_STATE_IN_SERVICE:
            self.state = service_pb2.NodeServiceState.Name(
                view.service_state)[len("NODE_SERVICE_STATE_"):].lower()
        self.reason = node.admin.reason
        self.drained_by = node.admin.by
        self.drain_deadline_ms = node.admin.deadline_ms
        self.fake_gpus = node.fake_gpus
        tasks = list(view.gpu_tasks)
        self.gpus = [Gpu(g, tasks[i].tasks if i < len(tasks) else ())
                     for i, g in enumerate(node.gpus)]

    def __repr__(self) -> str:
        return "Node(name=%r, state=%r, gpus=%d)" % (self.name, self.state, len(self.gpus))


class _JobGroup:
    """Jobs submitted together (a sweep's trials, an array's tasks): ``id``
    and ``jobs``, in submit order."""

    def __init__(self, group_id: Union[str, int], jobs: List[Job]):
        self.id = group_id
        self.jobs = jobs

    def wait(self, timeout: Optional[float] = None) -> List[str]:
        """Waits for every job; returns their final states in order.
        ``timeout``: seconds for all of them together. Raises TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        states = []
        for job in self.jobs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            states.append(job.wait(left))
        return states

    def cancel(self) -> None:
        """Cancels every job that has not ended (one that ends meanwhile is
        left as it ended)."""
        for job in self.jobs:
            if job.refresh().done:
                continue
            try:
                job.cancel()
            except FailedPrecondition:  # it ended between the read and the cancel
                pass


class Sweep(_JobGroup):
    """A submitted sweep: ``id`` (the sweep id its trials share), ``jobs``
    (its trials, in trial order; each Job's ``params`` holds its values).
    ``wait()`` and ``cancel()`` act on every trial; ``best()`` picks the
    trial with the best reported metric."""

    def __repr__(self) -> str:
        return "Sweep(id=%r, trials=%d)" % (self.id, len(self.jobs))

    def best(self, metric: str, mode: str = "min") -> Optional[Job]:
        """The trial whose last reported value of ``metric`` is the lowest
        (``mode="min"``, e.g. a loss) or the highest (``mode="max"``, e.g.
        an accuracy); None when no trial has reported ``metric``.

        "Last" is the trial's newest point in report order (what
        ``trainctl.report`` sent last; its ``step`` is not compared), in
        the metric's own units: ``job.metrics(metric)[metric][-1]``.
        Trials that have not reported it are skipped; every other trial
        counts, whatever its state (a failed or early-stopped one too); a
        tie goes to the earlier trial. Reads the metrics now, one GetMetrics
        call per trial asking only for the metric's summary (not every
        point), without waiting: call wait() first to compare final values.

        Raises InvalidArgument (a ValueError), before any call, for a
        ``metric`` that is not a metric key (1 to 128 characters of
        [A-Za-z0-9_.:/-]) or a ``mode`` other than "min" and "max"; the
        TrainctlError of a failed GetMetrics call (NotFound,
        PermissionDenied, Unavailable...).
        """
        _reporting.check_key(metric)
        if mode not in ("min", "max"):
            raise InvalidArgument("best(): mode=%r: expected 'min' or 'max'" % (mode,))
        best_job, best_value = None, None
        for job in self.jobs:
            response = job._client._call("GetMetrics", metrics_pb2.GetMetricsRequest(
                job_id=job.id, key=metric, summary_only=True))
            lasts = [s.last for s in response.series if s.key == metric and s.count > 0]
            if not lasts:
                continue
            value = lasts[0]
            if best_value is None or (value < best_value if mode == "min"
                                      else value > best_value):
                best_job, best_value = job, value
        return best_job


class JobArray(_JobGroup):
    """A submitted job array: ``id`` (the array id: its first job's id, as
    Slurm's SLURM_ARRAY_JOB_ID), ``jobs`` (one per task id, in the order the
    task ids were given). ``wait()`` and ``cancel()`` act on every task."""

    def __repr__(self) -> str:
        return "JobArray(id=%r, tasks=%d)" % (self.id, len(self.jobs))


class Client:
    """A connection to trainctl-coordinator's user API.

    Args:
      address (str, optional): "host:port", or "a:p,b:q" for a leader and its
        standbys (tried in order). Default: $TRAINCTL_COORDINATOR, else
        ``coordinator`` in the config file, else "127.0.0.1:50051".
      token (str, optional): bearer token, sent as ``authorization: Bearer
        <token>`` on every call. Default: $TRAINCTL_AUTH_TOKEN, else
        ``token`` in the config file, else none.
      ca_cert (str or bytes, optional): path of the PEM CA certificate to
        verify the coordinator with (TLS), or the PEM bytes. Default:
        $TRAINCTL_TLS_CA, else ``ca_cert`` in the config file, else plaintext.
      config_file (str, optional): instead of $XDG_CONFIG_HOME/trainctl/config
        (default ~/.config/trainctl/config); must exist when given.

    Raises InvalidArgument for a bad config file, CA file, token or address.
    Thread-safe (gRPC channels and stubs are). Use as a context manager, or
    call close(), to release the channel.
    """

    def __init__(self, address: Optional[str] = None, token: Optional[str] = None,
                 ca_cert: Union[str, bytes, None] = None, *,
                 config_file: Optional[str] = None):
        self.connection = _conn.resolve(address, token, ca_cert, config_file)
        self.address = self.connection.address
        self._channel = _conn.make_channel(self.connection)
        self._stub = service_pb2_grpc.CoordinatorStub(self._channel)
        self._metadata = ((("authorization", "Bearer " + self.connection.token),)
                          if self.connection.token else None)

    @classmethod
    def _for_stub(cls, stub, address: str = "test", token: str = "") -> "Client":
        """A Client calling ``stub`` (tests: a fake with the stub's methods)."""
        self = cls.__new__(cls)
        self.connection = _conn.Connection(address, token)
        self.address = address
        self._channel = None
        self._stub = stub
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        return self

    def close(self) -> None:
        """Closes the channel; calls after it fail."""
        if self._channel is not None:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Client(address=%r)" % self.address

    # ------------------------------------------------------------ calls

    def _call(self, method: str, request, timeout: float = RPC_TIMEOUT_S):
        try:
            return getattr(self._stub, method)(request, timeout=timeout,
                                               metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.address, timeout) from None

    def _stream(self, method: str, request):
        try:
            return getattr(self._stub, method)(request, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.address) from None

    def _default_user(self) -> str:
        # As the CLI, the job is charged to this process's account -- but
        # only without a token: with one the coordinator takes the user from
        # the token, and naming another user would be PERMISSION_DENIED.
        return "" if self.connection.token else local_account_name()

    # ------------------------------------------------------------ jobs

    def submit(self, command: Sequence[str], *, gpus: Optional[int] = None,
               gpu_fraction: Optional[float] = None, gpu_mem: Union[int, str, None] = None,
               nodes: Optional[int] = None, gpus_per_node: Optional[int] = None,
               env: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
               workdir: Optional[str] = None, request_id: Optional[str] = None,
               **more: Any) -> Job:
        """Submits a job; returns it (state "pending" until placed).

        Args:
          command (list of str): argv of the task; argv[0] is looked up in
            the agent's PATH. Not a str (no shell): ["sh", "-c", "..."].
          gpus (int): whole GPUs; more than 1 makes a gang job (one process
            per GPU). Default (no shape given): 1.
          gpu_fraction (float): share of one GPU, in (0, 1]: a packable
            experiment.
          gpu_mem (int bytes, or str such as "20GiB"): GPU memory to reserve
            on one shared GPU.
          nodes, gpus_per_node (int): a gang over ``nodes`` nodes with
            ``gpus_per_node`` GPUs each; give both.
          env (dict str -> str): extra environment of the task.
          name (str): shown in listings.
          workdir (str): working directory of the task; default: the current
            one (as the CLI).
          request_id (str): makes retried submits idempotent: a retry with
            the same id returns the same job.
          **more: tasks_per_node, priority, max_restarts, queue, time_limit
            (seconds, timedelta or "2h"), preemptible, placement ("pack" /
            "spread"), preflight (bool), user, project, auto_pack; the node
            selection gpu_types (list of str in order of preference, or
            "h100,a100"), constraint ("ib&nvlink" or "a|b"), nodelist,
            exclude (list of str or "a,b"), allow_mixed_gpu_types (bool);
            see trainctl.spec.EXTRA_OPTIONS.

        Raises TypeError naming unknown keywords or a wrong type;
        InvalidArgument for values the client or the coordinator refuses
        (the message names the field); PermissionDenied, Unauthenticated,
        Unavailable.
        """
        spec = _spec.build_spec(command, gpus=gpus, gpu_fraction=gpu_fraction, gpu_mem=gpu_mem,
                                nodes=nodes, gpus_per_node=gpus_per_node, env=env, name=name,
                                workdir=workdir, default_user=self._default_user(),
                                func="submit", also_accepted=("request_id",), **more)
        request = service_pb2.SubmitJobRequest(spec=spec, request_id=request_id or "")
        return self.job(self._call("SubmitJob", request).job_id, read=False)

    def submit_array(self, command: Sequence[str], task_ids: Iterable[int], *,
                     max_running: int = 0, request_id: Optional[str] = None,
                     **spec: Any) -> "JobArray":
        """Submits a job array (``trainctl submit --array``, Slurm's
        ``sbatch --array``) in one call: one job per task id, all or none.
        Each task runs ``command`` with TRAINCTL_ARRAY_TASK_ID (and
        SLURM_ARRAY_TASK_ID) set to its task id; the spec is sent and stored
        once. Returns the JobArray.

        Args:
          command (list of str): argv of every task, as submit().
          task_ids (iterable of int): the task ids, e.g. range(100): 1 to
            10,000 distinct ints >= 0.
          max_running (int): at most this many tasks hold GPUs at once
            (Slurm's ``%P``); 0: no limit.
          request_id (str): a retried call with the same id returns the same
            jobs.
          **spec: the options of submit() (gpus, gpu_fraction, env, name,
            workdir, priority...), the same for every task.

        Raises TypeError as submit(); InvalidArgument for task ids that are
        not ints, a negative max_running, or what the coordinator refuses
        (its message names "task_ids[i]", "max_running" or "spec.FIELD");
        Unimplemented from a coordinator without SubmitJobArray.
        """
        ids = list(task_ids)
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int):
                raise InvalidArgument("task_ids[%d]=%r: expected an int >= 0" % (i, t))
        if isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 0:
            raise InvalidArgument("max_running=%r: expected an int >= 0 (0: no limit)"
                                  % (max_running,))
        built = _spec.build_spec(command, default_user=self._default_user(),
                                 func="submit_array",
                                 also_accepted=("task_ids", "max_running", "request_id"),
                                 **spec)
        request = service_pb2.SubmitJobArrayRequest(spec=built, task_ids=ids,
                                                    max_running=max_running,
                                                    request_id=request_id or "")
        job_ids = list(self._call("SubmitJobArray", request).job_ids)
        return JobArray(job_ids[0] if job_ids else 0, [Job(self, i) for i in job_ids])

    def job(self, job_id: int, read: bool = True) -> Job:
        """The job ``job_id``; read now (GetJob) unless ``read`` is False.
        Raises NotFound for an unknown job."""
        job = Job(self, job_id)
        return job.refresh() if read else job

    def jobs(self, state: Union[str, Iterable[str], None] = None, *,
             sweep_id: Optional[str] = None, limit: int = 0,
             user: Optional[str] = None, all_users: bool = False) -> List[Job]:
        """Jobs, newest first. ``state``: only jobs in this state (or these
        states), e.g. "running" or ["pending", "running"]; ``sweep_id``: only
        the trials of that sweep; ``limit``: at most this many (0: 1000). With
        authentication, a caller sees their own jobs; ``all_users=True``
        every user's and ``user="alice"`` alice's (another user's: admins
        only; PermissionDenied otherwise)."""
        states = [] if state is None else (
            [state] if isinstance(state, str) else list(state))
        request = service_pb2.ListJobsRequest(
            states=[_state_value(s) for s in states], limit=limit, sweep_id=sweep_id or "",
            user=user or "", all_users=all_users)
        return [Job(self, j.id, j) for j in self._call("ListJobs", request).jobs]

    def nodes(self) -> List[Node]:
        """The cluster's nodes, their GPUs and the tasks on each GPU."""
        return [Node(v) for v in self._call("ListNodes", service_pb2.ListNodesRequest()).nodes]

    def _update_nodes(self, nodes, action, reason="", deadline_s=0, verify=False) -> List[Node]:
        if isinstance(nodes, str):
            nodes = [nodes]
        request = service_pb2.UpdateNodesRequest(nodes=list(nodes), action=action, reason=reason,
                                                 deadline_s=int(deadline_s), verify=verify)
        return [Node(v) for v in self._call("UpdateNodes", request).nodes]

    def drain(self, nodes: Union[str, Sequence[str]], reason: str,
              deadline_s: float = 0) -> List[Node]:
        """Drains nodes (``trainctl node drain``; admins): no new placements,
        running jobs finish; after ``deadline_s`` seconds (0: never) what
        still runs is requeued without using a restart. Returns the nodes.
        Raises InvalidArgument (no reason, a negative deadline), NotFound (an
        unknown node), PermissionDenied (not an admin)."""
        return self._update_nodes(nodes, service_pb2.NODE_ACTION_DRAIN, reason, deadline_s)

    def resume(self, nodes: Union[str, Sequence[str]], verify: bool = False,
               timeout: Optional[float] = None) -> List[Node]:
        """Puts drained or down nodes back in service (``trainctl node
        resume``; admins). With ``verify``, each node resumes only once its
        pre-flight probe passes on every GPU: a verify job runs there; this
        waits for them (at most ``timeout`` seconds each) and returns the
        nodes as they are then (a node whose probe failed stays drained, the
        verdict in its ``reason``). Raises FailedPrecondition (nothing
        started) for a node whose agent is not connected, cannot run probes,
        or still runs tasks."""
        if isinstance(nodes, str):
            nodes = [nodes]
        request = service_pb2.UpdateNodesRequest(
            nodes=list(nodes), action=service_pb2.NODE_ACTION_RESUME, verify=verify)
        response = self._call("UpdateNodes", request)
        if not response.verify_jobs:
            return [Node(v) for v in response.nodes]
        for job_id in response.verify_jobs.values():
            Job(self, job_id).wait(timeout=timeout)
        return [n for n in self.nodes() if n.name in nodes]

    def down(self, nodes: Union[str, Sequence[str]], reason: str) -> List[Node]:
        """Takes nodes out of service now (``trainctl node down``; admins):
        what runs there is stopped and requeued without using a restart."""
        return self._update_nodes(nodes, service_pb2.NODE_ACTION_DOWN, reason)

    # ------------------------------------------------------------ tokens, audit

    def create_token(self, user: str, *, role: str = "user",
                     expires: Union[int, float, datetime.timedelta, None] = None,
                     name: str = ""):
        """Makes a bearer token for ``user`` (``trainctl token create``;
        admins only). ``role``: "user" or "admin"; ``expires``: its lifetime,
        seconds or a timedelta (None: never expires; whole seconds are kept);
        ``name``: a label to tell tokens apart (at most 128 bytes).

        Returns the CreateTokenResponse: ``.secret`` is the bearer token,
        returned this once (the coordinator keeps only its SHA-256);
        ``.token`` its TokenInfo (``id``, ``user``, ``role``, ``created_ms``,
        ``expires_ms``; times in ms since the Unix epoch, 0: never).
        Raises PermissionDenied for a non-admin, InvalidArgument naming the
        field (a bad user name, role or lifetime)."""
        if role not in ("user", "admin"):
            raise InvalidArgument('role: must be "user" or "admin", got %r' % (role,))
        seconds = 0
        if expires is not None:
            total = (expires.total_seconds() if isinstance(expires, datetime.timedelta)
                     else float(expires))
            seconds = int(total)
            if seconds < 1:
                raise InvalidArgument("expires: must be at least 1 second, got %r" % (expires,))
        request = service_pb2.CreateTokenRequest(
            user=user, role=auth_pb2.ROLE_ADMIN if role == "admin" else auth_pb2.ROLE_USER,
            expires_s=seconds, name=name)
        return self._call("CreateToken", request)

    def list_tokens(self, all: bool = False) -> list:  # noqa: A002 - the CLI's --all
        """The tokens made by ``create_token``, oldest first, as TokenInfo
        messages (never a secret): only valid ones, or with ``all=True`` the
        revoked (``revoked_ms``, ``revoked_by`` set) and expired ones too.
        Raises PermissionDenied for a non-admin."""
        return list(self._call("ListTokens", service_pb2.ListTokensRequest(all=all)).tokens)

    def revoke_token(self, token_id: str):
        """Revokes token ``token_id`` ("tok-..."): every call with it is
        refused (Unauthenticated) from the next one on, also after a
        coordinator restart. Revoking a revoked token changes nothing.
        Returns its TokenInfo. Raises NotFound for an unknown id,
        PermissionDenied for a non-admin."""
        return self._call("RevokeToken", service_pb2.RevokeTokenRequest(id=token_id)).token

    def audit(self, since: Union[datetime.datetime, datetime.timedelta, None] = None,
              limit: int = 0) -> list:
        """The trail of admin actions (``trainctl audit``; admins only), oldest
        first, as AuditEvent messages: ``seq``, ``time_ms`` (ms since the
        Unix epoch), ``who``, ``action`` ("token.create", "token.revoke",
        "job.submit_as", "job.cancel_as", "node.drain"...), ``target``,
        ``detail``. ``since``: only events at or after a datetime (naive:
        UTC), or within a timedelta before now; ``limit``: at most this many,
        the newest (0: 1000). Raises PermissionDenied for a non-admin."""
        since_ms = 0
        if isinstance(since, datetime.timedelta):
            since_ms = int((time.time() - since.total_seconds()) * 1000)
        elif isinstance(since, datetime.datetime):
            aware = since if since.tzinfo else since.replace(tzinfo=datetime.timezone.utc)
            since_ms = int(aware.timestamp() * 1000)
        elif since is not None:
            raise InvalidArgument("since: a datetime or a timedelta, got %r" % (since,))
        if limit < 0:
            raise InvalidArgument("limit: must not be negative, got %d" % limit)
        request = service_pb2.ListAuditRequest(since_ms=max(since_ms, 0), limit=limit)
        return list(self._call("ListAudit", request).events)

    # ------------------------------------------------------------ accounting

    def usage(self, by: str = "user",
              since: Union[datetime.datetime, datetime.timedelta, None] = None,
              until: Optional[datetime.datetime] = None):
        """GPU-hours allocated and used per group (``trainctl usage``), as a
        GetUsageResponse: ``rows`` (``key``, ``allocated_gpu_hours``,
        ``used_gpu_hours``, ``efficiency`` = used / allocated, ``jobs``,
        ``attempts``, ``failed``, ``preempted``), largest allocation first,
        and ``total``. ``by``: "user", "project", "queue", "gpu-type" or
        "node". ``since``: a datetime (naive: UTC) or a timedelta before now
        (default: 30 days before ``until``); ``until``: a datetime (default:
        now). A non-admin sees only their own jobs. Raises InvalidArgument
        for a bad ``by`` or window (before any call)."""
        if by not in ("user", "project", "queue", "gpu-type", "node"):
            raise InvalidArgument(
                "by: %r is not one of user, project, queue, gpu-type, node" % (by,))
        since_ms, until_ms = _window(since, until)
        request = accounting_pb2.GetUsageRequest(by=by, since_ms=since_ms, until_ms=until_ms)
        return self._call("GetUsage", request)

    def history(self, since: Union[datetime.datetime, datetime.timedelta, None] = None,
                until: Optional[datetime.datetime] = None, user: str = "",
                state: str = "") -> Iterator[Any]:
        """Ended attempts that overlap the window (``trainctl history``, like
        Slurm's sacct), oldest end first, as UsageRecord messages (``job_id``,
        ``attempt``, ``user``, ``project``, ``queue``, ``start_time_ms``,
        ``end_time_ms``, ``outcome``, ``preempted``, ``gpus``,
        ``gpu_seconds_allocated``, ``gpu_seconds_used``, ``slices`` per
        node). Streams: pages are fetched as the iterator is consumed, so a
        million rows never sit in memory. ``since`` as usage's (default: 1
        day); ``user``: only theirs (a non-admin sees only their own);
        ``state``: "succeeded", "failed", "restarted", "cancelled",
        "stopped_early" or "preempted"."""
        since_ms, until_ms = _window(since, until, default_days=1)
        request = accounting_pb2.ListHistoryRequest(
            since_ms=since_ms, until_ms=until_ms, user=user, state=state)
        stream = self._stream("ListHistory", request)
        try:
            for page in stream:
                yield from page.records
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.address) from None

    def sweep(self, command: Sequence[str], *, grid: Optional[Mapping[str, Sequence[Any]]] = None,
              params: Optional[Mapping[str, Any]] = None, samples: int = 0, seed: int = 0,
              sweep_id: Optional[str] = None, name: Optional[str] = None,
              early_stop: Union[str, Mapping[str, Any], None] = None, **spec: Any) -> Sweep:
        """Submits a hyper-parameter sweep: one job per trial, all sharing a
        sweep id (``trainctl sweep``); returns the Sweep.

        Args:
          command (list of str): argv template; "{lr}" is replaced by each
            trial's value of lr ("{{"/"}}": literal braces).
          grid (dict name -> list): every value is tried; the trials are the
            cartesian product (first name slowest). Values are used as
            str(value): pass "1e-3" to keep that spelling.
          params (dict name -> distribution): random parameters, drawn
            ``samples`` times per grid point: "uniform:LOW:HIGH",
            "loguniform:LOW:HIGH", "int:LOW:HIGH" (inclusive),
            "choice:A|B", or a list of choices.
          samples (int): draws of ``params`` per grid point.
          seed (int): the same seed gives the same trials (Python's
            random.Random; not the same draws as the C++ CLI's).
          sweep_id (str): default "sw-" and 8 random hex digits; giving that
            of an earlier sweep resubmits only missing trials (each trial's
            request id is SWEEP_ID-i).
          name (str): trials are named NAME-0, NAME-1...; default the sweep id.
          early_stop (str or dict): stop the worst trials early by a metric
            they report (ASHA): "val_loss", "val_loss:min", "acc:max", or a
            dict with metric, mode, grace_steps, reduction_factor, max_steps.
          **spec: the resource and job options of submit() (gpu_fraction,
            gpus, env, workdir, priority...), the same for every trial.

        Raises TypeError / InvalidArgument as submit() and for a bad sweep
        (see trainctl.sweep.expand); the TrainctlError of the first trial
        that failed to submit (trials before it stay submitted: call again
        with the same sweep_id to submit the rest).
        """
        if "request_id" in spec:
            raise TypeError("sweep(): request_id is set per trial (SWEEP_ID-i); give sweep_id")
        own = ("grid", "params", "samples", "seed", "sweep_id", "early_stop")
        _spec.check_kwargs("sweep", spec,
                           list(_spec.NAMED_OPTIONS) + list(_spec.EXTRA_OPTIONS) + list(own))
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise InvalidArgument("samples=%r: expected an int >= 0" % (samples,))
        argv = _spec.command_argv(command, "sweep")
        trials = _sweep.expand(argv, grid, params, samples, seed)
        sweep_id = _sweep.check_sweep_id(sweep_id) if sweep_id is not None else (
            "sw-%08x" % secrets.randbits(32))
        base = _spec.build_spec(argv, default_user=self._default_user(), func="sweep", **spec)
        base.sweep_id = sweep_id
        if early_stop is not None:
            base.early_stop.CopyFrom(_early_stop(early_stop))
        prefix = name if name is not None else sweep_id
        requests = []
        for i, (values, trial_argv) in enumerate(trials):
            s = types_pb2.JobSpec()
            s.CopyFrom(base)
            del s.command[:]
            s.command.extend(trial_argv)
            s.params.update(values)
            s.name = "%s-%d" % (prefix, i)
            requests.append(service_pb2.SubmitJobRequest(spec=s, request_id="%s-%d" % (sweep_id, i)))
        return Sweep(sweep_id, self._submit_trials(sweep_id, requests))

    def _submit_trials(self, sweep_id: str, requests, in_flight: int = 32) -> List[Job]:
        # Up to `in_flight` submits at once (the coordinator commits
        # concurrent submits together); each has its own request id, so
        # order and retries cannot submit a trial twice. No more windows
        # after a failure.
        jobs: List[Job] = []
        for start in range(0, len(requests), in_flight):
            window = requests[start:start + in_flight]
            futures = [self._stub.SubmitJob.future(r, timeout=RPC_TIMEOUT_S,
                                                   metadata=self._metadata) for r in window]
            failed = None
            for i, f in enumerate(futures, start):
                try:
                    jobs.append(Job(self, f.result().job_id))
                except grpc.RpcError as e:
                    failed = failed or (i, e)
            if failed is not None:
                error = from_rpc_error(failed[1], self.address, RPC_TIMEOUT_S)
                error.message = ("trial %d of sweep %s: %s; %d of %d trials were submitted: "
                                 "call sweep() again with sweep_id=%r to submit the rest "
                                 "(submitted trials are not submitted twice)"
                                 % (failed[0], sweep_id, error.message, len(jobs),
                                    len(requests), sweep_id))
                error.args = (error.message,)
                raise error
        return jobs


def _early_stop(value: Union[str, Mapping[str, Any]]):
    es = metrics_pb2.EarlyStop()
    if isinstance(value, str):
        metric, _, mode = value.partition(":")
        value = {"metric": metric, "mode": mode or "min"}
    if not isinstance(value, Mapping):
        raise TypeError("early_stop: expected 'METRIC[:min|max]' or a dict")
    _spec.check_kwargs("early_stop", value,
                       ("metric", "mode", "grace_steps", "reduction_factor", "max_steps"))
    es.metric = value.get("metric", "")
    es.mode = value.get("mode", "min")
    if not es.metric or es.mode not in ("min", "max"):
        raise InvalidArgument("early_stop=%r: expected METRIC, METRIC:min or METRIC:max"
                              % (value,))
    es.grace_steps = int(value.get("grace_steps", 1))
    es.reduction_factor = int(value.get("reduction_factor", 0))
    es.max_steps = int(value.get("max_steps", 0))
    return es
