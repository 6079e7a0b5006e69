"""`make bench`: what the relay costs (corral.core.relay), on an idle local cluster of one worker.

- keystroke round trip: one byte typed into a `cat` on a raw terminal (`stty raw -echo; cat`) and read back,
  ECHOES times, through the controller and the worker, beside the same on a local PTY in the same run;
- port-forward throughput: TRANSFER bytes sent through a forwarded port to a sink in the task, against the same
  sink reached directly (ratio; target >= TARGET_RATIO);
- `corral shell` to a prompt: from the command's start to the shell's first prompt on its terminal.

Prints a table and writes bench/results/interactive.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pexpect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corral.client.relay import PortForwarder, Relay  # noqa: E402
from tests.e2e.cluster import Cluster, free_port  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

ECHOES = 200
TRANSFER = 100 * 1024 * 1024
TARGET_RATIO = 0.5
PROMPT = "READY> "
SINK = "import socket,sys\ns=socket.create_server(('127.0.0.1',int(sys.argv[1])))\nwhile True:\n c,_=s.accept()\n" \
       " while c.recv(1<<20): pass\n c.sendall(b'done'); c.close()\n"


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def relay_echoes(relay: Relay, job_id: int) -> list[float]:
    """Round trips of one byte on the job's terminal, running `stty raw -echo; cat`."""
    async with relay.terminal(job_id) as channel:
        await channel.send(b"stty raw -echo; echo go; exec cat\n")
        seen = b""
        while b"go\r\n" not in seen and b"go\n" not in seen:
            message = await channel.recv()
            seen += message[1:] if isinstance(message, bytes) else b""
        samples = []
        for _ in range(ECHOES):
            start = time.perf_counter()
            await channel.send(b"x")
            while not (isinstance(message := await channel.recv(), bytes) and b"x" in message):
                pass
            samples.append(time.perf_counter() - start)
        return samples


def local_echoes() -> list[float]:
    """The same on a local PTY: the floor any terminal has."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("sh", ["sh", "-c", "stty raw -echo; echo go; exec cat"])
    seen = b""
    while b"go" not in seen:
        seen += os.read(fd, 1024)
    samples = []
    for _ in range(ECHOES):
        start = time.perf_counter()
        os.write(fd, b"x")
        while b"x" not in os.read(fd, 1024):
            pass
        samples.append(time.perf_counter() - start)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return samples


def send_all(port: int) -> float:
    """Seconds to push TRANSFER bytes to the sink at `port` and hear it got them all."""
    block = b"\0" * (1 << 20)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(TRANSFER // len(block)):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(4) == b"done"
    return time.perf_counter() - start


async def forwarded_transfer(relay: Relay, job_id: int, port: int) -> float:
    async with PortForwarder(relay, job_id, port) as forwarder:
        return await asyncio.to_thread(send_all, forwarder.bound[1])


def shell_to_prompt(cluster: Cluster) -> float:
    env = {**os.environ, "CORRAL_URL": cluster.url, "CORRAL_TOKEN": cluster.admin_token}
    start = time.perf_counter()
    child = pexpect.spawn(sys.executable, ["-m", "corral", "shell", "--no-workdir", "--env", f"PS1={PROMPT}", "--",
                                           "/bin/sh"], env=env, timeout=120, encoding="utf-8")
    child.expect_exact(PROMPT)
    elapsed = time.perf_counter() - start
    child.sendline("exit")
    child.expect(pexpect.EOF)
    return elapsed


def _listening(port: int) -> bool:
    """Whether the sink accepts connections (a probe sends nothing; the sink answers `done` and closes)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(4) == b"done"
    except OSError:
        return False


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        cluster = Cluster(Path(tmp), heartbeat_interval=2.0, loss_timeout=30)
        cluster.start_controller()
        cluster.start_worker("bench", 8)
        relay = Relay(cluster.url, cluster.admin_token)
        try:
            shell_to_prompt(cluster)  # warm-up: imports and the first job's paths
            to_prompt = statistics.median(shell_to_prompt(cluster) for _ in range(5))
            terminal = cluster.submit(command=["/bin/sh"], interactive=True, env={"PS1": ""})
            port = free_port()
            sink = cluster.submit(command=[sys.executable, "-c", SINK, str(port)])
            cluster.wait_running(terminal)
            cluster.wait_running(sink)
            through = asyncio.run(relay_echoes(relay, terminal))
            local = local_echoes()
            wait_for(lambda: _listening(port), 30, "the sink to listen")
            direct = send_all(port)
            forwarded = asyncio.run(forwarded_transfer(relay, sink, port))
        finally:
            cluster.stop(strict=False)  # a slow stop is said, the figures still printed
    results = {
        "keystroke_relay_ms": {"median": statistics.median(through) * 1000, "p99": percentile(through, 0.99) * 1000},
        "keystroke_local_pty_ms": {"median": statistics.median(local) * 1000, "p99": percentile(local, 0.99) * 1000},
        "echoes": ECHOES,
        "port_forward_mb_s": TRANSFER / forwarded / 1e6, "direct_mb_s": TRANSFER / direct / 1e6,
        "port_forward_ratio": direct / forwarded, "target_ratio": TARGET_RATIO,
        "shell_to_prompt_s": to_prompt,
    }
    rows = [
        ("keystroke round trip, relay", f"median {results['keystroke_relay_ms']['median']:.2f} ms, "
                                        f"p99 {results['keystroke_relay_ms']['p99']:.2f} ms (n={ECHOES})"),
        ("keystroke round trip, local PTY", f"median {results['keystroke_local_pty_ms']['median']:.3f} ms, "
                                            f"p99 {results['keystroke_local_pty_ms']['p99']:.3f} ms"),
        ("port-forward, 100 MB", f"{results['port_forward_mb_s']:.0f} MB/s vs {results['direct_mb_s']:.0f} MB/s "
                                 f"direct: {results['port_forward_ratio']:.0%} (target >= {TARGET_RATIO:.0%})"),
        ("corral shell to a prompt", f"{to_prompt:.2f} s (median of 5)"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    out = ROOT / "bench" / "results" / "interactive.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
