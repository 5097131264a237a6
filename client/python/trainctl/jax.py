"""JAX under trainctl's launch contract (docs/design.md §4).

``jax.distributed.initialize`` reads ``JAX_COORDINATOR_ADDRESS`` and
``JAX_LOCAL_DEVICE_IDS`` but takes the process count and id only as
arguments (or detects Slurm, Open MPI or Kubernetes). trainctl exports the
address (rank 0's host and a port reserved for the job, as ``MASTER_PORT``)
and the device ids; this module adds the count and id from ``WORLD_SIZE``
and ``RANK``::

    import trainctl.jax
    trainctl.jax.initialize()      # before any other JAX call
    import jax
    print(jax.process_count())     # == WORLD_SIZE

Nothing here imports JAX until :func:`initialize` is called.
"""

import os


def initialize_args(environ=None):
    """The keyword arguments for ``jax.distributed.initialize`` that the
    launch contract in ``environ`` (default: ``os.environ``) gives:
    ``coordinator_address`` ("host:port", from JAX_COORDINATOR_ADDRESS),
    ``num_processes`` (WORLD_SIZE), ``process_id`` (RANK) and
    ``local_device_ids`` (JAX_LOCAL_DEVICE_IDS, comma-separated indices into
    CUDA_VISIBLE_DEVICES; left out when unset).

    Returns None for a one-process job (WORLD_SIZE 1): there is nothing to
    coordinate and trainctl reserves no port for it.

    Raises ValueError naming the variable when one is missing or malformed
    (the process was not started by trainctl, or by an older coordinator
    without JAX_COORDINATOR_ADDRESS).
    """
    env = os.environ if environ is None else environ

    def integer(name):
        value = env.get(name)
        if value is None:
            raise ValueError(f"{name} is not set: not a trainctl task?")
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not an integer") from None

    world, rank = integer("WORLD_SIZE"), integer("RANK")
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    if world == 1:
        return None
    address = env.get("JAX_COORDINATOR_ADDRESS", "")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"JAX_COORDINATOR_ADDRESS={address!r} is not host:port "
                         "(a coordinator that predates it? run the job again)")
    args = {"coordinator_address": address, "num_processes": world, "process_id": rank}
    ids = env.get("JAX_LOCAL_DEVICE_IDS")
    if ids:
        try:
            args["local_device_ids"] = [int(i) for i in ids.split(",")]
        except ValueError:
            raise ValueError(f"JAX_LOCAL_DEVICE_IDS={ids!r} is not a list of "
                             "integers") from None
    return args


def initialize(**overrides):
    """Call ``jax.distributed.initialize`` with :func:`initialize_args`
    (keyword ``overrides`` win, e.g. ``initialization_timeout=600``).

    Returns True when it initialized JAX's distributed runtime, False for a
    one-process job (nothing to do). Raises ValueError as
    :func:`initialize_args` does, ImportError when JAX is not installed, and
    whatever ``jax.distributed.initialize`` raises (a peer that never came:
    its timeout).
    """
    args = initialize_args()
    if args is None:
        return False
    args.update(overrides)
    import jax  # noqa: PLC0415 (only when asked for)

    jax.distributed.initialize(**args)
    return True
