#!/usr/bin/env python3
"""PyTorch's side of the rendezvous fan-out (bench/rendezvous/fanout.cc).

N-1 clients of torch.distributed.TCPStore (the store torchrun and
init_process_group(env://) use at MASTER_ADDR:MASTER_PORT) wait for one key
that the server rank sets, the way ranks wait for rank 0's ncclUniqueId. The
same rounds as trainctl-bench-rendezvous:

  publish_after_last_request  every client has called store.get(key) (it
                              blocks until the key exists), then rank 0 sets it;
  publish_first               rank 0 sets the key, then the clients get it.

Figure: from the last client's request to every client holding the value.
Clients are threads (each its own TCPStore, i.e. its own connection) spread
over worker processes; every client is connected before a round starts.
Times are time.time_ns() on one host. Writes JSON in the schema of
FanoutResult (proto/trainctl/v1/bench.proto), system "torch_tcpstore".

  python3 tcpstore_fanout.py --ranks 1024,4096 --out tcpstore.json
"""
import argparse
import datetime
import json
import multiprocessing as mp
import os
import resource
import sys
import threading
import time

ID_BYTES = 128


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


def percentile(values, p):
    s = sorted(values)
    rank = max(1, min(len(s), -(-len(s) * p // 100)))
    return s[int(rank) - 1]


def summarize_us(us):
    if not us:
        return {"count": 0}
    return {"count": len(us), "p50_us": percentile(us, 50), "p90_us": percentile(us, 90),
            "p99_us": percentile(us, 99), "max_us": max(us), "mean_us": sum(us) / len(us)}


def worker(host, port, clients, key, connected, issued, go, results, timeout_s):
    """Runs `clients` TCPStore clients as threads; puts [(issue_ns, done_ns, ok)]."""
    import torch.distributed as dist
    raise_nofile()
    out = []
    lock = threading.Lock()

    def one():
        try:
            store = dist.TCPStore(host, port, is_master=False,
                                  timeout=datetime.timedelta(seconds=timeout_s))
        except Exception as e:  # noqa: BLE001 - reported as an error row
            with connected.get_lock():
                connected.value += 1
            with lock:
                out.append((0, 0, False, "connect: %s" % e))
            return
        with connected.get_lock():
            connected.value += 1
        go.wait()
        with issued.get_lock():
            issued.value += 1
        t0 = time.time_ns()
        ok, err = True, ""
        try:
            ok = len(store.get(key)) == ID_BYTES
        except Exception as e:  # noqa: BLE001
            ok, err = False, str(e)
        t1 = time.time_ns()
        with lock:
            out.append((t0, t1, ok, err))

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(out)


def run_round(server, host, n, mode, procs, timeout_s):
    ctx = mp.get_context("spawn")
    key = "nccl_unique_id/%d/%s" % (n, mode)
    clients = n - 1
    procs = max(1, min(procs, clients))
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    connected, issued = ctx.Value("i", 0), ctx.Value("i", 0)
    go, results = ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(host, server.port, c, key, connected, issued,
                                           go, results, timeout_s)) for c in per if c]
    for p in ps:
        p.start()
    deadline = time.time() + timeout_s
    while connected.value < clients and time.time() < deadline:
        time.sleep(0.01)
    value = b"\x5a" * ID_BYTES
    t_pub = 0
    if mode == "publish_first":
        t_pub = time.time_ns()
        server.set(key, value)
        go.set()
    else:
        go.set()
        while issued.value < clients and time.time() < deadline:
            time.sleep(0.0002)
        t_pub = time.time_ns()
        server.set(key, value)
    rows = []
    for _ in ps:
        rows.extend(results.get(timeout=timeout_s))
    for p in ps:
        p.join()
    good = [r for r in rows if r[0] > 0]
    errors = sum(1 for r in rows if not r[2])
    last_issue = max(r[0] for r in good)
    last_done = max(r[1] for r in good)
    first_error = next((r[3] for r in rows if not r[2]), "")
    rnd = {"ranks": n, "mode": mode,
           "last_request_to_all_ms": (last_done - last_issue) / 1e6,
           "per_rank": summarize_us([(r[1] - r[0]) / 1e3 for r in good]),
           "errors": errors, "connections": clients, "worker_processes": len(ps)}
    if mode == "publish_after_last_request":
        rnd["publish_to_all_ms"] = (last_done - t_pub) / 1e6
    if first_error:
        rnd["first_error"] = first_error
    return rnd


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1024,4096")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 4,
                    help="worker processes the client threads are spread over")
    ap.add_argument("--timeout-s", type=float, default=120)
    ap.add_argument("--out", default="-")
    ap.add_argument("--modes", default="publish_after_last_request,publish_first",
                    help="rounds to run, comma-separated")
    args = ap.parse_args()
    raise_nofile()
    import torch
    import torch.distributed as dist
    load0 = os.getloadavg()[0]
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=args.timeout_s))
    result = {"system": "torch_tcpstore", "torch_version": torch.__version__,
              "host": {"cores": os.cpu_count(), "load_avg_1m_start": load0,
                       "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
              "rounds": []}
    for n in [int(x) for x in args.ranks.split(",")]:
        for mode in args.modes.split(","):
            rnd = run_round(server, "127.0.0.1", n, mode, args.procs, args.timeout_s)
            result["rounds"].append(rnd)
            print("%5d ranks %-27s last request -> all holding %8.2f ms  per rank p50 "
                  "%.2f ms p99 %.2f ms  errors %d" % (
                      n, mode, rnd["last_request_to_all_ms"],
                      rnd["per_rank"].get("p50_us", 0) / 1e3,
                      rnd["per_rank"].get("p99_us", 0) / 1e3, rnd["errors"]),
                  file=sys.stderr, flush=True)
    result["host"]["load_avg_1m_end"] = os.getloadavg()[0]
    text = json.dumps(result, indent=1)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if all(r["errors"] == 0 for r in result["rounds"]) else 1


if __name__ == "__main__":
    sys.exit(main())
