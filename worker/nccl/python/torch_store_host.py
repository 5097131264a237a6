#!/usr/bin/env python3
"""Hosts PyTorch TCPStores for the trainctl agent, as torchrun's agent does.

Under torchrun the store that `init_process_group("env://")` uses is already
listening when the ranks start (the launcher made it; the ranks get
TORCHELASTIC_USE_AGENT_STORE=True and connect as clients). Without it, rank 0
creates the store only once it reaches init_process_group, and a rank that
gets there first is refused and retries with a randomised exponential backoff
(torch/csrc/distributed/c10d/socket.cpp, SocketConnectOp): 0.15-0.74 s lost
per job start on 2 x H200 (bench/results/ddp_probe_cuda_hold.json).

The agent (worker/torch_store.h) starts this once, with torch already
imported, so opening a store costs milliseconds. It is PyTorch's own TCPStore
(torch.distributed.TCPStore), not a reimplementation of its protocol, so it
speaks whatever protocol the installed torch speaks.

Protocol, one line per request on stdin, one reply line on stdout:
  (at start)            -> "ready <torch version>"  or exits non-zero
  open PORT WORLD_SIZE  -> "ok PORT"     | "error PORT <message>"
  close PORT            -> "closed PORT"
EOF on stdin closes every store and exits 0.
"""

import sys
from datetime import timedelta


def main():
    try:
        import torch
        from torch.distributed import TCPStore
    except Exception as e:  # no torch here: the agent goes on without stores
        print(f"cannot import torch.distributed: {e}", file=sys.stderr, flush=True)
        return 3
    stores = {}
    print(f"ready {torch.__version__}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 3 and words[0] == "open":
            port, world_size = int(words[1]), int(words[2])
            stores.pop(port, None)  # a new attempt on the same port: fresh keys
            try:
                # is_master: this process listens on PORT (every interface);
                # wait_for_workers=False: the ranks come later, as clients.
                stores[port] = TCPStore("0.0.0.0", port, world_size, True,
                                        timeout=timedelta(hours=1),
                                        wait_for_workers=False)
                print(f"ok {port}", flush=True)
            except Exception as e:
                msg = " ".join(str(e).split())
                print(f"error {port} {msg}", flush=True)
        elif len(words) == 2 and words[0] == "close":
            port = int(words[1])
            stores.pop(port, None)
            print(f"closed {port}", flush=True)
        else:
            print(f"error 0 cannot parse request {line.strip()!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
