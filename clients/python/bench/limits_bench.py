#!/usr/bin/env python3
"""The limits storage's cost per decision, beside limits' memory and Redis storages.

For each strategy (fixed window, moving window, sliding window counter) it
times a strategy's ``hit`` on 100 keys in turn (a limit no key reaches, so
every hit is admitted and written) and its ``get_window_stats``, with:

- memory: limits' in-process storage (no I/O; one process's counts only);
- sluice: this storage on a real sluiced;
- redis: limits' Redis storage on a local redis-server over a Unix socket
  (if redis-server is on PATH);
- and, as the floor of any sluice row, ``Client.acquire`` of a token bucket.

The rows are measured in --rounds interleaved rounds; each row's figure is
the median of its rounds, "/ acquire" divides it by the floor's median.
Needs limits and redis-py (make setup installs them into .venv):

    SLUICED=bin/sluiced .venv/bin/python clients/python/bench/limits_bench.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from limits import RateLimitItemPerDay  # noqa: E402
from limits.storage import storage_from_string  # noqa: E402
from limits.strategies import (  # noqa: E402
    FixedWindowRateLimiter, MovingWindowRateLimiter, SlidingWindowCounterRateLimiter,
)

import sluice.limits_storage  # noqa: E402,F401
from sluice import Client, TokenBucket  # noqa: E402

KEYS = 100
STRATEGIES = {"fixed-window": FixedWindowRateLimiter, "moving-window": MovingWindowRateLimiter,
              "sliding-window-counter": SlidingWindowCounterRateLimiter}


def start(argv: List[str], sock: str, cwd: str) -> subprocess.Popen:
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return p
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{argv[0]} did not start")
            time.sleep(0.01)


def per_call(fn: Callable[[int], Any], seconds: float) -> float:
    """Microseconds per call of fn(i), called for about ``seconds``."""
    n, i, t0 = 0, 0, time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(200):
            fn(i)
            i += 1
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            return (now - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="per row and round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sluiced = os.environ.get("SLUICED") or sys.exit("SLUICED names the sluiced binary")
    tmp = tempfile.mkdtemp(prefix="slb", dir="/tmp")
    procs = []
    try:
        os.makedirs(os.path.join(tmp, "var"))
        sock = os.path.join(tmp, "s.sock")
        procs.append(start([os.path.abspath(sluiced), "--state", os.path.join(tmp, "s.state"), "--socket", sock,
                            "--slots", "65536"], sock, tmp))
        storages: Dict[str, Any] = {"memory": storage_from_string("memory://"),
                                    "sluice": storage_from_string("sluice://" + sock, timeout=10)}
        redis = shutil.which("redis-server")
        if redis:
            rsock = os.path.join(tmp, "r.sock")
            procs.append(start([redis, "--port", "0", "--unixsocket", rsock, "--save", "", "--appendonly", "no"],
                               rsock, tmp))
            storages["redis"] = storage_from_string("redis+unix://" + rsock)
        item = RateLimitItemPerDay(10**9)
        client = Client(sock, timeout=10)
        floor_limit = TokenBucket(10**9, "24h")
        rows: Dict[str, Callable[[int], Any]] = {
            "Client.acquire (the floor)": lambda i: client.acquire(f"floor:{i % KEYS}", floor_limit)}
        for sname, strategy in STRATEGIES.items():
            for name, st in storages.items():
                lim = strategy(st)
                # Keys of their own per strategy: Redis keeps a fixed and a moving window of one
                # key under one name, of two types.
                rows[f"{sname} hit, {name}"] = lambda i, lim=lim, s=sname: lim.hit(item, s, str(i % KEYS))
                rows[f"{sname} get_window_stats, {name}"] = (
                    lambda i, lim=lim, s=sname: lim.get_window_stats(item, s, str(i % KEYS)))
        results: Dict[str, List[float]] = {r: [] for r in rows}
        for _ in range(args.rounds):
            for r, fn in rows.items():
                results[r].append(per_call(fn, args.seconds))
        floor = statistics.median(results["Client.acquire (the floor)"])
        print(f"| row | us per call (median of {args.rounds}) | calls/s | / acquire |")
        print("|---|---:|---:|---:|")
        for r, us in results.items():
            m = statistics.median(us)
            print(f"| {r} | {m:.1f} | {1e6 / m:,.0f} | {m / floor:.2f} |")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
