"""A sidecar of an older protocol version: the client writes each frame in the oldest version that
holds it, so everything that sidecar knows keeps working.

The fake sidecar speaks versions 1 and 2 (the release before leases). It decodes each request
frame in its version (so a frame that uses what its version lacks fails the test) and answers in
that version, with results encoded by the client's own codec; a frame of version 3 it refuses
with a frame-level BadVersion in a frame of the oldest version it speaks, and closes the
connection, as the real one does.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, List, Tuple

import pytest
from conftest import read_frame

import sluice._protocol_core
from sluice import (
    AsyncClient, BadVersion, Client, Concurrency, Decision, Hello, MultiDecision, Named, SlidingLog, Status,
    TokenBucket, proto,
)
from sluice.errors import StatusError

TIMEOUT = 2.0
SPEC = "token_bucket:max=2,refill_time=1s"
SHADOW_SPEC = "gcra:burst=1,count=1,period=1s,shadow=true"
SIDECAR_VERSION = 2


class OlderSidecar:
    """The fake sidecar of protocol version 2; ``versions`` holds the version of every request frame."""

    def __init__(self) -> None:
        self.versions: List[int] = []

    def handle(self, conn: socket.socket, n: int) -> None:
        while True:
            req = read_frame(conn)
            if req is None:
                return
            length, version, kind, count, fid = proto.HEADER.unpack_from(req)
            self.versions.append(version)
            if version > SIDECAR_VERSION:
                msg = f"unsupported protocol version: version {version}, this side speaks 1 to {SIDECAR_VERSION}"
                conn.sendall(proto.frame(proto.Kind.RESPONSE, fid, 1, proto.encode_error(0, Status.BAD_VERSION, msg),
                                         proto.MIN_VERSION))
                conn.close()
                return
            try:
                _, ops = proto.decode_frame(req)
            except StatusError as e:  # what this version does not have: the client raises, the test fails
                conn.sendall(proto.frame(proto.Kind.RESPONSE, fid, 1, proto.encode_error(0, e.status, str(e)),
                                         version))
                conn.close()
                return
            results = [self.answer(op) for op in ops]  # type: ignore[arg-type]
            conn.sendall(proto.encode_frame(proto.Kind.RESPONSE, fid, results, version))

    @staticmethod
    def answer(op: proto.Op) -> proto.Result:
        O = proto.Opcode
        allowed = Decision(True, 1, 2, -1, 500_000_000, 0)
        if op.code == O.ACQUIRE and op.flags & proto.Flags.SHADOW:  # denied, answered as allowed
            return proto.Result(op.code, value=Decision(True, 0, 2, 1_000_000_000, 1_000_000_000, 0,
                                                        shadow_denied=True))
        if op.code in (O.ACQUIRE, O.PEEK, O.REFUND):
            return proto.Result(op.code, value=allowed)
        if op.code == O.RESET:
            return proto.Result(op.code, value=True)
        if op.code == O.MULTI:
            return proto.Result(op.code, value=MultiDecision(True, (allowed,) * len(op.items)))
        if op.code == O.HELLO:
            return proto.Result(op.code, value=Hello(SIDECAR_VERSION, proto.MAX_FRAME_LEN, proto.MAX_BATCH,
                                                     proto.MAX_KEY_LEN, proto.MAX_MULTI, 4096, 128))
        if op.code == O.STATS:
            return proto.Result(op.code, value={"requests": 1})
        return proto.Result(op.code)  # PING


@pytest.fixture
def older(fake_server: Any) -> Tuple[OlderSidecar, str]:
    s = OlderSidecar()
    return s, fake_server(s.handle).path


def test_sync_client(older: Tuple[OlderSidecar, str]) -> None:
    srv, path = older
    c = Client(path, timeout=TIMEOUT)  # on_unavailable="open": BadVersion is an error, not unavailability
    d = c.acquire("k", SPEC)
    assert d.allowed and not d.shadow_denied and not d.degraded and d.remaining == 1
    assert c.acquire("k", "login").allowed  # a named limit
    assert c.acquire("k", Named("login"), strict=True).allowed
    d = c.acquire("k", SPEC, shadow=True)  # a shadow request
    assert d.allowed and d.shadow_denied
    assert c.acquire("k", SHADOW_SPEC).shadow_denied  # a limit whose spec says shadow=true
    # The first named acquire asks the sidecar's version (a HELLO, in version 1): version 2 has no
    # deadlines, so named requests go without one, in version 2.
    assert srv.versions == [1, 1, 2, 2, 2, 2]

    assert c.peek("k", SPEC).allowed and c.peek("k", SHADOW_SPEC).allowed
    assert c.refund("k", "login").allowed and c.reset("k", SPEC) is True
    assert c.multi([("a", SPEC), ("b", SHADOW_SPEC)]).allowed
    assert c.multi([("a", SPEC), ("b", "login")]).allowed
    c.ping()
    assert c.hello().version == SIDECAR_VERSION and c.stats() == {"requests": 1}
    assert srv.versions[6:] == [1, 1, 2, 1, 1, 2, 1, 1, 1]
    del srv.versions[:]

    # A pipeline goes in one frame of its calls' highest version.
    out = c.pipeline().acquire("a", SPEC).peek("b", "login").multi([("c", SPEC)]).ping().execute()
    assert out[0].allowed and out[1].allowed and out[2].allowed and out[3] is None
    assert srv.versions == [2]
    del srv.versions[:]

    # What version 3 added: the sidecar refuses the frame (BadVersion) and closes the connection.
    for call in (lambda: c.acquire("k", SlidingLog(2, 1)),
                 lambda: c.peek("k", "window_counters:limit=5,window=1s"),
                 lambda: c.lease("k", Concurrency(2, 30)), lambda: c.lease("k", "jobs"),
                 lambda: c.scan_page("k"),  # a SCAN stays in version 3, so that it lists every bucket
                 lambda: c.pipeline().acquire("a", SPEC).acquire("b", SlidingLog(2, 1)).execute()):
        with pytest.raises(BadVersion, match="speaks 1 to 2"):
            call()
        assert c._sock is None
        # The next call opens a new connection, and what the sidecar knows works again.
        assert c.acquire("k", SPEC).allowed
    # A named lease asks the new connection's sidecar its version first (a sidecar of version 5
    # gets it in version 5, whose answer says which outage policy made it).
    assert srv.versions == [3, 1] * 3 + [1, 3, 1] + [3, 1] * 2
    assert c.degraded_decisions == 0 and c.healthy()
    c.close()


def test_async_client(older: Tuple[OlderSidecar, str]) -> None:
    srv, path = older

    async def main() -> None:
        async with AsyncClient(path, timeout=TIMEOUT) as c:
            assert (await c.acquire("k", SPEC)).allowed
            assert (await c.acquire("k", "login")).allowed
            assert (await c.acquire("k", SPEC, shadow=True)).shadow_denied
            assert (await c.acquire("k", SHADOW_SPEC)).shadow_denied
            assert (await c.multi([("a", SPEC), ("b", "login")])).allowed
            p = c.pipeline().acquire("a", SPEC).acquire("b", SHADOW_SPEC)
            assert [d.shadow_denied for d in await p.execute()] == [False, True]
            with pytest.raises(BadVersion):
                await c.acquire("k", SlidingLog(2, 1))
            with pytest.raises(BadVersion):
                await c.lease("k", Concurrency(2, 30))
            assert (await c.acquire("k", SPEC)).allowed
    asyncio.run(asyncio.wait_for(main(), 20))
    assert srv.versions == [1, 1, 2, 2, 2, 2, 2, 3, 3, 1]  # the HELLO before the first named acquire


class EchoVersion:
    """Stands in for the client's socket: answers each frame with an allowed decision of its id, in
    its version."""

    def __init__(self) -> None:
        self.versions: List[int] = []
        self.reply = b""

    def sendall(self, payload: bytes) -> None:
        h = proto.parse_header(payload)
        self.versions.append(h.version)
        d = proto.encode_decision(payload[proto.HEADER_LEN], Decision(True, 1, 2, -1, 0, 0))
        self.reply = proto.frame(proto.Kind.RESPONSE, h.id, 1, d, h.version)

    def recv(self, n: int) -> bytes:
        return self.reply

    def close(self) -> None:
        pass


def test_the_fast_path_takes_an_answer_in_the_requests_version(monkeypatch: Any,
                                                               older: Tuple[OlderSidecar, str]) -> None:
    def general_path(*args: Any) -> Any:
        raise AssertionError("the answer went the general path")
    monkeypatch.setattr(sluice._protocol_core, "results", general_path)
    c = Client("/nonexistent", on_unavailable="raise", lazy=True)
    sock = EchoVersion()
    c._sock = sock  # type: ignore[assignment]
    c._version_of, c._version = sock, 2  # type: ignore[assignment]  # as if a HELLO had said so
    for limit in (TokenBucket(2, 1), SPEC, "login", SlidingLog(2, 1)):
        assert c.acquire("k", limit).allowed and c.peek("k", limit).allowed
    assert sock.versions == [1, 1, 1, 1, 2, 2, 3, 3]

    srv, path = older

    async def main() -> None:
        # lazy: the start check's answer would go the general path
        async with AsyncClient(path, timeout=TIMEOUT, on_unavailable="raise", lazy=True) as ac:
            for limit in (TokenBucket(2, 1), SPEC, "login"):
                assert (await ac.acquire("k", limit)).allowed and (await ac.peek("k", limit)).allowed
    asyncio.run(asyncio.wait_for(main(), 20))
    assert srv.versions == [1, 1, 1, 1, 1, 2, 2]  # the HELLO before the first named acquire
