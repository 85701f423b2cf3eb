"""A global limit through the default client: a slow Redis never turns a closed limit into the
client's fail-open.

sluiced decides the global limit in a real redis-server, reached through a proxy that delays every
request by 20 or 80 ms. The client tells the sidecar its deadline (protocol version 4), so the
sidecar answers before the client's 50 ms are up: by Redis when it is quick enough, else by the
limit's closed policy, marked ``outage="closed"``. Every decision says the limit fails closed, so
an answer that comes too late all the same is denied by the client.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest
from conftest import short_tmpdir

from sluice import Client, Named

CONFIG = """limits:
  payments: {limit: "token_bucket:max=100000,refill_time=1h", scope: global, on_unavailable: closed}
"""


class RedisServer:
    """A redis-server on a Unix socket, without persistence."""

    def __init__(self, path: str, proc: "subprocess.Popen[bytes]") -> None:
        self.path, self.proc = path, proc

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a Unix socket, without persistence, killed at the end."""
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
        yield RedisServer(path, p)
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def redis(redis_server: RedisServer) -> str:
    """A redis-server's socket path."""
    return redis_server.path


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


@pytest.mark.default_timeout
@pytest.mark.parametrize("delay", [0.02, 0.08])
def test_slow_redis_never_fails_open(redis: str, make_sidecar: Callable[..., Any], delay: float) -> None:
    # The default client: 50 ms, on_unavailable="open". The sidecar answers by the middle of the
    # client's time; an answer that comes too late all the same (a host that stops this process or
    # the sidecar for longer than the margin) is denied by the client, which has heard that the
    # limit fails closed: no request of the limit is ever admitted by the client, whatever the
    # scheduling.
    proxy = DelayProxy(redis, delay)
    try:
        cfg = os.path.join(short_tmpdir(), "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        sc = make_sidecar(args=["--config", cfg, "--global-redis", proxy.path])
        c = Client(sc.socket)
        assert c.timeout == 0.05 and c.on_unavailable == "open"
        # Before the first answer on a name, a client cannot know how it fails: peek (which
        # admits nothing) until one comes.
        deadline = time.monotonic() + 10
        while True:
            d = c.peek("k", Named("payments"))
            if not d.degraded and d.fails_closed:
                break
            assert time.monotonic() < deadline, f"no answer of the sidecar in 10 s: {d}"
        counts = {"redis": 0, "closed": 0, "client": 0, "other": 0}
        bad: List[Any] = []
        lock = threading.Lock()

        def work() -> None:
            for _ in range(50):
                d = c.acquire("k", Named("payments"))
                kind = "client" if d.degraded and not d.allowed and d.outage == "closed" \
                    else "other" if d.degraded or not d.fails_closed \
                    else "closed" if d.outage == "closed" and not d.allowed \
                    else "redis" if d.outage is None and d.allowed else "other"
                with lock:
                    counts[kind] += 1
                    if kind == "other":
                        bad.append(d)
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        c.close()
        # Nothing admitted by the client, nothing by the closed policy, every decision marked.
        assert counts["other"] == 0, (counts, bad[:3])
        if delay > 0.05:  # beyond the sidecar's Redis timeout
            assert counts["closed"] > 0, counts
    finally:
        proxy.close()


LEASES = """limits:
  closed: {limit: "concurrency:limit=8,lease=1h", scope: global, on_unavailable: closed}
  local: {limit: "concurrency:limit=8,lease=1h", scope: global, on_unavailable: local, fallback_share: 0.5}
"""


def patient_sidecar(make_sidecar: Callable[..., Any], redis_server: RedisServer, config: str) -> Any:
    """A sidecar of config on redis_server whose Redis timeout a loaded host does not miss (the
    first call loads the library), so that no policy decides while Redis is up; killed, Redis
    refuses at once."""
    cfg = os.path.join(short_tmpdir(), "sluice.yaml")
    with open(cfg, "w") as f:
        f.write(config)
    return make_sidecar(args=["--config", cfg, "--global-redis", redis_server.path, "--global-timeout", "5s"])


def test_a_lease_decided_by_the_outage_policy_says_so(redis_server: RedisServer,
                                                       make_sidecar: Callable[..., Any]) -> None:
    # With Redis stopped, a lease of a global concurrency limit is decided by its on_unavailable
    # policy, and its answer says which (protocol version 5): closed denies, local grants from
    # this host's share. With Redis up, no mark.
    sc = patient_sidecar(make_sidecar, redis_server, LEASES)
    with Client(sc.socket, timeout=10.0, on_unavailable="raise") as c:
        up = c.lease("k", Named("closed"))
        assert up.allowed and up.outage is None, up
        redis_server.kill()
        d = c.lease("k", Named("closed"))
        assert (d.allowed, d.id, d.outage) == (False, 0, "closed"), d
        d = c.lease("k", Named("local"))
        assert d.allowed and d.id != 0 and d.outage == "local", d
        assert c.release("k", Named("local"), d) is True
        assert c.release("k", Named("closed"), up) is False  # Redis holds it: back at its lease time


MULTI_CONFIG = """limits:
  closed: {limit: "token_bucket:max=5,refill_time=1h", scope: global, on_unavailable: closed}
  local: {limit: "token_bucket:max=10,refill_time=1h", scope: global}
"""


def test_a_multi_decided_by_the_outage_policy_says_so(redis_server: RedisServer,
                                                      make_sidecar: Callable[..., Any]) -> None:
    # A multi of global limits on one hash tag (protocol version 7): each item's decision says
    # whether its limit fails closed and, with Redis stopped, that the strictest policy (closed)
    # decided; sync and asyncio alike. A client that learned from a multi that an item's limit
    # fails closed denies the multis and acquires on it that the stopped sidecar cannot answer.
    import asyncio

    from sluice import AsyncClient
    sc = patient_sidecar(make_sidecar, redis_server, MULTI_CONFIG)
    items = [("{t}:a", Named("closed")), ("{t}:b", Named("local"))]

    def marks(m: Any) -> List[Tuple[bool, Optional[str], bool]]:
        return [(d.allowed, d.outage, d.fails_closed) for d in m]

    copen = Client(sc.socket, timeout=10.0, on_unavailable="open")
    with Client(sc.socket, timeout=10.0, on_unavailable="raise") as c:
        assert marks(c.multi(items)) == [(True, None, True), (True, None, False)]
        assert marks(copen.multi(items)) == [(True, None, True), (True, None, False)]
        redis_server.kill()
        m = c.multi(items)
        assert not m and not m.degraded and marks(m) == [(False, "closed", True), (False, "closed", False)], m

    async def main() -> None:
        async with AsyncClient(sc.socket, timeout=10.0, on_unavailable="raise") as ac:
            m = await ac.multi(items)
            assert not m and marks(m) == [(False, "closed", True), (False, "closed", False)], m
    asyncio.run(asyncio.wait_for(main(), 60))

    sc.stop()
    m = copen.multi(items)
    assert not m and m.degraded and marks(m) == [(False, "closed", True)] * 2, m
    d = copen.acquire("{t}:a", Named("closed"))
    assert (d.allowed, d.degraded, d.outage) == (False, True, "closed"), d
    m = copen.multi([("{t}:b", Named("local"))])
    assert m and m.degraded, m
    copen.close()


class Version4Sidecar:
    """A fake sidecar of protocol version 4: answers HELLO, and each other request frame with the
    results ``answer(header, ops)`` returns, or not at all for None. By default every decision is
    the closed outage policy's; ``seen`` holds (version, flags, at) of each request."""

    def __init__(self) -> None:
        self.seen: List[Tuple[int, int, int]] = []

    def answer(self, h: Any, ops: List[Any]) -> Optional[List[Any]]:
        from sluice import Decision, proto
        self.seen += [(h.version, op.flags, op.at) for op in ops]
        return [proto.Result(op.code, value=Decision(False, 0, 10, 5_000_000, 0, 0, outage="closed")) for op in ops]

    def handle(self, conn: socket.socket, n: int) -> None:
        from sluice import Hello, proto
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
            h, ops = proto.decode_frame(req)
            if ops[0].code == proto.Opcode.HELLO:
                rs: Optional[List[Any]] = [proto.Result(proto.Opcode.HELLO, value=Hello(
                    4, proto.MAX_FRAME_LEN, proto.MAX_BATCH, proto.MAX_KEY_LEN, proto.MAX_MULTI, 4096, 128))]
            else:
                rs = self.answer(h, ops)
            if rs is not None:
                conn.sendall(proto.encode_frame(proto.Kind.RESPONSE, h.id, rs, h.version))


def test_named_requests_carry_their_deadline(fake_server: Any) -> None:
    import asyncio

    from sluice import AsyncClient, proto
    srv = Version4Sidecar()
    path = fake_server(srv.handle).path
    with Client(path, timeout=30.0, on_unavailable="raise") as c:  # the deadline is tested, not the timeout
        start = time.time_ns()
        d = c.acquire("k", "payments")
        end = time.time_ns()
        assert (d.allowed, d.outage, d.retry_after) == (False, "closed", 0.005)
        assert c.peek("k", "token_bucket:max=10,refill_time=1s").outage == "closed"
    (v, flags, at), (v2, flags2, _) = srv.seen
    assert v == 4 and flags & proto.Flags.DEADLINE and start + 30_000_000_000 <= at <= end + 30_000_000_000
    assert v2 == 1 and not flags2 & proto.Flags.DEADLINE  # a spec limit's request: as before

    async def main() -> None:
        async with AsyncClient(path, timeout=30.0, on_unavailable="raise") as ac:
            ds = await asyncio.gather(*(ac.acquire("k", "payments") for _ in range(3)))
            assert [d.outage for d in ds] == ["closed"] * 3
    del srv.seen[:]
    asyncio.run(asyncio.wait_for(main(), 20))
    assert len(srv.seen) == 3 and all(v == 4 and f & proto.Flags.DEADLINE for v, f, _ in srv.seen)


class FailsClosedSidecar(Version4Sidecar):
    """A fake sidecar of protocol version 4 that answers each decision as ``mode`` says when it
    reads it: "closed" (allowed, and the limit fails closed), "plain" (allowed), "error" (an
    Internal error) or "none" (never answered). HELLO is always answered."""

    mode = "closed"

    def answer(self, h: Any, ops: List[Any]) -> Optional[List[Any]]:
        from sluice import Decision, proto
        mode = self.mode
        if mode == "none":
            return None
        if mode == "error":
            return [proto.Result(op.code, proto.Status.INTERNAL, message="fake") for op in ops]
        closed = mode == "closed" and h.version >= 4
        return [proto.Result(op.code, value=Decision(True, 5, 10, -1, 0, 0, fails_closed=closed)) for op in ops]


def test_a_limit_that_fails_closed_is_denied_when_the_sidecar_does_not_answer(fake_server: Any) -> None:
    # A client that has heard that a limit fails closed denies its requests the sidecar does not
    # answer, whatever on_unavailable would do: acquire, peek, pipelines and the middlewares, sync
    # and asyncio, each denial degraded and marked outage="closed"; other limits still fail open,
    # "raise" still raises; a decision without the mark makes it forget. (The sidecar's silence
    # is what is tested, so the timeout is short; the decisions learned from are asked until one
    # is answered in time.)
    import asyncio

    from sluice import AsyncClient, Unavailable
    from test_middleware import ASGIMiddleware, WSGIMiddleware, asgi_app, call_asgi, call_wsgi, wsgi_app
    srv = FailsClosedSidecar()
    path = fake_server(srv.handle).path

    def learn(c: Client, closed: bool) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                d = c.acquire("k", "login")
                if not d.degraded and d.fails_closed == closed:
                    return
            except Unavailable as e:
                d = e  # type: ignore[assignment]
            assert time.monotonic() < deadline, f"no decision of the sidecar in 10 s: {d}"

    def denied(d: Any) -> bool:
        return (d.allowed, d.degraded, d.outage, d.fails_closed) == (False, True, "closed", True)

    def fail_open(d: Any) -> bool:
        return (d.allowed, d.degraded, d.outage, d.fails_closed) == (True, True, None, False)

    c, craise, cpipe = (Client(path, timeout=0.1, on_unavailable=p) for p in ("open", "raise", "open"))
    learn(c, True)
    learn(craise, True)
    deadline = time.monotonic() + 10
    while True:  # a pipeline's decisions teach too
        d = cpipe.pipeline().peek("k", "login").execute()[0]
        if not d.degraded and d.fails_closed:
            break
        assert time.monotonic() < deadline, d
    srv.mode = "none"
    assert denied(cpipe.acquire("k", "login"))
    for _ in range(5):  # timeouts, then the open breaker
        d = c.acquire("k", "login")
        assert denied(d) and d.retry_after_ns == -1, d
    assert denied(c.peek("k", "login"))
    assert fail_open(c.acquire("k", "other"))
    r = c.pipeline().acquire("k", "login").peek("k", "login").acquire("k", "other").execute()
    assert denied(r[0]) and denied(r[1]) and fail_open(r[2]), r
    key = lambda environ: "k"  # noqa: E731
    assert call_wsgi(WSGIMiddleware(wsgi_app, c, "login", key=key), "10.0.0.1")[0].startswith("429")
    assert call_wsgi(WSGIMiddleware(wsgi_app, c, "other", key=key), "10.0.0.1")[0].startswith("200")
    with pytest.raises(Unavailable):
        craise.acquire("k", "login")

    # A sidecar that cannot decide (an internal error): the middleware's policy denies too.
    srv.mode = "plain"
    learn(c, False)  # the breaker closes
    srv.mode = "closed"
    learn(c, True)
    srv.mode = "error"
    assert call_wsgi(WSGIMiddleware(wsgi_app, c, "login", key=key), "10.0.0.1")[0].startswith("429")

    # A decision without the mark: the client forgets.
    srv.mode = "plain"
    learn(c, False)
    srv.mode = "none"
    assert fail_open(c.acquire("k", "login"))
    for cl in (c, craise, cpipe):
        cl.close()

    async def main() -> None:
        ac = AsyncClient(path, timeout=0.1)
        srv.mode = "closed"
        while True:
            d = await ac.acquire("k", "login")
            if not d.degraded and d.fails_closed:
                break
            assert time.monotonic() < deadline, d
        srv.mode = "none"
        assert denied(await ac.acquire("k", "login"))
        assert denied(await ac.peek("k", "login"))
        assert fail_open(await ac.acquire("k", "other"))
        r = await ac.pipeline().acquire("k", "login").acquire("k", "other").execute()
        assert denied(r[0]) and fail_open(r[1]), r
        app = ASGIMiddleware(asgi_app, ac, "login", key=lambda scope: "k")
        assert (await call_asgi(app, "10.0.0.1"))[0] == 429
        srv.mode = "error"
        assert (await call_asgi(app, "10.0.0.1"))[0] == 429
        await ac.close()
    deadline = time.monotonic() + 10
    asyncio.run(asyncio.wait_for(main(), 60))
