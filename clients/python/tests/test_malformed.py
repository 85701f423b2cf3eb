"""Replies no sidecar should send, from a fake server: a clear exception, never a hang.

Each fake server reads one request frame per exchange and answers with the
bytes under test. The clients use a short timeout; a test that hung would
blow it (and the 20 s guard on the async ones).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable, Optional, Tuple, Type

import pytest
from conftest import read_frame

from sluice import (
    AsyncClient, BadVersion, Busy, Client, ProtocolError, Status, TokenBucket, Unavailable, proto,
)
from sluice.results import Decision

LIMIT = TokenBucket(max=10, refill_time=3600)
TIMEOUT = 0.3


def timeout_for(exc: Type[Exception]) -> Tuple[float, float]:
    """The client's timeout for a case, and the most the call may take. A case that answers
    nothing (Unavailable) waits for the client's short timeout; one the server answers gets a
    timeout a loaded host does not reach, and must fail on the answer well before it."""
    if exc is Unavailable:
        return TIMEOUT, TIMEOUT + 1.0
    return 10.0, 5.0


def decision_frame(fid: int, remaining: int = 9, count: int = 1) -> bytes:
    d = Decision(True, remaining, 10, -1, 3_600_000_000_000, 0)
    body = proto.encode_decision(proto.Opcode.ACQUIRE, d) * count
    return proto.frame(proto.Kind.RESPONSE, fid, count, body)


def request_id(req: bytes) -> int:
    return proto.parse_header(req).id


def serve(reply: Callable[[bytes], bytes], then: str = "close") -> Callable[[socket.socket, int], None]:
    """Answer the first request with reply(request), then close, linger (0.1 s) and close, hang,
    or serve correctly."""

    def handle(conn: socket.socket, n: int) -> None:
        req = read_frame(conn)
        if req is None:
            return
        conn.sendall(reply(req))
        if then == "hang":
            time.sleep(3)
        elif then == "linger":
            time.sleep(0.1)
        elif then == "serve":
            good(conn, 1)
        conn.close()
    return handle


def good(conn: socket.socket, n: int) -> None:
    """A correct server: every ACQUIRE answered, remaining counting down."""
    remaining = 9
    while True:
        req = read_frame(conn)
        if req is None:
            return
        conn.sendall(decision_frame(request_id(req), remaining))
        remaining -= 1


CASES = [
    # name, reply, then, exception
    ("garbage", lambda req: b"this is not a sluice frame, not at all", "close", ProtocolError),
    ("garbage then hang", lambda req: b"\x00" * 64, "hang", ProtocolError),
    ("truncated frame then close", lambda req: decision_frame(request_id(req))[:30], "close", ProtocolError),
    ("truncated frame then hang", lambda req: decision_frame(request_id(req))[:30], "hang", Unavailable),
    ("header only then hang", lambda req: decision_frame(request_id(req))[:12], "hang", Unavailable),
    ("no answer", lambda req: b"", "hang", Unavailable),
    ("closed without answer", lambda req: b"", "close", Unavailable),
    ("wrong id", lambda req: decision_frame(request_id(req) + 1), "hang", ProtocolError),
    ("two results for one request", lambda req: decision_frame(request_id(req), count=2), "hang", ProtocolError),
    ("a request frame", lambda req: req, "hang", ProtocolError),
    ("length above the maximum", lambda req: (proto.MAX_FRAME_LEN + 1).to_bytes(4, "little") + b"\x01\x02\x01\x00"
     + req[8:12], "hang", ProtocolError),
    ("status outside the enum", lambda req: proto.frame(proto.Kind.RESPONSE, request_id(req), 1,
                                                        b"\x03\x11\x00\x00"), "hang", ProtocolError),
    ("allowed byte 2", lambda req: decision_frame(request_id(req))[:14] + b"\x02"
     + decision_frame(request_id(req))[15:], "hang", ProtocolError),
    ("result of another opcode", lambda req: proto.frame(proto.Kind.RESPONSE, request_id(req), 1, b"\x02\x00"),
     "hang", ProtocolError),
    ("version 8", lambda req: decision_frame(request_id(req))[:4] + b"\x08" + decision_frame(request_id(req))[5:],
     "hang", ProtocolError),
    ("frame-level Busy", lambda req: proto.frame(proto.Kind.RESPONSE, 0, 1, proto.encode_error(
        0, Status.BUSY, "too many connections")), "close", Busy),
    ("frame-level BadVersion", lambda req: proto.frame(proto.Kind.RESPONSE, request_id(req), 1, proto.encode_error(
        0, Status.BAD_VERSION, "proto: unsupported protocol version")), "close", BadVersion),
]


@pytest.mark.parametrize("name,reply,then,exc", CASES, ids=[c[0] for c in CASES])
def test_sync_client(fake_server: Any, name: str, reply: Callable[[bytes], bytes], then: str,
                     exc: Type[Exception]) -> None:
    srv = fake_server(serve(reply, then))
    timeout, most = timeout_for(exc)
    c = Client(srv.path, timeout=timeout, on_unavailable="raise")
    start = time.monotonic()
    with pytest.raises(exc) as info:
        c.acquire("k", LIMIT)
    assert time.monotonic() - start < most
    assert not str(info.value).startswith(("sluice:", "proto:"))
    assert c._sock is None  # the connection was closed


def test_sync_extra_bytes_after_the_answer(fake_server: Any) -> None:
    srv = fake_server(serve(lambda req: decision_frame(request_id(req)) + b"extra", "hang"))
    with pytest.raises(ProtocolError, match="more than was asked"):
        Client(srv.path, timeout=TIMEOUT).acquire("k", LIMIT)


def test_sync_policy_covers_busy(fake_server: Any) -> None:
    srv = fake_server(serve(CASES[-2][1]))
    d = Client(srv.path, timeout=TIMEOUT, on_unavailable="closed").acquire("k", LIMIT)
    assert d.degraded and not d.allowed


def test_sync_recovers_on_a_new_connection(fake_server: Any) -> None:
    def handle(conn: socket.socket, n: int) -> None:
        (serve(lambda req: b"garbage garbage garbage") if n == 0 else good)(conn, n)
    srv = fake_server(handle)
    c = Client(srv.path, timeout=TIMEOUT, on_unavailable="raise")
    with pytest.raises(ProtocolError):
        c.acquire("k", LIMIT)
    assert [c.acquire("k", LIMIT).remaining for _ in range(2)] == [9, 8]
    c.close()


def test_sync_pipeline_cut_short(fake_server: Any) -> None:
    # The connection closes after answering the first frame of two.
    def handle(conn: socket.socket, n: int) -> None:
        req = read_frame(conn)
        assert req is not None
        conn.sendall(decision_frame(request_id(req), count=proto.parse_header(req).count))
        conn.close()
    srv = fake_server(handle)
    p = Client(srv.path, timeout=TIMEOUT, on_unavailable="open").pipeline()
    for _ in range(300):
        p.acquire("k", LIMIT)
    got = p.execute()
    assert [d.degraded for d in got] == [False] * 256 + [True] * 44


def arun(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize("name,reply,then,exc", CASES, ids=[c[0] for c in CASES])
def test_async_client(fake_server: Any, name: str, reply: Callable[[bytes], bytes], then: str,
                      exc: Type[Exception]) -> None:
    # Two requests go out, and the second write could find the server gone
    # (Broken pipe) before the first answer is read: let it linger.
    srv = fake_server(serve(reply, "linger" if then == "close" else then))

    timeout, most = timeout_for(exc)

    async def main() -> None:
        c = AsyncClient(srv.path, timeout=timeout, on_unavailable="raise")
        loop = asyncio.get_running_loop()
        start = loop.time()
        # Two requests in flight: both fail, whichever the bad answer hit.
        results = await asyncio.gather(c.acquire("k", LIMIT), c.acquire("k", LIMIT), return_exceptions=True)
        assert loop.time() - start < most
        assert any(isinstance(r, exc) for r in results), results
        assert all(isinstance(r, Exception) for r in results), results
        await c.close()
    arun(main())


def test_async_unsolicited_frame(fake_server: Any) -> None:
    srv = fake_server(serve(lambda req: decision_frame(request_id(req)) * 2, "hang"))

    async def main() -> None:
        c = AsyncClient(srv.path, timeout=TIMEOUT, on_unavailable="raise")
        first = await c.acquire("k", LIMIT)
        assert first.remaining == 9
        conn = c._conn
        await asyncio.sleep(0.05)  # the second frame answers nothing: the connection is dropped
        assert conn is not None and conn.closed
        assert (await c.acquire("k", LIMIT)).remaining == 9  # on a new connection
        assert c._conn is not conn
        await c.close()
    arun(main())


def test_async_cancelled_request_keeps_the_order(fake_server: Any) -> None:
    def slow_first(conn: socket.socket, n: int) -> None:
        remaining = 9
        first = True
        while True:
            req = read_frame(conn)
            if req is None:
                return
            if first:
                time.sleep(0.2)
                first = False
            conn.sendall(decision_frame(request_id(req), remaining))
            remaining -= 1
    srv = fake_server(slow_first)

    async def main() -> None:
        c = AsyncClient(srv.path, timeout=2, on_unavailable="raise")
        t = asyncio.ensure_future(c.acquire("k", LIMIT))
        await asyncio.sleep(0.05)
        t.cancel()
        d = await c.acquire("k", LIMIT)
        assert d.remaining == 8  # its own answer, not the cancelled request's
        assert (await c.acquire("k", LIMIT)).remaining == 7
        await c.close()
    arun(main())


def test_async_policy_on_timeout(fake_server: Any) -> None:
    srv = fake_server(serve(lambda req: b"", "hang"))

    async def main() -> Optional[Decision]:
        c = AsyncClient(srv.path, timeout=TIMEOUT, on_unavailable="open")
        return await c.acquire("k", LIMIT)
    d = arun(main())
    assert d.allowed and d.degraded


def stale_second_request(answer_on_new: bool) -> Callable[[socket.socket, int], None]:
    """Connection 0 answers one request, then reads the next and closes without answering;
    later connections answer everything (or, without answer_on_new, close unanswered too)."""

    def handle(conn: socket.socket, n: int) -> None:
        if n == 0:
            req = read_frame(conn)
            assert req is not None
            conn.sendall(decision_frame(request_id(req), 9))
            read_frame(conn)
            conn.close()
        elif answer_on_new:
            good(conn, n)
        else:
            read_frame(conn)
            conn.close()
    return handle


def test_sync_resends_once_after_a_stale_connection(fake_server: Any) -> None:
    srv = fake_server(stale_second_request(answer_on_new=True))
    with Client(srv.path, timeout=TIMEOUT, on_unavailable="raise") as c:
        assert c.acquire("k", LIMIT).remaining == 9
        assert c.acquire("k", LIMIT).remaining == 9  # answered by the second connection
    assert srv.handled == 2  # besides the start check's

    srv = fake_server(stale_second_request(answer_on_new=False))
    with Client(srv.path, timeout=TIMEOUT, on_unavailable="raise") as c:
        assert c.acquire("k", LIMIT).remaining == 9
        with pytest.raises(Unavailable, match="closed the connection"):
            c.acquire("k", LIMIT)  # a fresh connection failing is not retried
    assert srv.handled == 2  # besides the start check's


def test_async_resends_once_after_a_stale_connection(fake_server: Any) -> None:
    srv = fake_server(stale_second_request(answer_on_new=True))

    async def main() -> None:
        async with AsyncClient(srv.path, timeout=TIMEOUT, on_unavailable="raise") as c:
            assert (await c.acquire("k", LIMIT)).remaining == 9
            assert (await c.acquire("k", LIMIT)).remaining == 9
    arun(main())
    assert srv.handled == 2  # besides the start check's
