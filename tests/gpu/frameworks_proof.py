#!/usr/bin/env python3
"""JAX and Slurm-style programs started by trainctl, unmodified, on a GPU host.

Through a coordinator and agents from the bundle (GPUs 0 and 1):
  jax            `submit --gpus 2 -- python3 jax_psum.py`: trainctl.jax.initialize(),
                 then a psum over both processes' GPUs (expect process_count 2, psum 2)
  jax-2n         the same as `--nodes 2 --gpus-per-node 1` over two agents
  jax-slurm      `submit --gpus 2 --slurm-env -- python3 jax_psum.py --jax-detect`:
                 a bare jax.distributed.initialize() (JAX's own detection)
  lightning-slurm  `submit --gpus 2 --slurm-env -- python3 lightning_slurm.py`
                 (expect SLURMEnvironment, world size 2)
  lightning      the same without --slurm-env (expect TorchElasticEnvironment)

Usage: frameworks_proof.py BUNDLE_DIR OUT_DIR. The SDK (trainctl.jax) is
read from BUNDLE_DIR/py. Writes OUT_DIR/frameworks_proof.json: per case its
command, the job's final state, rank 0's JSON line, pass/fail, and the log
tail of a failure.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_probe import Cluster, last_json_line  # noqa: E402


def run_case(cluster, name, shape, argv, env, expect):
    """Submit one job, wait, read rank 0's JSON line, check `expect`."""
    flags = []
    for k, v in env.items():
        flags += ["--env", f"{k}={v}"]
    out = cluster.cli("submit", "--name", name, *shape, *flags, "--", *argv)
    if out.returncode != 0:
        return {"case": name, "ok": False, "error": out.stderr}
    job = "".join(ch for ch in out.stdout.split()[-1] if ch.isdigit())
    waited = cluster.cli("wait", job, timeout=240)
    log_path = os.path.join(cluster.work, f"{name}.log")
    logs = cluster.cli("logs", job, "--rank", "0")
    with open(log_path, "w") as f:
        f.write(logs.stdout + logs.stderr)
    line = last_json_line(log_path)
    ok = line is not None and all(line.get(k) == v for k, v in expect.items())
    case = {"case": name, "submit": " ".join(shape + ["--"] + argv), "ok": ok,
            "wait": waited.stdout.strip()[-300:], "rank0": line, "expect": expect}
    if not ok:
        case["log_tail"] = (logs.stdout + logs.stderr)[-4000:]
    print(json.dumps(case), flush=True)
    return case


def main():
    bundle, out = (os.path.abspath(a) for a in sys.argv[1:3])
    os.makedirs(out, exist_ok=True)
    share = os.path.join(bundle, "share")
    env = {"NCCL_NVLS_ENABLE": "0", "PYTHONPATH": os.path.join(bundle, "py"),
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    py = sys.executable
    jax_script = os.path.join(share, "jax_psum.py")
    pl_script = os.path.join(share, "lightning_slurm.py")
    two = ["--gpus", "2"]
    cases = []
    work = tempfile.mkdtemp(prefix="frameworks.")
    cluster = Cluster(bundle, work)
    try:
        cases.append(run_case(cluster, "jax", two, [py, jax_script], env,
                              {"process_count": 2, "psum": 2.0}))
        cases.append(run_case(cluster, "jax-slurm", two + ["--slurm-env"],
                              [py, jax_script, "--jax-detect"], env,
                              {"process_count": 2, "psum": 2.0}))
        cases.append(run_case(cluster, "lightning-slurm", two + ["--slurm-env"],
                              [py, pl_script], env,
                              {"cluster_environment": "SLURMEnvironment", "world_size": 2}))
        cases.append(run_case(cluster, "lightning", two, [py, pl_script], env,
                              {"cluster_environment": "TorchElasticEnvironment",
                               "world_size": 2}))
    finally:
        cluster.stop()
    w2 = os.path.join(work, "two-nodes")
    os.makedirs(w2)
    cluster2 = Cluster(bundle, w2, agents=(("node-a", "0", "29700-29749"),
                                           ("node-b", "1", "29750-29799")))
    try:
        cases.append(run_case(cluster2, "jax-2n", ["--nodes", "2", "--gpus-per-node", "1"],
                              [py, jax_script], env, {"process_count": 2, "psum": 2.0}))
    finally:
        cluster2.stop()
    with open(os.path.join(out, "frameworks_proof.json"), "w") as f:
        json.dump({"what": __doc__.split("\n")[0], "cases": cases,
                   "passed": sum(c["ok"] for c in cases), "of": len(cases)}, f, indent=1)
    print(f"{sum(c['ok'] for c in cases)} of {len(cases)} cases passed")


if __name__ == "__main__":
    main()
