#!/usr/bin/env python3
"""Where does a trainctl-launched DDP job lose start-up time to torchrun?

Runs tests/gpu/ddp_train.py (2 ranks, GPUs 0 and 1) in rounds, each round
alternating these launchers, and records every rank-0 phase (process start ->
torch imported, CUDA set, process group ready, DDP wrapped, first all-reduce):

  trainctl   `trainctl submit --gpus 2` through a coordinator and one agent
  trainctl-2n  `trainctl submit --nodes 2 --gpus-per-node 1` over two agents
             (node-a GPU 0, node-b GPU 1: rank 1 reaches rank 0's node over TCP)
  torchrun   `torchrun --standalone --nproc-per-node 2`
  replay     both ranks started by this script with exactly the environment
             trainctl gave them in round 1 (read back from DDP_PROBE_DIR):
             separates "what trainctl's environment does" from "what trainctl's
             process set-up (shim, cgroup, stdio, rlimits) does"
  replay-omp1  replay with OMP_NUM_THREADS=1 (torchrun's value)
  replay-stagger  replay with rank 1 started 1 s after rank 0: if rank 1's
             TCPStore connect loses a race with rank 0's listen and backs off,
             this run is faster than replay
  replay-idx  replay with CUDA_VISIBLE_DEVICES given as indices ("0,1",
             torchrun's) instead of trainctl's GPU UUIDs
  replay-idx-omp1  both changes
--launchers picks which run (default: all).

Usage: ddp_probe.py BUNDLE_DIR OUT_DIR [--rounds N]
Writes OUT_DIR/ddp_probe.json (per run: launcher, round, rank-0 phases, the
job's JSON line) and OUT_DIR/ddp_probe_facts.json (round 1's process facts of
both ranks per launcher: environment with tokens removed, affinity, nice,
rlimits, cgroup, stdio), and prints a median table. Needs python3 with torch
and 2 GPUs; trainctl comes from the bundle (deploy/make_bundle.sh).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = ("imported", "cuda_set", "pg_ready", "ddp_ready", "first_allreduce")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def last_json_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f if l.startswith("{")]
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


class Cluster:
    """A coordinator and one agent offering GPUs 0 and 1 on 127.0.0.1."""

    def __init__(self, bundle, work, agents=(("node-a", "0,1", "29600-29699"),), agent_args=()):
        self.bin = os.path.join(bundle, "bin")
        self.work = work
        self.addr = f"127.0.0.1:{free_port()}"
        self.procs = []
        os.makedirs(os.path.join(work, "state"))
        os.makedirs(os.path.join(work, "task-logs"))
        self._spawn("coordinator", [os.path.join(self.bin, "trainctl-coordinator"),
                                    "--listen", self.addr, "--state-dir",
                                    os.path.join(work, "state")])
        wait_until(lambda: self.cli("nodes").returncode == 0, 30, "the coordinator")
        for name, gpus, ports in agents:
            self._spawn(f"agent-{name}" if len(agents) > 1 else "agent",
                        [os.path.join(self.bin, "trainctl-agent"), "--coordinator",
                         self.addr, "--node-name", name, "--gpus", gpus,
                         "--log-dir", os.path.join(work, "task-logs", name),
                         "--port-range", ports, "--address", "127.0.0.1", *agent_args])
        for name, _, _ in agents:
            wait_until(lambda: name in self.cli("nodes").stdout, 60, f"agent {name}")

    def _spawn(self, name, argv):
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def cli(self, *args, timeout=60):
        return subprocess.run([os.path.join(self.bin, "trainctl"), "--coordinator",
                               self.addr, *args], capture_output=True, text=True,
                              timeout=timeout)

    def stop(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def run_trainctl(cluster, script, probe_dir, log_path, shape=("--gpus", "2")):
    out = cluster.cli("submit", "--name", "ddp-probe", *shape, "--env",
                      "NCCL_NVLS_ENABLE=0", "--env", f"DDP_PROBE_DIR={probe_dir}", "--",
                      sys.executable, script)
    if out.returncode != 0:
        raise RuntimeError(f"submit failed: {out.stderr}")
    job = out.stdout.split()[-1].strip()
    job = "".join(ch for ch in job if ch.isdigit()) or job
    cluster.cli("wait", job, timeout=180)
    logs = cluster.cli("logs", job, "--rank", "0")
    with open(log_path, "w") as f:
        f.write(logs.stdout + logs.stderr)
    return last_json_line(log_path)


def run_torchrun(script, probe_dir, log_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", DDP_PROBE_DIR=probe_dir)
    with open(log_path, "w") as log:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", script], env=env, stdout=log,
                       stderr=subprocess.STDOUT, timeout=180)
    return last_json_line(log_path)


def run_replay(envs, script, probe_dir, log_path, stagger_s=0.0, extra=None):
    procs = []
    with open(log_path, "w") as log:
        for rank, env in enumerate(envs):
            env = dict(env, DDP_PROBE_DIR=probe_dir, **(extra or {}))
            if rank > 0 and stagger_s > 0:
                time.sleep(stagger_s)
            procs.append(subprocess.Popen([sys.executable, script], env=env,
                                          stdout=log if rank == 0 else subprocess.DEVNULL,
                                          stderr=subprocess.STDOUT))
        try:
            for p in procs:
                p.wait(timeout=180)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.wait()
            return None
    return last_json_line(log_path)


def scrub(facts):
    env = facts.get("env", {})
    for k in list(env):
        if "TOKEN" in k:
            env[k] = "<removed>"
    return facts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--launchers", default="trainctl,torchrun,trainctl-2n")
    args = ap.parse_args()
    bundle = os.path.abspath(args.bundle)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    script = os.path.join(bundle, "share", "ddp_train.py")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    work = tempfile.mkdtemp(prefix="ddp_probe.")
    cluster = Cluster(bundle, work)
    cluster2 = None
    runs, facts, replay_envs = [], {}, None
    try:
        for rnd in range(1, args.rounds + 1):
            wanted = args.launchers.split(",")
            launchers = [l for l in wanted if not l.startswith("replay")]
            if replay_envs:
                launchers += [l for l in wanted if l.startswith("replay")]
            elif "trainctl" not in launchers:
                launchers.insert(0, "trainctl")
            for launcher in launchers:
                probe = os.path.join(work, f"{launcher}-{rnd}")
                os.makedirs(probe)
                os.chmod(probe, 0o777)
                log = os.path.join(work, f"{launcher}-{rnd}.log")
                t0 = time.monotonic()
                if launcher == "trainctl":
                    line = run_trainctl(cluster, script, probe, log)
                elif launcher == "trainctl-2n":
                    if cluster2 is None:
                        w2 = os.path.join(work, "two-nodes")
                        os.makedirs(w2)
                        cluster2 = Cluster(bundle, w2, agents=(
                            ("node-a", "0", "29700-29749"), ("node-b", "1", "29750-29799")))
                    line = run_trainctl(cluster2, script, probe, log,
                                        shape=("--nodes", "2", "--gpus-per-node", "1"))
                elif launcher == "torchrun":
                    line = run_torchrun(script, probe, log)
                elif launcher == "replay":
                    line = run_replay(replay_envs, script, probe, log)
                elif launcher == "replay-omp1":
                    line = run_replay(replay_envs, script, probe, log,
                                      extra={"OMP_NUM_THREADS": "1"})
                elif launcher == "replay-idx":
                    line = run_replay(replay_envs, script, probe, log,
                                      extra={"CUDA_VISIBLE_DEVICES": "0,1"})
                elif launcher == "replay-idx-omp1":
                    line = run_replay(replay_envs, script, probe, log,
                                      extra={"CUDA_VISIBLE_DEVICES": "0,1",
                                             "OMP_NUM_THREADS": "1"})
                else:
                    line = run_replay(replay_envs, script, probe, log, stagger_s=1.0)
                wall = time.monotonic() - t0
                rank_facts = []
                for r in (0, 1):
                    try:
                        with open(os.path.join(probe, f"rank{r}.json")) as f:
                            rank_facts.append(json.load(f))
                    except (OSError, ValueError):
                        rank_facts.append(None)
                if launcher == "trainctl" and replay_envs is None and all(rank_facts):
                    replay_envs = [dict(f["env"]) for f in rank_facts]
                    for env in replay_envs:
                        env.pop("DDP_PROBE_DIR", None)
                        # No agent hosts a store for a replay: rank 0
                        # creates it, as before the agent hosted it (with
                        # the flag, every rank would wait for a store that
                        # never opens).
                        env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
                if launcher not in facts:  # the first run of each launcher
                    facts[launcher] = [scrub(f) if f else None for f in rank_facts]
                runs.append({"launcher": launcher, "round": rnd, "wall_s": round(wall, 3),
                             "rank0": line,
                             "rank1_phases_s": (rank_facts[1] or {}).get("phases_s")})
                print(f"round {rnd} {launcher}: {json.dumps((line or {}).get('phases_s'))}",
                      flush=True)
    finally:
        cluster.stop()
        if cluster2 is not None:
            cluster2.stop()
        for name in ("coordinator.log", "agent.log"):
            shutil.copy(os.path.join(work, name), os.path.join(out, f"ddp_probe_{name}"))

    table = {}
    for launcher in args.launchers.split(","):
        sel = [r["rank0"]["phases_s"] for r in runs
               if r["launcher"] == launcher and r["rank0"] and "phases_s" in r["rank0"]]
        if sel:
            table[launcher] = {p: round(statistics.median(s[p] for s in sel), 3)
                               for p in PHASES if all(p in s for s in sel)}
            table[launcher]["runs"] = len(sel)
    result = {"what": "DDP start-up phases by launcher (rank 0, seconds since exec, medians)",
              "medians_s": table, "runs": runs}
    with open(os.path.join(out, "ddp_probe.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "ddp_probe_facts.json"), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
