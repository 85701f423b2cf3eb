#!/usr/bin/env python3
"""Benchmark the Python client against a real sluiced, beside bare-socket baselines.

Rows (latency per call; per batch for the batched rows):

- echo, bare socket: a plain Python Unix-socket round trip (sendall, then recv
  until the answer is in) with the byte counts of an acquire's request and
  answer, against a trivial echo server in a subprocess: the floor for any
  Python client.
- raw frame to sluiced: the same loop sending a prebuilt ACQUIRE frame to sluiced
  itself: the server's share, with no client code.
- serial acquire: Client.acquire, one after another, one thread.
- echo, asyncio streams / async serial acquire: the same for asyncio
  (StreamWriter.write + readexactly, then AsyncClient.acquire).
- 64-op rows: one frame of --batch acquires (echo and raw as above), a
  Client.pipeline() of --batch acquires built and executed per batch, and
  --batch concurrent AsyncClient.acquire tasks (asyncio.gather).

The host's scheduling drifts (this matters on small VMs), so the rows are
measured in --rounds interleaved rounds and the percentiles taken over all
of them. "/ echo" and "/ raw" divide a row's p50 by the p50 of the echo and
the raw-sluiced row of the same message sizes.

    python3 clients/python/bench/bench.py                           # builds and starts its own sluiced
    SLUICED=bin/sluiced python3 clients/python/bench/bench.py --seconds 1
    python3 clients/python/bench/bench.py --socket var/sluice.sock  # a running sidecar
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable, Dict, List, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

from sluice import AsyncClient, Client, Decision, TokenBucket, proto  # noqa: E402
from sluice import _answers, _calls  # noqa: E402

# The echo server: on every connection, for every request of REQ bytes, answer RESP bytes.
ECHO = r"""
import socket, sys, threading
path, req, resp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(8)
print("ready", flush=True)
out = b"x" * resp
def serve(c):
    buf = bytearray(req); view = memoryview(buf)
    while True:
        got = 0
        while got < req:
            n = c.recv_into(view[got:])
            if not n:
                return
            got += n
        c.sendall(out)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""

LIMIT = TokenBucket(max=(1 << 62), refill_time=3600)  # never denies: measures the round trip only
KEY = "bench:acquire"


def start_echo(tmp: str, req: int, resp: int) -> Tuple[subprocess.Popen, str]:  # type: ignore[type-arg]
    path = os.path.join(tmp, f"echo{req}.sock")
    p = subprocess.Popen([sys.executable, "-c", ECHO, path, str(req), str(resp)], stdout=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.readline()
    return p, path


def start_sluiced(tmp: str) -> Tuple[subprocess.Popen, str]:  # type: ignore[type-arg]
    binary = os.environ.get("SLUICED")
    if binary:
        binary = os.path.abspath(binary)  # sluiced runs in its own directory
    else:
        binary = os.path.join(tmp, "sluiced")
        subprocess.run(["go", "build", "-o", binary, "./cmd/sluiced"], cwd=REPO, check=True)
    sock = os.path.join(tmp, "s.sock")
    os.makedirs(os.path.join(tmp, "var"), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    p = subprocess.Popen([binary, "--state", os.path.join(tmp, "s.state"), "--socket", sock,
                          "--slots", "65536", "--log-level", "warn"],
                         cwd=tmp, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("bench: sluiced did not start")
        time.sleep(0.01)
    return p, sock


def roundtrip(path: str, payload: bytes, resp: int) -> Tuple[Callable[[], None], socket.socket]:
    """A bare round trip: send payload, read resp bytes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)

    def once() -> None:
        s.sendall(payload)
        got = 0
        while got < resp:
            got += len(s.recv(65536))
    return once, s


def timed(fn: Callable[[], Any], seconds: float, lat: List[int]) -> float:
    """Call fn for about `seconds` after a warm-up, appending each call's ns to lat; return the time spent."""
    for _ in range(100):
        fn()
    clock = time.perf_counter_ns
    start = t = clock()
    end = start + int(seconds * 1e9)
    while t < end:
        fn()
        t2 = clock()
        lat.append(t2 - t)
        t = t2
    return (t - start) / 1e9


async def atimed(fn: Callable[[], Awaitable[Any]], seconds: float, lat: List[int]) -> float:
    for _ in range(100):
        await fn()
    clock = time.perf_counter_ns
    start = t = clock()
    end = start + int(seconds * 1e9)
    while t < end:
        await fn()
        t2 = clock()
        lat.append(t2 - t)
        t = t2
    return (t - start) / 1e9


class FakeSocket:
    """Stands in for the client's socket: answers every frame with a canned decision frame of its id
    and version (as the sidecar answers each frame in its version), so timing the client against it
    measures the client's own work, without I/O."""

    def __init__(self, count: int) -> None:
        d = proto.encode_decision(proto.Opcode.ACQUIRE, Decision(True, 1, 2, -1, 3, 0))
        self.reply = bytearray(proto.frame(proto.Kind.RESPONSE, 0, count, d * count))
        self.version = proto.VERSION
        self.id = b"\0\0\0\0"

    def sendall(self, payload: bytes) -> None:
        self.version = payload[4]
        self.id = payload[8:12]

    def recv(self, n: int) -> bytes:
        self.reply[4] = self.version
        self.reply[8:12] = self.id
        return bytes(self.reply)

    def close(self) -> None:
        pass


class Case(NamedTuple):
    name: str
    per: int  # decisions per call
    sizes: str  # bytes out/in
    echo: Optional[str]  # the rows this one is compared with
    raw: Optional[str]
    run: Callable[[float, List[int]], float]  # measure for s seconds into a list; return the time spent


def pct(lat: List[int], q: float) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", help="a running sluiced's socket (default: start one)")
    ap.add_argument("--seconds", type=float, default=3.0, help="time per row, over all rounds")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--batch", type=int, default=64, help="operations per batch")
    args = ap.parse_args()
    b = args.batch

    tmp = tempfile.mkdtemp(prefix="slb", dir="/tmp")
    procs: List[subprocess.Popen] = []  # type: ignore[type-arg]
    socks: List[socket.socket] = []
    try:
        path = args.socket
        if path is None:
            p, path = start_sluiced(tmp)
            procs.append(p)
        one_frame = _calls.decide_frame(1, 3, KEY, LIMIT, 1, None, False)
        many_frame = _calls.pack([_calls.item_call(3, KEY, LIMIT, 1, None, False)] * b, 1).payload
        one_resp, many_resp = _answers.DECISION_FRAME_SIZE, 12 + b * (2 + 41)
        e1, echo1 = start_echo(tmp, len(one_frame), one_resp)
        eb, echob = start_echo(tmp, len(many_frame), many_resp)
        procs += [e1, eb]

        def bare(path: str, payload: bytes, resp: int) -> Callable[[float, List[int]], float]:
            once, s = roundtrip(path, payload, resp)
            socks.append(s)
            return lambda secs, lat: timed(once, secs, lat)

        client = Client(path, on_unavailable="raise", timeout=1.0)

        def serial(secs: float, lat: List[int]) -> float:
            return timed(lambda: client.acquire(KEY, LIMIT), secs, lat)

        def pipelined(secs: float, lat: List[int], cl: Client = client) -> float:
            def once() -> None:
                pipe = cl.pipeline()  # built per batch, as an application would
                for _ in range(b):
                    pipe.acquire(KEY, LIMIT)
                pipe.execute()
            return timed(once, secs, lat)

        def cpu_only(count: int) -> Client:
            fake = Client(path)
            fake._sock = FakeSocket(count)  # type: ignore[assignment]
            return fake
        fake1, fakeb = cpu_only(1), cpu_only(b)

        def asyncio_echo(secs: float, lat: List[int]) -> float:
            async def go() -> float:
                r, w = await asyncio.open_unix_connection(echo1)
                payload = b"r" * len(one_frame)

                async def once() -> None:
                    w.write(payload)
                    await r.readexactly(one_resp)
                try:
                    return await atimed(once, secs, lat)
                finally:
                    w.close()
            return asyncio.run(go())

        Body = Callable[[AsyncClient], Callable[[], Awaitable[Any]]]

        def with_aclient(body: Body) -> Callable[[float, List[int]], float]:
            def run(secs: float, lat: List[int]) -> float:
                async def go() -> float:
                    async with AsyncClient(path, on_unavailable="raise", timeout=1.0) as ac:
                        return await atimed(body(ac), secs, lat)
                return asyncio.run(go())
            return run

        one, many = f"{len(one_frame)}/{one_resp}", f"{len(many_frame)}/{many_resp}"
        echo_1, raw_1, echo_b, raw_b = ("echo, bare socket", "raw frame to sluiced, no client",
                                        f"echo, bare socket, {b}-op sizes", f"raw {b}-op frame to sluiced, no client")
        cases = [
            Case(echo_1, 1, one, None, None, bare(echo1, one_frame, one_resp)),
            Case(raw_1, 1, one, echo_1, None, bare(path, one_frame, one_resp)),
            Case("serial acquire", 1, one, echo_1, raw_1, serial),
            Case("serial acquire, client CPU only (fake socket)", 1, one, None, None,
                 lambda secs, lat: timed(lambda: fake1.acquire(KEY, LIMIT), secs, lat)),
            Case("echo, asyncio streams", 1, one, None, None, asyncio_echo),
            Case("async serial acquire", 1, one, "echo, asyncio streams", raw_1,
                 with_aclient(lambda ac: lambda: ac.acquire(KEY, LIMIT))),
            Case(echo_b, b, many, None, None, bare(echob, many_frame, many_resp)),
            Case(raw_b, b, many, echo_b, None, bare(path, many_frame, many_resp)),
            Case(f"pipelined acquire, batches of {b}", b, many, echo_b, raw_b, pipelined),
            Case(f"pipelined acquire, batches of {b}, client CPU only (fake socket)", b, many, None, None,
                 lambda secs, lat: pipelined(secs, lat, fakeb)),
            Case(f"async concurrent acquire, {b} tasks", b, "-", echo_b, raw_b,
                 with_aclient(lambda ac: lambda: asyncio.gather(*[ac.acquire(KEY, LIMIT) for _ in range(b)]))),
        ]
        lat: Dict[str, List[int]] = {c.name: [] for c in cases}
        spent: Dict[str, float] = {c.name: 0.0 for c in cases}
        for _ in range(args.rounds):
            for case in cases:
                spent[case.name] += case.run(args.seconds / args.rounds, lat[case.name])

        p50 = {name: pct(v, 0.5) for name, v in lat.items()}
        print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.seconds:g} s per row "
              f"in {args.rounds} interleaved rounds\n")
        print("| case | bytes out/in | decisions/s | p50 us | p99 us | p50 / echo | p50 / raw |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for c in cases:
            rate = len(lat[c.name]) * c.per / spent[c.name]
            vs_echo = f"{p50[c.name] / p50[c.echo]:.2f}" if c.echo else "-"
            vs_raw = f"{p50[c.name] / p50[c.raw]:.2f}" if c.raw else "-"
            print(f"| {c.name} | {c.sizes} | {rate:,.0f} | {p50[c.name]:.1f} | {pct(lat[c.name], 0.99):.1f} "
                  f"| {vs_echo} | {vs_raw} |")
        client.close()
    finally:
        for s in socks:
            s.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
