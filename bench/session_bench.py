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
                (and, with --vs, CPU ms per MiB of coordinator, agent and CLI)
                vs the same read directly on loopback, and 100 concurrent
                connections through the forward (all must answer);
  relay floor   the same read through a chain of three plain relays, one
                process each (recv_into a 1 MiB buffer, sendall), standing
                for the forward's three hops (CLI, coordinator, agent) with
                no framing, flow control or authentication: the most any
                relay through the coordinator could carry on this host.

Usage: session_bench.py BUILD_BIN_DIR [OUT_JSON] [--forward-only --rounds N]
       session_bench.py --vs OLD_BIN_DIR NEW_BIN_DIR [OUT_JSON] [--rounds N]
The second form starts one stack (coordinator, agent, stream server job,
port-forward) from each build side by side and measures them in turn, old
then new, round after round (N rounds, default 8), each round a direct read
then each stack's forwarded read (old first in even rounds, new first in
odd ones); it reports every round, the medians and the new/old ratio of
each round's pair. Prints the JSON.
"""

import argparse
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


WORK = tempfile.mkdtemp(prefix="trainctl-session-bench.")
PROCS = []
ECHO_SAMPLES = 500
SHELL_RUNS = 10
STREAM_BYTES = 256 << 20
CONCURRENT = 100


def wait_for(cond, what, deadline_s=30):
    """Polls cond until true; exits naming `what` after deadline_s seconds."""
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise SystemExit("timed out: " + what)
        time.sleep(0.02)


def grep(path, regex):
    """The first match of regex in the file at path, or None."""
    try:
        with open(path) as f:
            return re.search(regex, f.read())
    except FileNotFoundError:
        return None


def pct(values, p):
    """The p-th percentile of values (nearest rank)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def free_port():
    """A loopback TCP port free just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(port, nbytes):
    """Reads nbytes from the stream server at port; returns (bytes, seconds)."""
    t0 = time.perf_counter()
    got = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"%16d" % nbytes)
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            got += len(b)
    return got, time.perf_counter() - t0


def mib_s(nbytes, seconds):
    """nbytes per seconds, in MiB/s."""
    return nbytes / seconds / (1 << 20)


def cpu_s(pid):
    """CPU seconds (user + system) of process pid and its trainctl descendants
    (the agent runs under a guard process), exited threads included."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return 0.0
    fields = s[s.rindex(")") + 2:].split()
    total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for k in kids:
            try:
                with open("/proc/%d/comm" % k) as f:
                    if "trainctl" in f.read():
                        total += cpu_s(k)
            except OSError:
                pass
    return total


# The stream server: each connection sends 16 ASCII digits N, then reads N
# bytes of zeros.
SERVER = ("import socket,sys\n"
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
          "  c,_=s.accept(); threading.Thread(target=serve,args=(c,),daemon=True).start()\n")


# One relay of the floor chain: listens on a loopback port (printed), and for
# each connection opens one to the upstream port and copies both ways.
RELAY = ("import socket,sys,threading\n"
         "up=int(sys.argv[1]); s=socket.socket()\n"
         "s.bind(('127.0.0.1', 0)); s.listen(256); print(s.getsockname()[1], flush=True)\n"
         "def pump(a, b):\n"
         "  buf=bytearray(1<<20); mv=memoryview(buf)\n"
         "  while True:\n"
         "    n=a.recv_into(buf)\n"
         "    if not n: break\n"
         "    b.sendall(mv[:n])\n"
         "  try: b.shutdown(socket.SHUT_WR)\n"
         "  except OSError: pass\n"
         "while True:\n"
         "  c,_=s.accept(); d=socket.create_connection(('127.0.0.1', up))\n"
         "  for x, y in ((c, d), (d, c)):\n"
         "    threading.Thread(target=pump, args=(x, y), daemon=True).start()\n")
FLOOR_HOPS = 3


def relay_chain(port):
    """Starts FLOOR_HOPS relays in a chain ending at port; returns the first
    relay's port."""
    for _ in range(FLOOR_HOPS):
        PROCS.append(subprocess.Popen([sys.executable, "-c", RELAY, str(port)],
                                      stdout=subprocess.PIPE, text=True))
        port = int(PROCS[-1].stdout.readline())
    return port


class Stack:
    """One coordinator and one agent of a build, and its CLI."""

    def __init__(self, bin_dir, name):
        self.bin = os.path.abspath(bin_dir)
        self.cli = os.path.join(self.bin, "trainctl")
        self.name = name
        self.dir = os.path.join(WORK, name)
        os.makedirs(self.dir)
        out = os.path.join(self.dir, "coord.out")
        # Pids whose CPU time a forwarded read is charged with: coordinator,
        # agent, the port-forward CLI.
        self.pids = {}
        PROCS.append(subprocess.Popen(
            [os.path.join(self.bin, "trainctl-coordinator"), "--listen", "127.0.0.1:0",
             "--state-dir", os.path.join(self.dir, "state")],
            stdout=open(out, "w"), stderr=open(os.path.join(self.dir, "coord.log"), "w")))
        self.pids["coordinator"] = PROCS[-1].pid
        wait_for(lambda: grep(out, r"listening on port (\d+)"), name + " coordinator")
        self.env = dict(os.environ)
        self.env["TRAINCTL_COORDINATOR"] = (
            "127.0.0.1:" + grep(out, r"listening on port (\d+)").group(1))
        log = os.path.join(self.dir, "agent.log")
        PROCS.append(subprocess.Popen(
            [os.path.join(self.bin, "trainctl-agent"),
             "--coordinator", self.env["TRAINCTL_COORDINATOR"],
             "--node-name", "bench-" + name, "--fake-gpus", "4", "--cgroups", "off",
             "--container-runtime", "none", "--log-dir", os.path.join(self.dir, "logs")],
            stdout=open(log, "w"), stderr=subprocess.STDOUT))
        self.pids["agent"] = PROCS[-1].pid
        wait_for(lambda: grep(log, "registered with the coordinator"), name + " agent")
        self.port = None
        self.local = None

    def run(self, *args):
        """The CLI's stdout; raises CalledProcessError when it fails."""
        return subprocess.run([self.cli, *args], capture_output=True, text=True, check=True,
                              env=self.env).stdout

    def running(self, job_id):
        """Whether job_id runs with a running task."""
        d = json.loads(self.run("describe", job_id, "-o", "json"))
        j = d.get("job", d)
        return j.get("state") == "JOB_STATE_RUNNING" and any(
            t.get("state") == "TASK_STATE_RUNNING" for t in j.get("tasks", []))

    def echo(self):
        """Keystroke echo round trip through exec -it (ms)."""
        holder = self.run("submit", "--gpus", "1", "--", "sleep", "100000").strip()
        wait_for(lambda: self.running(holder), "holder job")
        # The remote terminal raw and without echo: each byte comes back once,
        # from cat itself.
        import pexpect  # the echo and shell measures only: --forward-only runs without it
        p = pexpect.spawn(self.cli, ["exec", "-it", holder, "--", "sh", "-c",
                                     "stty raw -echo; echo go; exec cat -u"],
                          encoding=None, timeout=30, env=self.env)
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
        self.run("cancel", holder)
        return {"samples": ECHO_SAMPLES, "p50": round(pct(samples, 50), 3),
                "p99": round(pct(samples, 99), 3),
                "max": round(max(samples), 3), "target_p50": 2, "target_p99": 10}

    def shell(self):
        """Shell to prompt (ms)."""
        starts = []
        for _ in range(SHELL_RUNS):
            t0 = time.perf_counter()
            import pexpect  # noqa: the echo and shell measures only
            s = pexpect.spawn(self.cli, ["shell", "--gpus", "1", "--", "env", "PS1=BENCH> ",
                                         "sh", "-i"], encoding="utf-8", timeout=30,
                              env=self.env)
            s.delaybeforesend = None
            s.expect_exact("BENCH> ")
            starts.append((time.perf_counter() - t0) * 1000)
            s.sendline("exit 0")
            s.expect(pexpect.EOF)
        return {"runs": SHELL_RUNS, "p50": round(pct(starts, 50), 1),
                "max": round(max(starts), 1), "target": 1000}

    def start_forward(self):
        """The stream server job and `trainctl port-forward` to it."""
        self.port = free_port()
        srv = self.run("submit", "--gpus", "1", "--", "python3", "-c",
                       SERVER % self.port).strip()
        wait_for(lambda: self.running(srv), "stream server job")

        def connects():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(connects, "stream server listening")
        pf = subprocess.Popen([self.cli, "port-forward", srv, "0:%d" % self.port],
                              stdout=subprocess.PIPE, text=True, env=self.env)
        PROCS.append(pf)
        self.pids["cli"] = pf.pid
        self.cpu_ms = {k: [] for k in self.pids}
        self.local = int(re.search(r"127\.0\.0\.1:(\d+)", pf.stdout.readline()).group(1))
        self.floor = relay_chain(self.port)

    def stream(self, how):
        """One STREAM_BYTES read: "direct", through the relay "floor" chain,
        or "forward"ed by trainctl; MiB/s. A forwarded one also notes the CPU
        ms per MiB of coordinator, agent and CLI."""
        port = {"direct": self.port, "floor": self.floor, "forward": self.local}[how]
        before = {k: cpu_s(p) for k, p in self.pids.items()}
        got, secs = fetch(port, STREAM_BYTES)
        if how == "forward":
            for k, p in self.pids.items():
                self.cpu_ms[k].append((cpu_s(p) - before[k]) * 1000 / (STREAM_BYTES >> 20))
        if got != STREAM_BYTES:
            raise SystemExit("%s: short read (%s): %d of %d bytes" % (
                self.name, how, got, STREAM_BYTES))
        return mib_s(got, secs)

    def concurrent(self):
        """CONCURRENT connections at once through the forward, 64 KiB each."""
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as ex:
            many = list(ex.map(lambda _: fetch(self.local, 64 << 10)[0], range(CONCURRENT)))
        return {"concurrent_connections": CONCURRENT,
                "concurrent_ok": sum(1 for n in many if n == 64 << 10),
                "concurrent_wall_s": round(time.perf_counter() - t0, 3)}


def median_of(rows, key):
    """The median of rows' values at key, to 3 decimals."""
    return round(statistics.median(row[key] for row in rows), 3)


def header():
    """The machine and the time of the run."""
    return {"host": os.uname().nodename, "cpus": os.cpu_count(),
            "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
            "time_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def single(bin_dir, rounds, forward_only):
    """Every measure on one build's stack (the first usage form); the
    forwarded read `rounds` times, each round a direct read, the relay
    floor's and trainctl's."""
    result = header()
    st = Stack(bin_dir, "one")
    if not forward_only:
        result["echo_rtt_ms"] = st.echo()
        result["shell_to_prompt_ms"] = st.shell()
    st.start_forward()
    per_round = []
    for _ in range(rounds):
        row = {k: round(st.stream(k), 1) for k in ("direct", "floor", "forward")}
        row["ratio"] = round(row["forward"] / row["direct"], 3)
        row["floor_ratio"] = round(row["floor"] / row["direct"], 3)
        per_round.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    result["port_forward"] = {
        "stream_bytes": STREAM_BYTES, "rounds": rounds, "floor_hops": FLOOR_HOPS,
        "direct_mib_s_median": median_of(per_round, "direct"), "floor_mib_s_median": median_of(per_round, "floor"),
        "forwarded_mib_s_median": median_of(per_round, "forward"), "ratio_median": median_of(per_round, "ratio"),
        "floor_ratio_median": median_of(per_round, "floor_ratio"), "target_ratio": 0.5,
        "per_round": per_round}
    result["port_forward"].update(st.concurrent())
    return result


def versus(old_dir, new_dir, rounds, skip_interactive):
    """Old vs new side by side, forwarded reads alternating (--vs)."""
    result = header()
    stacks = [Stack(old_dir, "old"), Stack(new_dir, "new")]
    result["builds"] = {s.name: s.bin for s in stacks}
    if not skip_interactive:
        for s in stacks:
            result.setdefault("echo_rtt_ms", {})[s.name] = s.echo()
            result.setdefault("shell_to_prompt_ms", {})[s.name] = s.shell()
    for s in stacks:
        s.start_forward()
    per_round = []
    for r in range(rounds):
        row = {"direct": round(stacks[r % 2].stream("direct"), 1),
               "floor": round(stacks[r % 2].stream("floor"), 1)}
        # Old first in even rounds, new first in odd ones.
        for s in (stacks if r % 2 == 0 else stacks[::-1]):
            row[s.name] = round(s.stream("forward"), 1)
        row["new_over_old"] = round(row["new"] / row["old"], 3)
        row["old_over_direct"] = round(row["old"] / row["direct"], 3)
        row["new_over_direct"] = round(row["new"] / row["direct"], 3)
        row["floor_over_direct"] = round(row["floor"] / row["direct"], 3)
        per_round.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    result["port_forward"] = {
        "stream_bytes": STREAM_BYTES, "rounds": rounds,
        "order": "each round: a direct read and one through the relay floor chain (of "
                 "the old and the new stack's server in turn), then both forwarded "
                 "reads, old first in even rounds and new first in odd ones",
        "floor_hops": FLOOR_HOPS, "floor_mib_s_median": median_of(per_round, "floor"),
        "floor_over_direct_median": median_of(per_round, "floor_over_direct"),
        "direct_mib_s_median": median_of(per_round, "direct"), "old_mib_s_median": median_of(per_round, "old"),
        "new_mib_s_median": median_of(per_round, "new"),
        "new_over_old_median": median_of(per_round, "new_over_old"),
        "old_over_direct_median": median_of(per_round, "old_over_direct"),
        "new_over_direct_median": median_of(per_round, "new_over_direct"),
        "target_ratio": 0.5,
        "cpu_ms_per_mib_median": {
            s.name: dict({k: round(statistics.median(v), 3) for k, v in s.cpu_ms.items()},
                         total=round(statistics.median(
                             sum(vals) for vals in zip(*s.cpu_ms.values())), 3))
            for s in stacks},
        "per_round": per_round,
        "concurrent": {s.name: s.concurrent() for s in stacks}}
    return result


def main():
    """Parses the arguments, runs, prints and writes the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vs", metavar="OLD_BIN_DIR", help="the old build, measured in turn")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--forward-only", action="store_true",
                    help="skip the echo and shell measures (which need pexpect)")
    ap.add_argument("bin_dir", nargs="?", default="build/bin")
    ap.add_argument("out_json", nargs="?")
    a = ap.parse_args()
    if a.vs:
        result = versus(a.vs, a.bin_dir, a.rounds, a.forward_only)
    else:
        result = single(a.bin_dir, a.rounds, a.forward_only)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out_json:
        with open(a.out_json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in PROCS:
            proc.kill()
        shutil.rmtree(WORK, ignore_errors=True)
