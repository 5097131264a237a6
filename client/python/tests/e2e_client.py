"""End-to-end test of the Python client against the real binaries on
loopback: a coordinator, an agent with 2 fake GPUs, and jobs submitted,
waited for and inspected from Python; the tasks report metrics with
trainctl.report through the same package. Then the same over TLS with bearer
tokens (deploy/make_certs.sh certificates; a user's config file).

Usage: e2e_client.py BUILD_BIN_DIR   (PYTHONPATH: client/python and the
generated stubs, as CTest sets it). Every wait is on a condition with a
deadline (WaitJob long-polls, a followed log stream, a log file line); no
fixed sleeps. Exits 0 after printing "N passed, 0 failed"; KEEP=1 keeps the
work dir.
"""

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from unittest import mock

import trainctl

DEADLINE_S = 60


class Cluster:
    """A coordinator and one agent started from BIN_DIR in a fresh work dir;
    stop() ends exactly the processes it started."""

    def __init__(self, bin_dir, work, coord_args=(), agent_args=()):
        self.bin = os.path.abspath(bin_dir)
        self.work = work
        self.coord_args, self.agent_args = list(coord_args), list(agent_args)
        self.procs = []

    def start(self, argv, out, err=None):
        """Starts argv with stdout in the work dir's file ``out`` and stderr in
        ``err`` (default: with stdout)."""
        stdout = open(os.path.join(self.work, out), "w")
        stderr = open(os.path.join(self.work, err), "w") if err else subprocess.STDOUT
        self.procs.append(subprocess.Popen(argv, stdout=stdout, stderr=stderr))

    def wait_line(self, log, regex):
        path = os.path.join(self.work, log)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with open(path, errors="replace") as f:
                for line in f:
                    if re.search(regex, line):
                        return line.strip()
            time.sleep(0.05)  # polling a file for a line, under a deadline
        raise AssertionError("no line /%s/ in %s within 30 s" % (regex, log))

    def up(self):
        self.start([os.path.join(self.bin, "trainctl-coordinator"), "--listen", "127.0.0.1:0",
                    "--state-dir", os.path.join(self.work, "state"), "--node-timeout", "5s"]
                   + self.coord_args, "coord.out", "coord.log")
        port = self.wait_line("coord.out", "listening on port").split()[-1]
        self.address = "127.0.0.1:" + port
        self.start([os.path.join(self.bin, "trainctl-agent"), "--coordinator", self.address,
                    "--node-name", "py-node", "--fake-gpus", "2:H200-fake:141GiB",
                    "--log-dir", os.path.join(self.work, "logs")] + self.agent_args, "agent.log")
        self.wait_line("agent.log", "registered with the coordinator")

    def stop(self, failed):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if failed:
            for log in ("coord.log", "agent.log"):
                path = os.path.join(self.work, log)
                if os.path.exists(path):
                    with open(path, errors="replace") as f:
                        tail = f.readlines()[-30:]
                    sys.stderr.write("--- %s: %s\n%s" % (self.work, log, "".join(tail)))


passed = 0


def ok(message):
    global passed
    passed += 1
    print("ok:", message, flush=True)


def check(cond, message):
    if not cond:
        raise AssertionError(message)


# The task: reports 3 steps of loss (below the batch threshold: they reach
# the coordinator at interpreter exit) and 100 steps of acc (sent at 64
# buffered points, the rest at exit), then prints its rank.
TASK = textwrap.dedent("""
    import os, trainctl
    for step in range(3):
        trainctl.report(loss=1.0 / (step + 1), step=step)
    for step in range(100):
        trainctl.report(step=step, **{"val/acc": step / 100.0})
    print("hello from python rank", os.environ["RANK"], "job", os.environ["TRAINCTL_JOB_ID"])
""")


def run(cluster):
    client = trainctl.Client(address=cluster.address)
    task_env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}

    # 1. The node and its fake GPUs.
    (node,) = client.nodes()
    check(node.name == "py-node" and node.state == "ready" and len(node.gpus) == 2
          and node.fake_gpus, "nodes(): %r %r" % (node, node.gpus))
    ok("nodes(): py-node ready with 2 fake GPUs")

    # 2. A Python task reports metrics; the job succeeds; logs and metrics
    # come back.
    job = client.submit([sys.executable, "-c", TASK], gpu_fraction=0.25, env=task_env,
                        name="py-report")
    state = job.wait(timeout=DEADLINE_S)
    check(state == "succeeded", "job %d ended %s: %s\n%s" % (job.id, state, job.reason,
                                                              job.logs()))
    ok("job %d succeeded (wait returned %r)" % (job.id, state))
    log = job.logs()
    check("hello from python rank 0 job %d" % job.id in log, "log: %r" % log)
    ok("logs(): %r" % log.strip())
    metrics = job.metrics()
    check(metrics.get("loss") == [(0, 1.0), (1, 0.5), (2, 1.0 / 3)], "loss: %r" % metrics)
    acc = metrics.get("val/acc", [])
    check(acc == [(s, s / 100.0) for s in range(100)],
          "val/acc: %d points, first %r last %r" % (len(acc), acc[:2], acc[-2:]))
    ok("metrics(): loss %r and 100 points of val/acc in order" % metrics["loss"])
    check(job.metrics(key="loss").keys() == {"loss"}, "metrics(key=)")
    streamed = "".join(job.stream_logs())
    check(streamed == log, "stream_logs(): %r != %r" % (streamed, log))
    ok("stream_logs() of the ended job is its log")
    why = job.why()
    check("succeeded" in why, "why(): %r" % why)
    ok("why(): %r" % why)
    check(any(j.id == job.id and j.state == "succeeded" for j in client.jobs("succeeded")),
          "jobs('succeeded') lacks job %d" % job.id)
    ok("jobs('succeeded') lists it")
    check(job.exit_code == 0 and job.gpu_hours > 0,
          "exit_code %r, gpu_hours %r" % (job.exit_code, job.gpu_hours))
    ok("exit_code 0, gpu_hours %g" % job.gpu_hours)

    # 3. A failing task: wait says "failed".
    bad = client.submit([sys.executable, "-c", "import sys; sys.exit(3)"], env=task_env)
    check(bad.wait(timeout=DEADLINE_S) == "failed", "job %d: %s" % (bad.id, bad.state))
    check(bad.exit_code == 3, "exit_code %r" % bad.exit_code)
    ok("a task exiting 3 ends 'failed' with exit_code 3 (%s)" % bad.reason)

    # 4. Cancel a sleeping job: its followed log says it runs, then cancel.
    sleeper = client.submit(["sh", "-c", "echo sleeping; exec sleep 1000"])
    stream = sleeper.stream_logs()
    seen = ""
    for chunk in stream:  # returns as soon as the task printed its line
        seen += chunk
        if "sleeping" in seen:
            break
    stream.close()
    check(sleeper.refresh().state == "running", "sleeper is %s" % sleeper.state)
    try:
        sleeper.wait(timeout=0.5)
        raise AssertionError("wait(timeout=0.5) of a sleeping job returned")
    except TimeoutError as e:
        check("still running" in str(e), "TimeoutError: %s" % e)
    sleeper.cancel()
    check(sleeper.wait(timeout=DEADLINE_S) == "cancelled", "sleeper: %s" % sleeper.state)
    # The job is final (CANCELLED) once the cancel is stored; its rank's
    # exit (SIGTERM: 143) is reported by the agent after that, so a read
    # right after wait() may see the rank still stopping (exit_code 0).
    check(sleeper.exit_code in (0, 128 + 15), "exit_code %r" % sleeper.exit_code)
    ok("cancel() of a running job: %s (%s), exit_code %d"
       % (sleeper.state, sleeper.reason, sleeper.exit_code))
    try:
        sleeper.cancel()
        raise AssertionError("second cancel() succeeded")
    except trainctl.FailedPrecondition as e:
        ok("cancel() of an ended job: FailedPrecondition: %s" % e)

    # 5. Errors carry the gRPC code and the coordinator's message.
    try:
        client.job(999999)
        raise AssertionError("job(999999) did not raise")
    except trainctl.NotFound as e:
        check("999999" in e.message and e.code_name == "NOT_FOUND", repr(e))
        ok("job(999999): NotFound: %s" % e)
    try:
        client.job(999999, read=False).logs()
        raise AssertionError("logs of job 999999 did not raise")
    except trainctl.NotFound as e:
        ok("logs() of an unknown job: NotFound: %s" % e)
    try:
        client.submit(["true"], priority=5000)
        raise AssertionError("priority 5000 was accepted")
    except trainctl.InvalidArgument as e:
        check("spec.priority" in str(e), repr(e))
        ok("submit(priority=5000): InvalidArgument: %s" % e)
    try:
        trainctl.Client(address="127.0.0.1:1").jobs()
        raise AssertionError("a closed port answered")
    except trainctl.Unavailable as e:
        check("127.0.0.1:1" in str(e), repr(e))
        ok("a coordinator that is not there: Unavailable")

    # 6. A sweep: 2 trials sharing a sweep id, each with its value; each
    # reports its lr as its last loss, so best() picks by lr.
    sweep = client.sweep([sys.executable, "-c", "import trainctl; trainctl.report(loss=9.0); "
                          "trainctl.report(loss=float('{lr}')); print('lr={lr}')"],
                         grid={"lr": ["1e-3", "3e-4"]}, gpu_fraction=0.25, name="pysweep",
                         env=task_env)
    check(sweep.wait(timeout=DEADLINE_S) == ["succeeded", "succeeded"], "sweep states")
    trials = sorted(client.jobs(sweep_id=sweep.id), key=lambda j: j.id)
    check([j.params["lr"] for j in trials] == ["1e-3", "3e-4"], "sweep params")
    check([j.logs().strip() for j in trials] == ["lr=1e-3", "lr=3e-4"], "sweep logs")
    check([j.name for j in trials] == ["pysweep-0", "pysweep-1"], "sweep names")
    ok("sweep %s: 2 trials, each with its lr" % sweep.id)
    best_min, best_max = sweep.best("loss"), sweep.best("loss", mode="max")
    check((best_min.params, best_max.params) == ({"lr": "3e-4"}, {"lr": "1e-3"}),
          "best(): %r %r" % (best_min, best_max))
    check(sweep.best("never_reported") is None, "best() of a metric no trial reported")
    ok("sweep.best('loss'): lr 3e-4; mode='max': lr 1e-3")

    # 7. A job array from one spec: each task sees its TRAINCTL_ARRAY_TASK_ID.
    array = client.submit_array(["sh", "-c", "echo task=$TRAINCTL_ARRAY_TASK_ID"], [5, 2, 9],
                                max_running=1, gpu_fraction=0.25, name="pyarray")
    check(array.wait(timeout=DEADLINE_S) == ["succeeded"] * 3, "array states")
    check([j.logs().strip() for j in array.jobs] == ["task=5", "task=2", "task=9"],
          "array logs: %r" % [j.logs() for j in array.jobs])
    check(array.id == array.jobs[0].id, "array id %r" % array.id)
    ok("submit_array: array %d, tasks 5, 2 and 9 each saw its task id" % array.id)


def run_secure(cluster, certs, tokens):
    """TLS and bearer tokens: alice from her config file, bob from arguments;
    a task reports metrics over TLS (the agent gives it TRAINCTL_TLS_CA)."""
    ca = os.path.join(certs, "ca.crt")
    alice_config = os.path.join(cluster.work, "alice", "trainctl", "config")
    os.makedirs(os.path.dirname(alice_config))
    with open(alice_config, "w") as f:
        f.write('coordinator = "%s"\ntoken = "%s"\nca_cert = "%s"\n'
                % (cluster.address, tokens["alice"], ca))
    os.chmod(alice_config, 0o600)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAINCTL_COORDINATOR", "TRAINCTL_AUTH_TOKEN", "TRAINCTL_TLS_CA")}
    env["XDG_CONFIG_HOME"] = os.path.join(cluster.work, "alice")
    with mock.patch.dict(os.environ, env, clear=True):
        alice = trainctl.Client()  # everything from her config file
    check(alice.address == cluster.address and alice.connection.ca_pem, repr(alice.connection))
    bob = trainctl.Client(cluster.address, token=tokens["bob"], ca_cert=ca)

    task_env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}
    job = alice.submit([sys.executable, "-c", "import trainctl; trainctl.report(loss=0.5, "
                        "step=7); print('tls ok')"], env=task_env)
    check(job.wait(timeout=DEADLINE_S) == "succeeded", "alice's job: %s %s\n%s"
          % (job.state, job.reason, job.logs()))
    check(job.proto.spec.user == "alice", "spec.user %r" % job.proto.spec.user)
    check(job.metrics() == {"loss": [(7, 0.5)]}, "metrics over TLS: %r" % job.metrics())
    ok("TLS + token from the config file: alice's job %d ran as alice and reported over TLS"
       % job.id)
    try:
        bob.job(job.id)
        raise AssertionError("bob read alice's job")
    except trainctl.PermissionDenied as e:
        ok("bob reads alice's job: PermissionDenied: %s" % e)
    try:
        trainctl.Client(cluster.address, ca_cert=ca).jobs()
        raise AssertionError("a call without a token was answered")
    except trainctl.Unauthenticated as e:
        ok("no token: Unauthenticated: %s" % e)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: e2e_client.py BUILD_BIN_DIR")
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    work = tempfile.mkdtemp(prefix="trainctl-py-e2e.")
    failed = True
    clusters = []
    try:
        plain = Cluster(sys.argv[1], os.path.join(work, "plain"))
        os.makedirs(plain.work)
        clusters.append(plain)
        plain.up()
        run(plain)

        certs = os.path.join(work, "certs")
        subprocess.run([os.path.join(src, "deploy", "make_certs.sh"), certs, "py-node"],
                       check=True, stdout=subprocess.DEVNULL)
        tokens = {"alice": secrets.token_hex(16), "bob": secrets.token_hex(16)}
        with open(os.path.join(work, "tokens.txtpb"), "w") as f:
            for user, token in tokens.items():
                f.write('tokens { token: "%s" user: "%s" }\n' % (token, user))
        tls = ["--tls-ca", os.path.join(certs, "ca.crt")]
        secure = Cluster(sys.argv[1], os.path.join(work, "secure"),
                         coord_args=tls + ["--tls-cert", os.path.join(certs, "coordinator.crt"),
                                           "--tls-key", os.path.join(certs, "coordinator.key"),
                                           "--tokens-file", os.path.join(work, "tokens.txtpb")],
                         # The token users have no local accounts here: tasks
                         # run as the agent's (tests/e2e/multiuser_e2e.sh runs
                         # each job as its user).
                         agent_args=tls + [
                             "--run-tasks-as-agent",
                             "--tls-cert", os.path.join(certs, "nodes", "py-node.crt"),
                             "--tls-key", os.path.join(certs, "nodes", "py-node.key")])
        os.makedirs(secure.work)
        clusters.append(secure)
        secure.up()
        run_secure(secure, certs, tokens)
        failed = False
    except Exception:
        traceback.print_exc()
        print("FAIL", flush=True)
    finally:
        for c in clusters:
            c.stop(failed)
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    if failed:
        sys.exit(1)
    print("%d passed, 0 failed" % passed)


if __name__ == "__main__":
    main()
