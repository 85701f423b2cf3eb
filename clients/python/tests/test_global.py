"""A global limit through the default client: a slow Redis never turns a closed limit into the
client's fail-open.

sluiced decides the global limit in a real redis-server, reached through a proxy that delays every
request by 20 or 80 ms. The client tells the sidecar its deadline (protocol version 4), so the
sidecar answers before the client's 50 ms are up: by Redis when it is quick enough, else by the
limit's closed policy, marked ``outage="closed"``.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Iterator, List, Tuple

import pytest
from conftest import short_tmpdir

from sluice import Client, Named

CONFIG = """limits:
  payments: {limit: "token_bucket:max=100000,refill_time=1h", scope: global, on_unavailable: closed}
"""


@pytest.fixture
def redis() -> Iterator[str]:
    """A redis-server on a Unix socket, without persistence; its socket path."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed; the global limit tests need it (apt-get install redis-server)")
    d = short_tmpdir()
    path = os.path.join(d, "redis.sock")
    p = subprocess.Popen([binary, "--port", "0", "--unixsocket", path, "--save", "", "--appendonly", "no",
                          "--dir", d, "--logfile", os.path.join(d, "redis.log")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(path):
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail("redis-server did not start")
            time.sleep(0.005)
        yield path
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


class DelayProxy:
    """A Unix socket in front of another that delays each chunk sent to it by ``delay`` seconds
    (replies come back at once), as a distant server would."""

    def __init__(self, target: str, delay: float) -> None:
        self.target, self.delay = target, delay
        self.path = os.path.join(short_tmpdir(), "proxy.sock")
        self.ln = socket.socket(socket.AF_UNIX)
        self.ln.bind(self.path)
        self.ln.listen(64)
        self.conns: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.ln.accept()
            except OSError:
                return
            r = socket.socket(socket.AF_UNIX)
            r.connect(self.target)
            self.conns += [c, r]
            threading.Thread(target=self._copy, args=(r, c), daemon=True).start()
            threading.Thread(target=self._delayed, args=(c, r), daemon=True).start()

    @staticmethod
    def _copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass
        dst.close()

    def _delayed(self, src: socket.socket, dst: socket.socket) -> None:
        q: "queue.Queue[Tuple[float, bytes]]" = queue.Queue()

        def send() -> None:
            try:
                while True:
                    at, b = q.get()
                    if not b:
                        break
                    time.sleep(max(0.0, at - time.monotonic()))
                    dst.sendall(b)
            except OSError:
                pass
            dst.close()
        threading.Thread(target=send, daemon=True).start()
        try:
            while True:
                b = src.recv(65536)
                q.put((time.monotonic() + self.delay, b))
                if not b:
                    return
        except OSError:
            q.put((0.0, b""))

    def close(self) -> None:
        self.ln.close()
        for c in self.conns:
            c.close()


class Stalls:
    """Measures how long this process is kept from running: a thread that sleeps 2 ms at a time
    and records the worst oversleep."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.done = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.done.is_set():
            t = time.monotonic()
            time.sleep(0.002)
            self.worst = max(self.worst, time.monotonic() - t - 0.002)

    def stop(self) -> float:
        self.done.set()
        self.t.join()
        return self.worst


@pytest.mark.parametrize("delay", [0.02, 0.08])
def test_slow_redis_never_fails_open(redis: str, make_sidecar: Callable[..., Any], delay: float) -> None:
    proxy = DelayProxy(redis, delay)
    try:
        cfg = os.path.join(short_tmpdir(), "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        sc = make_sidecar(args=["--config", cfg, "--global-redis", proxy.path])
        c = Client(sc.socket)  # the defaults: 50 ms, on_unavailable="open"
        counts = {"redis": 0, "closed": 0, "degraded": 0, "other": 0}
        lock = threading.Lock()
        stalls = Stalls()

        def work() -> None:
            for _ in range(50):
                d = c.acquire("k", Named("payments"))
                kind = "degraded" if d.degraded else "closed" if d.outage == "closed" and not d.allowed \
                    else "redis" if d.outage is None and d.allowed else "other"
                with lock:
                    counts[kind] += 1
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        worst = stalls.stop()
        c.close()
        assert counts["other"] == 0, counts  # the closed policy admits nothing
        # The sidecar answers by the middle of the client's 50 ms. A host that stops this
        # process for longer than the other half makes any client give up, whatever answers it:
        # that is the host's doing, not the sidecar's.
        assert counts["degraded"] == 0 or worst > 0.025, \
            f"the client's fail-open decided {counts}, and this process was never stopped for 25 ms (worst {worst:.3f} s)"
        if delay > 0.05:  # beyond the sidecar's Redis timeout
            assert counts["closed"] > 0, counts
    finally:
        proxy.close()


class Version4Sidecar:
    """A fake sidecar of protocol version 4: answers HELLO, and every decision as the closed outage
    policy's; ``seen`` holds (version, flags, at) of each request other than HELLO."""

    def __init__(self) -> None:
        self.seen: List[Tuple[int, int, int]] = []

    def handle(self, conn: socket.socket, n: int) -> None:
        from sluice import Decision, Hello, proto
        buf = b""
        while True:
            if len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "little"):
                more = conn.recv(65536)
                if not more:
                    return
                buf += more
                continue
            end = 4 + int.from_bytes(buf[:4], "little")
            req, buf = buf[:end], buf[end:]
            h, (op,) = proto.decode_frame(req)
            if op.code == proto.Opcode.HELLO:
                r = proto.Result(op.code, value=Hello(4, proto.MAX_FRAME_LEN, proto.MAX_BATCH, proto.MAX_KEY_LEN,
                                                       proto.MAX_MULTI, 4096, 128))
            else:
                self.seen.append((h.version, op.flags, op.at))
                r = proto.Result(op.code, value=Decision(False, 0, 10, 5_000_000, 0, 0, outage="closed"))
            conn.sendall(proto.encode_frame(proto.Kind.RESPONSE, h.id, [r], h.version))


def test_named_requests_carry_their_deadline(fake_server: Any) -> None:
    import asyncio

    from sluice import AsyncClient, proto
    srv = Version4Sidecar()
    path = fake_server(srv.handle).path
    with Client(path, timeout=0.2, on_unavailable="raise") as c:
        start = time.time_ns()
        d = c.acquire("k", "payments")
        end = time.time_ns()
        assert (d.allowed, d.outage, d.retry_after) == (False, "closed", 0.005)
        assert c.peek("k", "token_bucket:max=10,refill_time=1s").outage == "closed"
    (v, flags, at), (v2, flags2, _) = srv.seen
    assert v == 4 and flags & proto.Flags.DEADLINE and start + 200_000_000 <= at <= end + 200_000_000
    assert v2 == 1 and not flags2 & proto.Flags.DEADLINE  # a spec limit's request: as before

    async def main() -> None:
        async with AsyncClient(path, timeout=0.2, on_unavailable="raise") as ac:
            ds = await asyncio.gather(*(ac.acquire("k", "payments") for _ in range(3)))
            assert [d.outage for d in ds] == ["closed"] * 3
    del srv.seen[:]
    asyncio.run(asyncio.wait_for(main(), 20))
    assert len(srv.seen) == 3 and all(v == 4 and f & proto.Flags.DEADLINE for v, f, _ in srv.seen)
