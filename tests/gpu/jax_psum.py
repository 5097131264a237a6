#!/usr/bin/env python3
"""A JAX program started by trainctl: joins the job's processes with
trainctl.jax.initialize() (or, with --jax-detect, with a bare
jax.distributed.initialize(), JAX's own Slurm detection under
`submit --slurm-env`), then psums a 1 over every device of every process.
Rank 0 prints one JSON line: process_count, device_count, psum (== the
number of devices of all processes when every process took part), and the
variables it was started with (JAX_*, SLURM_*, RANK, WORLD_SIZE)."""

import argparse
import json
import os

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--jax-detect", action="store_true")
args = ap.parse_args()
if args.jax_detect:
    import jax
    jax.distributed.initialize()
else:
    import trainctl.jax
    trainctl.jax.initialize()
    import jax
import jax.numpy as jnp

xs = jnp.ones(jax.local_device_count())
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(xs)
result = {
    "how": "jax.distributed.initialize() (JAX's detection)" if args.jax_detect
    else "trainctl.jax.initialize()",
    "process_index": jax.process_index(), "process_count": jax.process_count(),
    "device_count": jax.device_count(), "local_device_count": jax.local_device_count(),
    "local_devices": [str(d) for d in jax.local_devices()],
    "psum": float(total[0]), "jax_version": jax.__version__,
    "env": {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("JAX_", "SLURM", "CUDA_VISIBLE")) or k in ("RANK", "WORLD_SIZE")},
}
if jax.process_index() == 0:
    print(json.dumps(result), flush=True)
jax.distributed.shutdown()
