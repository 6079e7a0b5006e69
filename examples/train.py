"""A gang member, as `corral submit --gang --replicas 2 --wait -- python examples/train.py` runs it.

The tasks meet at MASTER_ADDR:MASTER_PORT (task 0 listens, the others connect), as a distributed
training job's processes do, then each leaves a note of where it ran in examples/out/rank-N.txt.
Only the standard library: it runs on any worker.
"""

import os
import socket
import time
from pathlib import Path

RANK, WORLD_SIZE = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
MASTER = (os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500")))
TIMEOUT = 60.0


def rendezvous() -> None:
    """Return once every member of the gang is up."""
    if WORLD_SIZE == 1:
        return
    if RANK == 0:
        with socket.create_server(("0.0.0.0", MASTER[1])) as server:
            server.settimeout(TIMEOUT)
            peers = [server.accept()[0] for _ in range(WORLD_SIZE - 1)]
            for peer in peers:
                peer.sendall(b"go")
                peer.close()
        return
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            with socket.create_connection(MASTER, timeout=5) as master:
                master.recv(2)
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


rendezvous()
notes = Path(__file__).resolve().parent / "out"
notes.mkdir(exist_ok=True)
(notes / f"rank-{RANK}.txt").write_text(os.getcwd())
print(f"rank {RANK} of {WORLD_SIZE} trained in {os.getcwd()}")
