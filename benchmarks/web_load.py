"""What one expensive request costs everyone else on ``costmodel web``: the server is started as a user starts it
(its own process, default limits but the time limit), and this prints

- a cheap request's latency (one attention layer's ``predict --gpu a100``) alone, and while an expensive one (a
  served prediction of 4,096 clients and 10,000 requests) runs: medians of N;
- the expensive request's answer and time under ``--time-limit``;
- the server process's resident memory before and after (its computations run in worker processes);
- what a full queue answers.

    python benchmarks/web_load.py [--time-limit 5] [--repeat 10]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode

CHEAP = [("gpu", "a100")]
EXPENSIVE = [
    ("gpu", "h100"),
    ("model", "llama-3-8b"),
    ("engine", "vllm"),
    ("concurrency", "4096"),
    ("num-requests", "10000"),
    ("input-len", "1024"),
    ("output-len", "8192"),
]


def get(base: str, query) -> tuple[int, float, str]:
    """(status, seconds, first line of the answer)."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{base}/api/predict?{urlencode(query)}", timeout=600) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode()
    return status, time.perf_counter() - started, body.splitlines()[0] if body else ""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "costmodel",
            "web",
            "--port",
            str(port),
            "--time-limit",
            str(args.time_limit),
            "--queue",
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        server.stdout.readline()  # its first line: it listens
        for _ in range(600):
            try:
                get(base, CHEAP)
                break
            except OSError:
                time.sleep(0.1)
        before = rss_mb(server.pid)
        alone = [get(base, CHEAP)[1] for _ in range(args.repeat)]
        print(
            f"cheap request alone: median {statistics.median(alone) * 1e3:.0f} ms "
            f"(max {max(alone) * 1e3:.0f} ms, n {len(alone)})"
        )
        answer = {}
        slow = threading.Thread(target=lambda: answer.update(r=get(base, EXPENSIVE)))
        slow.start()
        time.sleep(0.5)
        during = [get(base, CHEAP)[1] for _ in range(args.repeat) if slow.is_alive()]
        if during:
            print(
                f"cheap request while the expensive one runs: median {statistics.median(during) * 1e3:.0f} ms "
                f"(max {max(during) * 1e3:.0f} ms, n {len(during)})"
            )
        extra = [threading.Thread(target=get, args=(base, EXPENSIVE)) for _ in range(2)]
        for thread in extra:  # with the first: two running (--workers 2) and one waiting (--queue 1)
            thread.start()
        time.sleep(0.5)
        status, _, line = get(base, CHEAP)
        print(f"with 2 running and 1 waiting (--queue 1): {status} {line[:100]}")
        for thread in [slow, *extra]:
            thread.join()
        status, took, line = answer["r"]
        print(f"expensive request under --time-limit {args.time_limit:g}: {status} after {took:.2f} s: {line[:110]}")
        print(f"server resident memory: {before:.0f} MB before, {rss_mb(server.pid):.0f} MB after")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
