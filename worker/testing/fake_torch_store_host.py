#!/usr/bin/env python3
"""Stand-in for worker/nccl/python/torch_store_host.py in torch_store_test,
for machines without PyTorch: the same line protocol, but each "store" is a
plain listening TCP socket. --no-torch: exits 3 before "ready" (as the real
one does without torch). --hang: ready, then never answers."""
import socket
import sys


def main():
    if "--no-torch" in sys.argv:
        print("cannot import torch.distributed: No module named 'torch'",
              file=sys.stderr, flush=True)
        return 3
    print("ready 0.0-fake", flush=True)
    stores = {}
    for line in sys.stdin:
        if "--hang" in sys.argv:
            continue
        words = line.split()
        if words[0] == "open":
            port = int(words[1])
            old = stores.pop(port, None)
            if old:
                old.close()
            s = socket.socket()
            try:
                s.bind(("0.0.0.0", port))
                s.listen(16)
            except OSError as e:
                s.close()
                print(f"error {port} The server socket has failed to listen: {e}", flush=True)
                continue
            stores[port] = s
            print(f"ok {port}", flush=True)
        elif words[0] == "close":
            port = int(words[1])
            s = stores.pop(port, None)
            if s:
                s.close()
            print(f"closed {port}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
