#!/usr/bin/env python3
"""End-to-end test of interactive sessions with the real binaries on loopback.

A coordinator with two users' tokens (alice, bob), two agents with two fake
GPUs each, and the trainctl CLI driven through a real pseudo-terminal
(pexpect):
 1. `exec` into rank 1 of alice's running 2-rank gang sees that rank's RANK
    and work dir; the remote exit code is trainctl's;
 2. `exec -it`: `tty` names a /dev/pts device, `stty size` follows a resize
    of the local terminal, Ctrl-C interrupts a `sleep` without ending the
    session, `exit 5` ends it with status 5;
 3. bob's exec and port-forward into alice's job are refused (the
    coordinator's PERMISSION_DENIED: "may not");
 4. `port-forward` carries HTTP requests, several at once, to
    `python3 -m http.server` in a job, and an 8 MiB upload whole to a
    server that reads it slowly (input flow control: nothing is dropped);
 5. `shell`: the prompt comes, its exit status is trainctl's and the job
    ends with it; `shell --keep` leaves the job running for `attach`;
    killing the CLI (SIGKILL) ends the session and, after the coordinator's
    --shell-grace (1 s here), the job, which frees its GPU;
 6. `shell --idle-timeout 2s` with no input on fake (idle) GPUs: a warning
    line on the terminal, then the job ends with "idle for 2s" in describe.
Usage: exec_e2e.py BUILD_BIN_DIR. Every wait is an expect or a poll with a
deadline.
"""

import concurrent.futures
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pexpect

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
T = os.path.join(BIN, "trainctl")
WORK = tempfile.mkdtemp(prefix="trainctl-exec.")
PROCS = []
PASSED = 0
TIMEOUT = 30


def ok(msg):
    global PASSED
    PASSED += 1
    print("ok: " + msg, flush=True)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    for name in sorted(os.listdir(WORK)):
        if name.endswith(".log"):
            with open(os.path.join(WORK, name), errors="replace") as f:
                tail = f.read()[-3000:]
            print("--- " + name + "\n" + tail, file=sys.stderr)
    sys.exit(1)


def cleanup():
    for p in PROCS:
        try:
            p.kill()
            p.wait(timeout=10)
        except Exception:
            pass
    if not os.environ.get("KEEP"):
        shutil.rmtree(WORK, ignore_errors=True)


def wait_until(what, cond, deadline_s=TIMEOUT):
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            fail("timed out waiting for: " + what)
        time.sleep(0.05)  # a poll interval under a deadline, not a wait for state


def file_match(path, regex):
    try:
        with open(path, errors="replace") as f:
            return re.search(regex, f.read(), re.M)
    except FileNotFoundError:
        return None


def run(token, *args, check=True):
    r = subprocess.run([T, "--token", token, *args], capture_output=True, text=True,
                       timeout=TIMEOUT)
    if check and r.returncode != 0:
        fail("trainctl %s: rc=%d %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def job(token, job_id):
    d = json.loads(run(token, "describe", str(job_id), "-o", "json").stdout)
    return d.get("job", d)


def wait_cancelled(token, job_id, because, when):
    """Waits for job_id to be CANCELLED with `because` in its reason (fails
    naming `when` otherwise); returns the reason."""
    wait_until("job %s ends (%s)" % (job_id, when),
               lambda: job(token, job_id)["state"] == "JOB_STATE_CANCELLED")
    reason = job(token, job_id).get("reason", "")
    if because not in reason:
        fail("job %s (%s): reason %r, not %r" % (job_id, when, reason, because))
    return reason


def port_forward(token, job_id, port, log_name):
    """Starts `trainctl port-forward JOB 0:PORT` (stderr to WORK/log_name);
    returns the process and the local port it printed."""
    pf = subprocess.Popen([T, "--token", token, "port-forward", job_id, "0:%d" % port],
                          stdout=subprocess.PIPE, stderr=open(os.path.join(WORK, log_name), "w"),
                          text=True)
    PROCS.append(pf)
    line = pf.stdout.readline()
    m = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> %d" % port, line)
    if not m:
        fail("port-forward to job %s printed %r" % (job_id, line))
    return pf, int(m.group(1))


def wait_running(token, job_id, ranks=1):
    def running():
        j = job(token, job_id)
        tasks = j.get("tasks", [])
        # RUNNING, not SCHEDULED: a gang's pre-flight probes run as its tasks
        # first.
        return j.get("state") == "JOB_STATE_RUNNING" and len(tasks) == ranks and all(
            t.get("state") == "TASK_STATE_RUNNING" for t in tasks)
    wait_until("job %s running" % job_id, running)


def spawn(token, *args, **kw):
    env = dict(os.environ, TERM="xterm")
    return pexpect.spawn(T, ["--token", token, *args], env=env, encoding="utf-8",
                         timeout=TIMEOUT, dimensions=(24, 80), **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    alice, bob = secrets.token_hex(16), secrets.token_hex(16)
    with open(os.path.join(WORK, "tokens.txtpb"), "w") as f:
        f.write('tokens { token: "%s" user: "alice" }\n' % alice)
        f.write('tokens { token: "%s" user: "bob" }\n' % bob)
    coord_out = os.path.join(WORK, "coord.out")
    PROCS.append(subprocess.Popen(
        [os.path.join(BIN, "trainctl-coordinator"), "--listen", "127.0.0.1:0",
         "--state-dir", os.path.join(WORK, "state"),
         "--tokens-file", os.path.join(WORK, "tokens.txtpb"), "--shell-grace", "1s"],
        stdout=open(coord_out, "w"), stderr=open(os.path.join(WORK, "coord.log"), "w")))
    m = wait_until("coordinator", lambda: file_match(coord_out, r"listening on port (\d+)"))
    os.environ["TRAINCTL_COORDINATOR"] = "127.0.0.1:" + m.group(1)
    for node in ("n0", "n1"):
        log = os.path.join(WORK, "agent-%s.log" % node)
        PROCS.append(subprocess.Popen(
            [os.path.join(BIN, "trainctl-agent"), "--coordinator",
             os.environ["TRAINCTL_COORDINATOR"], "--node-name", node, "--fake-gpus", "2",
             "--cgroups", "off", "--container-runtime", "none", "--run-tasks-as-agent",
             "--log-dir", os.path.join(WORK, "logs-" + node)],
            stdout=open(log, "w"), stderr=subprocess.STDOUT))
        wait_until("agent " + node, lambda: file_match(log, "registered with the coordinator"))

    # 1. exec into rank 1 of a running 2-rank gang.
    wd = os.path.join(WORK, "gang-wd")
    os.makedirs(wd)
    gang = run(alice, "submit", "--nodes", "2", "--gpus-per-node", "1", "--workdir", wd, "--",
               "sleep", "1000").stdout.strip()
    wait_running(alice, gang, ranks=2)
    r = run(alice, "exec", gang, "--rank", "1", "--", "sh", "-c",
            "echo RANK=$RANK WORLD=$WORLD_SIZE; pwd")
    if "RANK=1 WORLD=2" not in r.stdout:
        fail("exec into rank 1: %r" % r.stdout)
    if r.stdout.splitlines()[-1] != wd:
        fail("exec does not run in the task's work dir: %r" % r.stdout)
    r = run(alice, "exec", gang, "--", "sh", "-c", "echo out; echo err >&2; exit 7", check=False)
    if r.returncode != 7 or r.stdout != "out\n" or "err" not in r.stderr:
        fail("exec exit code / streams: rc=%d out=%r err=%r" % (r.returncode, r.stdout, r.stderr))
    ok("exec sees rank 1's RANK and work dir; stdout, stderr and exit code 7 come back")

    # 2. exec -it through a real terminal.
    p = spawn(alice, "exec", "-it", gang, "--", "env", "PS1=PROMPT> ", "sh", "-i")
    p.expect_exact("PROMPT> ")
    p.sendline("tty")
    p.expect(r"/dev/pts/\d+")
    p.expect_exact("PROMPT> ")
    p.setwinsize(33, 111)
    # The resize travels as its own message; ask until the shell sees it.
    end = time.monotonic() + TIMEOUT
    while True:
        p.sendline("stty size")
        i = p.expect([r"\r\n33 111\r\n", r"\r\n\d+ \d+\r\n"])
        p.expect_exact("PROMPT> ")
        if i == 0:
            break
        if time.monotonic() > end:
            fail("stty size never showed 33 111 after the resize")
    p.sendline("echo start-$((1+1)); sleep 1000")
    p.expect_exact("start-2")
    # A Ctrl-C typed before the shell has handed the terminal to `sleep`
    # (tcsetpgrp) goes to the shell itself, as on any terminal: type it
    # again, a bounded number of times, until the prompt is back.
    for _ in range(20):
        p.sendcontrol("c")
        if p.expect_exact(["PROMPT> ", pexpect.TIMEOUT], timeout=1) == 0:
            break
    else:
        fail("Ctrl-C never interrupted sleep")
    p.sendline("echo still-$((40+2))")
    p.expect_exact("still-42")
    p.sendline("exit 5")
    p.expect(pexpect.EOF)
    p.close()
    if p.exitstatus != 5:
        fail("exec -it exit status %s, not 5" % p.exitstatus)
    ok("exec -it: a /dev/pts tty, stty size follows the resize, Ctrl-C interrupts sleep "
       "and the session goes on, exit 5 comes back")

    # 3. bob may not.
    r = run(bob, "exec", gang, "--", "true", check=False)
    if r.returncode == 0 or "may not" not in r.stderr:
        fail("bob's exec into alice's job: rc=%d %r" % (r.returncode, r.stderr))
    r = run(bob, "port-forward", gang, "0:80", check=False)
    if r.returncode == 0 or "may not" not in r.stderr:
        fail("bob's port-forward into alice's job: rc=%d %r" % (r.returncode, r.stderr))
    ok("bob's exec and port-forward into alice's job are refused")

    # 4. port-forward to an HTTP server in a job.
    www = os.path.join(WORK, "www")
    os.makedirs(www)
    with open(os.path.join(www, "hello.txt"), "w") as f:
        f.write("hello from the job\n")
    os.chmod(WORK, 0o755)
    port = free_port()
    web = run(alice, "submit", "--gpus", "1", "--workdir", www, "--", "python3", "-m",
              "http.server", str(port), "--bind", "127.0.0.1").stdout.strip()
    wait_running(alice, web)
    wait_until("http.server listening", lambda: _connects(port))
    pf, local = port_forward(alice, web, port, "pf.log")

    def get(_):
        with urllib.request.urlopen("http://127.0.0.1:%d/hello.txt" % local, timeout=TIMEOUT) as resp:
            return resp.status, resp.read().decode()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(get, range(16)))
    if any(r != (200, "hello from the job\n") for r in results):
        fail("port-forward answers: %r" % results[:3])
    pf.terminate()
    ok("port-forward: 16 HTTP requests, 8 at a time, reach http.server in job %s" % web)

    # An upload to a slow reader: the server takes 64 KiB at a time with a
    # pause, then answers the length and SHA-256 of what it got.
    slow = os.path.join(www, "slow_sink.py")
    with open(slow, "w") as f:
        f.write("import hashlib, socket, sys, time\n"
                "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1)\n"
                "c, _ = s.accept(); h = hashlib.sha256(); n = 0\n"
                "c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)\n"
                "while True:\n"
                "    b = c.recv(65536)\n"
                "    if not b: break\n"
                "    h.update(b); n += len(b); time.sleep(0.005)\n"
                "c.sendall(b'%d %s\\n' % (n, h.hexdigest().encode())); c.close()\n")
    sink_port = free_port()
    sink = run(alice, "submit", "--gpu-fraction", "0.5", "--workdir", www, "--", "python3",
               slow, str(sink_port)).stdout.strip()
    wait_running(alice, sink)
    wait_until("the slow sink listening", lambda: _listening(sink_port))
    pf, sink_local = port_forward(alice, sink, sink_port, "pf2.log")
    data = os.urandom(8 << 20)
    with socket.create_connection(("127.0.0.1", sink_local), timeout=TIMEOUT) as c:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        answer = c.makefile().readline().split()
    pf.terminate()
    want = [str(len(data)), hashlib.sha256(data).hexdigest()]
    if answer != want:
        fail("8 MiB through port-forward to a slow reader arrived as %r, sent %r" % (answer, want))
    ok("port-forward: 8 MiB to a slow reader in job %s arrive whole (length and SHA-256)" % sink)

    # 5. shell: prompt, exit status, the job ends with the shell.
    p = spawn(alice, "shell", "--gpus", "1", "--", "env", "PS1=SHELL> ", "sh", "-i")
    m = p.expect(r"interactive job (\d+)")
    shell_job = p.match.group(1)
    p.expect_exact("SHELL> ")
    p.sendline("echo gpu=$CUDA_VISIBLE_DEVICES")
    p.expect(r"\r\ngpu=\S+")
    p.sendline("exit 3")
    p.expect(pexpect.EOF)
    p.close()
    if p.exitstatus != 3:
        fail("shell exit status %s, not 3" % p.exitstatus)
    wait_until("shell job %s ends" % shell_job,
               lambda: job(alice, shell_job)["state"] in ("JOB_STATE_CANCELLED",
                                                         "JOB_STATE_SUCCEEDED"))
    if not job(alice, shell_job)["spec"].get("interactive"):
        fail("shell job %s is not marked interactive" % shell_job)
    ok("shell: prompt, exit 3 comes back, job %s (interactive) ends with it" % shell_job)

    p = spawn(alice, "shell", "--gpus", "1", "--keep", "--", "env", "PS1=KEPT> ", "sh", "-i")
    p.expect(r"interactive job (\d+)")
    kept = p.match.group(1)
    p.expect_exact("KEPT> ")
    p.sendline("exit 0")
    p.expect(pexpect.EOF)
    p.close()
    if job(alice, kept)["state"] != "JOB_STATE_RUNNING":
        fail("shell --keep: job %s did not keep running" % kept)
    p = spawn(alice, "exec", "-it", kept, "--", "env", "PS1=BACK> ", "sh", "-i")
    p.expect_exact("BACK> ")
    p.sendline("exit 0")
    p.expect(pexpect.EOF)
    run(alice, "cancel", kept)
    ok("shell --keep leaves job %s running to get back into" % kept)

    p = spawn(alice, "shell", "--gpus", "1", "--", "env", "PS1=KILLED> ", "sh", "-i")
    p.expect(r"interactive job (\d+)")
    killed = p.match.group(1)
    p.expect_exact("KILLED> ")
    p.kill(signal.SIGKILL)
    p.close(force=True)
    reason = wait_cancelled(alice, killed, "went away", "after its CLI was killed")
    if any(t.get("state") == "TASK_STATE_RUNNING" for t in job(alice, killed).get("tasks", [])):
        fail("killed shell's job %s still has a running task" % killed)
    ok("killing the shell's CLI ends job %s after the grace (%s)" % (killed, reason))

    p = spawn(alice, "shell", "--gpus", "1", "--idle-timeout", "2s", "--", "env", "PS1=IDLE> ",
              "sh", "-i")
    p.expect(r"interactive job (\d+)")
    idle = p.match.group(1)
    p.expect_exact("IDLE> ")
    p.expect_exact("unless you type something")
    p.expect(r"idle for 2s")
    p.expect(pexpect.EOF)
    p.close()
    if p.exitstatus != 128 + signal.SIGHUP:
        fail("idle shell exit status %s, not %d" % (p.exitstatus, 128 + signal.SIGHUP))
    reason = wait_cancelled(alice, idle, "idle for 2s", "idle")
    ok("--idle-timeout 2s: a warning on the terminal, then job %s ends (%s)" % (idle, reason))

    # 7. A coordinator restart ends every session but not the interactive
    #    jobs: their idle clocks start again from the restart, so a shell
    #    nobody comes back to still gives its GPU up.
    p = spawn(alice, "shell", "--gpus", "1", "--idle-timeout", "3s", "--", "env", "PS1=R> ",
              "sh", "-i")
    p.expect(r"interactive job (\d+)")
    held = p.match.group(1)
    p.expect_exact("R> ")
    coordinator = PROCS[0]
    coordinator.kill()
    coordinator.wait()
    # The CLI says the job is not the session, and how to get back in.
    p.expect_exact("trainctl attach %s gets back in" % held)
    p.expect(pexpect.EOF)
    p.close()
    with open(coord_out, "w"):
        pass  # the new coordinator's lines only
    PROCS.append(subprocess.Popen(
        [os.path.join(BIN, "trainctl-coordinator"),
         "--listen", os.environ["TRAINCTL_COORDINATOR"],
         "--state-dir", os.path.join(WORK, "state"),
         "--tokens-file", os.path.join(WORK, "tokens.txtpb"), "--shell-grace", "1s"],
        stdout=open(coord_out, "w"), stderr=open(os.path.join(WORK, "coord2.log"), "w")))
    wait_until("restarted coordinator", lambda: file_match(coord_out, r"listening on port"))
    reason = wait_cancelled(alice, held, "idle for 3s", "after the restart")
    ok("after a coordinator restart job %s, with no session left, idles out (%s)" % (held, reason))

    print("%d passed, 0 failed" % PASSED)


def _listening(port):
    """Whether something listens on 127.0.0.1:port, without connecting
    (the slow sink takes one connection only): /proc/net/tcp's LISTEN
    state (0A)."""
    with open("/proc/net/tcp") as f:
        return any(line.split()[1].endswith(":%04X" % port) and line.split()[3] == "0A"
                   for line in f.readlines()[1:])


def _connects(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
