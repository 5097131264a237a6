"""Python arguments -> ``trainctl.v1.JobSpec``, as ``trainctl submit``'s flags
become one (client/cli_submit.cc, BuildSpec): the same resource shapes, the
same exclusions, the same defaults (working directory: the current one).

Pure: no RPC. The coordinator validates again and its InvalidArgument names
the field ("spec.priority"); what is checked here fails earlier, naming the
Python argument.
"""

import difflib
import math
import os
import re
from typing import Any, Iterable, List, Mapping, Optional, Sequence

from trainctl.errors import InvalidArgument
from trainctl.units import parse_byte_size, parse_duration_s

# Keyword arguments beyond submit()'s named ones, with what they mean; the
# JobSpec field of each is in proto/trainctl/v1/types.proto.
EXTRA_OPTIONS = {
    "tasks_per_node": "processes per node (int >= 1; default one per GPU)",
    "priority": "higher runs first (int; default 0)",
    "max_restarts": "retries of a failed attempt (int >= 0; default 0)",
    "queue": "named queue (str; default 'default')",
    "time_limit": "wall-clock limit of one attempt: seconds, timedelta or '2h'",
    "preemptible": "may be preempted and requeued (bool)",
    "hold": "accept a job no node could hold yet, to wait for nodes (bool)",
    "no_logs": "discard the tasks' stdout and stderr: no log file (bool)",
    "slurm_env": "also export the SLURM_* variables srun sets, with Slurm's meanings (bool)",
    "placement": "gangs: 'pack' (fewest nodes, default) or 'spread'",
    "preflight": "gangs: True/False to force the NCCL pre-flight on/off",
    "user": "user the job is charged to (default: $USER without a token, "
            "else the token's user)",
    "project": "project the job is charged to for quotas (str)",
    "auto_pack": "experiments: let the coordinator pack by measured memory (bool)",
    "gpu_types": "GPU types accepted, in order of preference (list of str, or 'h100,a100'; "
                 "as `trainctl nodes` shows them); a gang takes one type",
    "constraint": "node features every node must offer: 'ib&nvlink' (all) or 'a|b' (any)",
    "nodelist": "only these nodes (list of str, or 'a,b'); a gang uses every one",
    "exclude": "never these nodes (list of str, or 'a,b')",
    "allow_mixed_gpu_types": "gangs: may mix GPU types (bool)",
    "dependency": "Slurm's --dependency string, e.g. 'afterok:12:13,afterany:14' "
                  "(not with the after_* keywords)",
    "after_ok": "start after these jobs succeeded (Job, int, or a list of them)",
    "after_any": "start after these jobs ended, in any state",
    "after_not_ok": "start after these jobs failed or were cancelled",
    "after": "start after these jobs started (or ended)",
    "singleton": "one job of this name and user at a time (bool)",
}
# The keywords that build JobSpec.dependency, with the Slurm type of each,
# in the order they are written.
_DEPENDENCY_KEYWORDS = (("after_ok", "afterok"), ("after_any", "afterany"),
                        ("after_not_ok", "afternotok"), ("after", "after"))
# Named arguments of submit() and sweep() that become the spec.
NAMED_OPTIONS = ("gpus", "gpu_fraction", "gpu_mem", "nodes", "gpus_per_node", "env",
                 "name", "workdir")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_COUNT = 1_000_000


def check_kwargs(func: str, given: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Raises TypeError naming every key of ``given`` not in ``allowed``, with
    the closest allowed name for each where there is one."""
    allowed = sorted(set(allowed))
    unknown = [k for k in given if k not in allowed]
    if not unknown:
        return
    parts = []
    for k in unknown:
        close = difflib.get_close_matches(k, allowed, n=1)
        parts.append("%r (did you mean %r?)" % (k, close[0]) if close else repr(k))
    raise TypeError("%s() got unexpected keyword argument%s %s; accepted: %s" % (
        func, "s" if len(unknown) > 1 else "", ", ".join(parts), ", ".join(allowed)))


def _job_ids(name: str, value: Any) -> List[int]:
    """Job ids from a Job (anything with an int ``id``), an int, or a list of
    them. Raises TypeError for anything else, InvalidArgument for an id < 1."""
    items = value if isinstance(value, (list, tuple)) else [value]
    ids = []
    for item in items:
        job_id = getattr(item, "id", item)
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TypeError("%s: expected a Job, an int job id or a list of them, got %s"
                            % (name, type(item).__name__))
        if job_id < 1:
            raise InvalidArgument("%s: %d is not a job id (ids count from 1)" % (name, job_id))
        ids.append(job_id)
    if not ids:
        raise InvalidArgument("%s: empty; give at least one job" % name)
    return ids


def _dependency(more: Mapping[str, Any]) -> str:
    """JobSpec.dependency from ``dependency=`` (taken as given: the
    coordinator checks it) or the after_*/singleton keywords (all of them
    must hold, Slurm's ','). Raises InvalidArgument when both forms are
    given."""
    parts = []
    for key, slurm in _DEPENDENCY_KEYWORDS:
        if more.get(key) is not None:
            parts.append("%s:%s" % (slurm, ":".join(str(i) for i in _job_ids(key, more[key]))))
    if more.get("singleton") is not None and _bool("singleton", more["singleton"]):
        parts.append("singleton")
    if more.get("dependency") is not None:
        if parts:
            raise InvalidArgument("dependency=%r and after_*/singleton: give one form, not both"
                                  % (more["dependency"],))
        return _str("dependency", more["dependency"])
    return ",".join(parts)


def _int(name: str, value: Any, low: int, high: int = _MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s: expected an int, got %s" % (name, type(value).__name__))
    if not low <= value <= high:
        raise InvalidArgument("%s=%d: must be %d to %d" % (name, value, low, high))
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("%s: expected a bool, got %s" % (name, type(value).__name__))
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("%s: expected a str, got %s" % (name, type(value).__name__))
    return value


def command_argv(command: Any, func: str = "submit") -> list:
    """The argv list of ``command``: a list or tuple of str (or os.PathLike).
    A plain str is refused (TypeError): it would be one argv element, never
    split by a shell; pass shlex.split(text) or ["sh", "-c", text]."""
    if isinstance(command, (str, bytes)):
        raise TypeError("%s(): command must be a list of str such as ['python', "
                        "'train.py'], not a str; use shlex.split(%r) or "
                        "['sh', '-c', %r]" % (func, command, command))
    if not isinstance(command, Sequence):
        raise TypeError("%s(): command must be a list of str, got %s"
                        % (func, type(command).__name__))
    argv = []
    for i, arg in enumerate(command):
        if isinstance(arg, os.PathLike):
            arg = os.fspath(arg)
        if not isinstance(arg, str):
            raise TypeError("%s(): command[%d] must be a str, got %s"
                            % (func, i, type(arg).__name__))
        argv.append(arg)
    if not argv:
        raise InvalidArgument("%s(): command is empty; give the program and its "
                              "arguments, e.g. ['python', 'train.py']" % func)
    return argv


def _names(name: str, value: Any) -> list:
    """A list of names from a list of str or one comma-separated str (as the
    CLI's --gpu-type h100,a100); the coordinator checks each name."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError("%s: expected a list of str or a comma-separated str, got %r"
                    % (name, value))


def build_spec(command: Any, *, gpus: Optional[int] = None,
               gpu_fraction: Optional[float] = None, gpu_mem: Any = None,
               nodes: Optional[int] = None, gpus_per_node: Optional[int] = None,
               env: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
               workdir: Optional[str] = None, default_user: str = "",
               func: str = "submit", also_accepted: Sequence[str] = (), **more: Any):
    """Returns a ``trainctl.v1.types_pb2.JobSpec``; the arguments are those of
    Client.submit (see there for units). ``default_user`` fills spec.user
    when ``user`` is not given; ``func`` names the caller in errors, and
    ``also_accepted`` are the caller's own keywords (listed in the TypeError
    of an unknown keyword).

    Raises TypeError for a wrong type or an unknown keyword (naming all of
    them), InvalidArgument for a value out of range or a combination the CLI
    refuses too (gpus with gpu_fraction, nodes without gpus_per_node...).
    """
    from trainctl.v1 import preflight_pb2, types_pb2

    check_kwargs(func, more, list(NAMED_OPTIONS) + list(EXTRA_OPTIONS) + list(also_accepted))
    spec = types_pb2.JobSpec()
    spec.command.extend(command_argv(command, func))

    shape = {"gpus": gpus, "gpu_fraction": gpu_fraction, "gpu_mem": gpu_mem,
             "nodes": nodes, "gpus_per_node": gpus_per_node}
    given = {k for k, v in shape.items() if v is not None}
    auto_pack = _bool("auto_pack", more.get("auto_pack", False))
    for a, b in (("gpus", "gpu_fraction"), ("gpus", "gpu_mem"), ("gpu_fraction", "gpu_mem"),
                 ("nodes", "gpus"), ("nodes", "gpu_fraction"), ("nodes", "gpu_mem")):
        if a in given and b in given:
            raise InvalidArgument("%s=%r and %s=%r: give one resource shape, not both"
                                  % (a, shape[a], b, shape[b]))
    if ("nodes" in given) != ("gpus_per_node" in given):
        raise InvalidArgument("nodes and gpus_per_node go together (a gang of nodes x "
                              "gpus_per_node GPUs); give both or neither")
    if auto_pack:
        for a in ("gpus", "nodes", "gpu_fraction"):
            if a in given:
                raise InvalidArgument("auto_pack=True and %s: auto-pack is for experiments "
                                      "sized by measured memory; give at most gpu_mem" % a)
    if gpus is not None:
        spec.gpus = _int("gpus", gpus, 1)
    if gpu_fraction is not None:
        if isinstance(gpu_fraction, bool) or not isinstance(gpu_fraction, (int, float)):
            raise TypeError("gpu_fraction: expected a float, got %s"
                            % type(gpu_fraction).__name__)
        if not (0 < gpu_fraction <= 1) or math.isnan(gpu_fraction):
            raise InvalidArgument("gpu_fraction=%r: must be in (0, 1], a share of one GPU"
                                  % gpu_fraction)
        spec.gpu_fraction = float(gpu_fraction)
    if gpu_mem is not None:
        try:
            spec.gpu_memory_bytes = parse_byte_size(gpu_mem)
        except InvalidArgument as e:
            raise InvalidArgument("gpu_mem: %s" % e.message) from None
        if spec.gpu_memory_bytes == 0:
            raise InvalidArgument("gpu_mem=%r: must be more than 0 bytes" % (gpu_mem,))
    if nodes is not None:
        spec.nodes = _int("nodes", nodes, 1)
        spec.gpus_per_node = _int("gpus_per_node", gpus_per_node, 1)
    if "tasks_per_node" in more:
        spec.tasks_per_node = _int("tasks_per_node", more["tasks_per_node"], 1)
    if "priority" in more:
        spec.priority = _int("priority", more["priority"], -2**31, 2**31 - 1)
    if "max_restarts" in more:
        spec.max_restarts = _int("max_restarts", more["max_restarts"], 0)
    if more.get("queue") is not None:
        spec.queue = _str("queue", more["queue"])
    if more.get("time_limit") is not None:
        seconds = parse_duration_s(more["time_limit"], "time_limit")
        if seconds <= 0:
            raise InvalidArgument("time_limit=%r: must be a positive duration"
                                  % (more["time_limit"],))
        spec.time_limit_ms = max(1, int(round(seconds * 1000)))
    if "preemptible" in more:
        spec.preemptible = _bool("preemptible", more["preemptible"])
    if "hold" in more:
        spec.hold = _bool("hold", more["hold"])
    if "no_logs" in more:
        spec.discard_output = _bool("no_logs", more["no_logs"])
    if "slurm_env" in more:
        spec.slurm_env = _bool("slurm_env", more["slurm_env"])
    placement = more.get("placement")
    if placement is not None:
        if placement not in ("pack", "spread"):
            raise InvalidArgument("placement=%r: expected 'pack' or 'spread'" % (placement,))
        spec.placement = (types_pb2.GANG_PLACEMENT_PACK if placement == "pack"
                          else types_pb2.GANG_PLACEMENT_SPREAD)
    if more.get("preflight") is not None:
        spec.preflight = (preflight_pb2.PREFLIGHT_MODE_ON
                          if _bool("preflight", more["preflight"])
                          else preflight_pb2.PREFLIGHT_MODE_OFF)
    user = more.get("user")
    spec.user = _str("user", user) if user is not None else default_user
    if more.get("project") is not None:
        spec.project = _str("project", more["project"])
    spec.auto_pack = auto_pack
    for key, field in (("gpu_types", spec.gpu_types), ("nodelist", spec.nodelist),
                       ("exclude", spec.exclude_nodes)):
        if more.get(key) is not None:
            field.extend(_names(key, more[key]))
    if more.get("constraint") is not None:
        spec.constraint = _str("constraint", more["constraint"])
    if "allow_mixed_gpu_types" in more:
        spec.allow_mixed_gpu_types = _bool("allow_mixed_gpu_types",
                                           more["allow_mixed_gpu_types"])
    spec.dependency = _dependency(more)
    if name is not None:
        spec.name = _str("name", name)
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise InvalidArgument("env: %r is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
                                  % (key,))
        spec.env[key] = value if isinstance(value, str) else str(value)
    if workdir is None:
        workdir = os.getcwd()
    spec.workdir = os.path.normpath(os.path.abspath(os.fspath(workdir)))
    return spec
