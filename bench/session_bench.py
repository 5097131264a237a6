#!/usr/bin/env python3
"""Interactive sessions on loopback: keystroke echo, shell start, port-forward.

Starts a coordinator and one agent (fake GPUs) from BUILD_BIN_DIR and measures
through the real CLI:
  echo_rtt      one byte typed into `trainctl exec -it JOB -- cat -u` (remote
                terminal raw, no echo) until cat's copy of it is back (coordinator and agent in
                the path both ways), N samples: p50 / p99, ms;
  shell_prompt  `trainctl shell --gpus 1 -- env PS1=.. sh -i` started until
                its prompt shows (submit, placement, task start, session
                open), N runs: p50 / max, ms;
  forward       MiB/s of one TCP stream read through `trainctl port-forward`
                vs the same read directly on loopback, and 100 concurrent
                connections through the forward (all must answer).
Usage: session_bench.py BUILD_BIN_DIR [OUT_JSON]. Prints the JSON.
"""

import concurrent.futures
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import pexpect

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
OUT = sys.argv[2] if len(sys.argv) > 2 else None
T = os.path.join(BIN, "trainctl")
WORK = tempfile.mkdtemp(prefix="trainctl-session-bench.")
PROCS = []
ECHO_SAMPLES = 500
SHELL_RUNS = 10
STREAM_BYTES = 256 << 20


def wait_for(cond, what, deadline_s=30):
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise SystemExit("timed out: " + what)
        time.sleep(0.02)


def grep(path, regex):
    try:
        with open(path) as f:
            return re.search(regex, f.read())
    except FileNotFoundError:
        return None


def run(*args):
    return subprocess.run([T, *args], capture_output=True, text=True, check=True).stdout


def running(job_id):
    d = json.loads(run("describe", job_id, "-o", "json"))
    j = d.get("job", d)
    return j.get("state") == "JOB_STATE_RUNNING" and any(
        t.get("state") == "TASK_STATE_RUNNING" for t in j.get("tasks", []))


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    out = os.path.join(WORK, "coord.out")
    PROCS.append(subprocess.Popen(
        [os.path.join(BIN, "trainctl-coordinator"), "--listen", "127.0.0.1:0",
         "--state-dir", os.path.join(WORK, "state")],
        stdout=open(out, "w"), stderr=open(os.path.join(WORK, "coord.log"), "w")))
    wait_for(lambda: grep(out, r"listening on port (\d+)"), "coordinator")
    os.environ["TRAINCTL_COORDINATOR"] = "127.0.0.1:" + grep(out, r"listening on port (\d+)").group(1)
    log = os.path.join(WORK, "agent.log")
    PROCS.append(subprocess.Popen(
        [os.path.join(BIN, "trainctl-agent"), "--coordinator", os.environ["TRAINCTL_COORDINATOR"],
         "--node-name", "bench", "--fake-gpus", "4", "--cgroups", "off",
         "--container-runtime", "none", "--log-dir", os.path.join(WORK, "logs")],
        stdout=open(log, "w"), stderr=subprocess.STDOUT))
    wait_for(lambda: grep(log, "registered with the coordinator"), "agent")
    result = {"host": os.uname().nodename, "cpus": os.cpu_count(),
              "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
              "time_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    # Keystroke echo round trip.
    holder = run("submit", "--gpus", "1", "--", "sleep", "100000").strip()
    wait_for(lambda: running(holder), "holder job")
    # The remote terminal raw and without echo: each byte comes back once,
    # from cat itself.
    p = pexpect.spawn(T, ["exec", "-it", holder, "--", "sh", "-c",
                          "stty raw -echo; echo go; exec cat -u"], encoding=None, timeout=30)
    p.delaybeforesend = None  # pexpect sleeps 50 ms before each send by default
    p.expect(b"go")
    p.send(b"w")
    p.expect(b"w")
    samples = []
    for i in range(ECHO_SAMPLES):
        c = bytes([ord("a") + i % 26])
        t0 = time.perf_counter()
        p.send(c)
        p.expect_exact(c)
        samples.append((time.perf_counter() - t0) * 1000)
    p.close(force=True)  # the client gone: the agent kills cat
    result["echo_rtt_ms"] = {"samples": ECHO_SAMPLES, "p50": round(pct(samples, 50), 3),
                             "p99": round(pct(samples, 99), 3),
                             "max": round(max(samples), 3), "target_p50": 2, "target_p99": 10}

    # Shell to prompt.
    starts = []
    for _ in range(SHELL_RUNS):
        t0 = time.perf_counter()
        s = pexpect.spawn(T, ["shell", "--gpus", "1", "--", "env", "PS1=BENCH> ", "sh", "-i"],
                          encoding="utf-8", timeout=30)
        s.delaybeforesend = None
        s.expect_exact("BENCH> ")
        starts.append((time.perf_counter() - t0) * 1000)
        s.sendline("exit 0")
        s.expect(pexpect.EOF)
    result["shell_to_prompt_ms"] = {"runs": SHELL_RUNS, "p50": round(pct(starts, 50), 1),
                                    "max": round(max(starts), 1), "target": 1000}

    # Port-forward: one stream of STREAM_BYTES, direct vs forwarded.
    port = free_port()
    server = ("import socket,sys\n"
              "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.bind(('127.0.0.1', %d)); s.listen(256)\n"
              "buf=bytes(1<<20)\n"
              "import threading\n"
              "def serve(c):\n"
              "  try:\n"
              "    n=c.recv(16)\n"
              "    total=int(n or b'0')\n"
              "    while total>0:\n"
              "      k=min(total,len(buf)); c.sendall(buf[:k]); total-=k\n"
              "  finally: c.close()\n"
              "while True:\n"
              "  c,_=s.accept(); threading.Thread(target=serve,args=(c,),daemon=True).start()\n"
              % port)
    srv = run("submit", "--gpus", "1", "--", "python3", "-c", server).strip()
    wait_for(lambda: running(srv), "stream server job")

    def fetch(p, nbytes):
        t0 = time.perf_counter()
        got = 0
        with socket.create_connection(("127.0.0.1", p), timeout=60) as s:
            s.sendall(b"%16d" % nbytes)
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                got += len(b)
        return got, time.perf_counter() - t0

    def connects():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    wait_for(connects, "stream server listening")
    pf = subprocess.Popen([T, "port-forward", srv, "0:%d" % port], stdout=subprocess.PIPE, text=True)
    PROCS.append(pf)
    local = int(re.search(r"127\.0\.0\.1:(\d+)", pf.stdout.readline()).group(1))
    direct = fetch(port, STREAM_BYTES)
    forwarded = fetch(local, STREAM_BYTES)
    if forwarded[0] != STREAM_BYTES or direct[0] != STREAM_BYTES:
        raise SystemExit("short read: %r %r" % (direct, forwarded))
    d_mibs = STREAM_BYTES / direct[1] / (1 << 20)
    f_mibs = STREAM_BYTES / forwarded[1] / (1 << 20)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(100) as ex:
        many = list(ex.map(lambda _: fetch(local, 64 << 10)[0], range(100)))
    many_s = time.perf_counter() - t0
    result["port_forward"] = {
        "stream_bytes": STREAM_BYTES, "direct_mib_s": round(d_mibs, 1),
        "forwarded_mib_s": round(f_mibs, 1), "ratio": round(f_mibs / d_mibs, 3),
        "target_ratio": 0.5,
        "concurrent_connections": 100,
        "concurrent_ok": sum(1 for n in many if n == 64 << 10),
        "concurrent_wall_s": round(many_s, 3)}
    text = json.dumps(result, indent=2)
    print(text)
    if OUT:
        with open(OUT, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in PROCS:
            proc.kill()
        shutil.rmtree(WORK, ignore_errors=True)
