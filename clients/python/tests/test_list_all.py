"""Each limit's decision of a named list (protocol version 7, flag ALL): the clients ask it of a
sidecar whose HELLO says version 7, and only of one; the answer's ``limits`` and ``bound``.

The fake sidecar speaks the version it is given. It decodes each request frame in its version (a
frame with ALL in version 6 is malformed: the test fails) and answers a request with ALL with two
limits' decisions, as a list's, with the client's own codec.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, List, Tuple

import pytest
from conftest import read_frame

from sluice import AsyncClient, Client, Decision, Hello, proto

TIMEOUT = 2.0
BURST = Decision(True, 4, 5, -1, 200_000_000, 0)
DAILY = Decision(False, 0, 1000, 36000 * 10**9, 36000 * 10**9, 0)


class Sidecar:
    """A fake sidecar of protocol ``version``; ``seen`` holds (version, flags) of every item."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.seen: List[Tuple[int, int]] = []

    def handle(self, conn: socket.socket, n: int) -> None:
        while True:
            req = read_frame(conn)
            if req is None:
                return
            h, ops = proto.decode_frame(req)
            assert h.version <= self.version
            out = []
            for op in ops:
                assert isinstance(op, proto.Op)
                if op.code == proto.Opcode.HELLO:
                    out.append(proto.Result(op.code, value=Hello(self.version, proto.MAX_FRAME_LEN, proto.MAX_BATCH,
                                                                 proto.MAX_KEY_LEN, proto.MAX_MULTI, 4096, 128)))
                    continue
                self.seen.append((h.version, op.flags))
                d = Decision(False, 0, 1000, DAILY.retry_after_ns, DAILY.reset_after_ns, 0)
                if op.flags & proto.Flags.ALL:
                    d = Decision(False, 0, 1000, DAILY.retry_after_ns, DAILY.reset_after_ns, 0,
                                 limits=(BURST, DAILY), bound=1)
                out.append(proto.Result(op.code, value=d))
            conn.sendall(proto.encode_frame(proto.Kind.RESPONSE, h.id, out, h.version))


def sidecar(fake_server: Any, version: int) -> Tuple[Sidecar, str]:
    s = Sidecar(version)
    return s, fake_server(s.handle).path


@pytest.mark.parametrize("version", [6, 7])
def test_sync(fake_server: Any, version: int) -> None:
    srv, path = sidecar(fake_server, version)
    c = Client(path, timeout=TIMEOUT, on_unavailable="raise")
    want = ((BURST, DAILY), 1) if version == 7 else ((), 0)
    for d in (c.acquire("k", "login"), c.peek("k", "login"), c.refund("k", "login", 1)):
        assert not d.allowed and (d.limits, d.bound) == want
    p = c.pipeline()
    p.acquire("k", "login")
    p.refund("k", "login", 1)
    p.acquire("k", "token_bucket:max=5,refill_time=1s")  # a spec: never ALL
    got = p.execute()
    assert [(d.limits, d.bound) for d in got[:2]] == [want, want] and got[2].limits == ()
    if version == 7:
        both = proto.Flags.ALL | proto.Flags.NAMED
        assert [(v, f & both) for v, f in srv.seen[:5]] == [(7, both)] * 5
        assert srv.seen[5][1] & proto.Flags.ALL == 0
    else:  # a sidecar of version 6 is asked as before: version 4, no ALL
        assert [v for v, _ in srv.seen[:5]] == [4] * 5 and not any(f & proto.Flags.ALL for _, f in srv.seen)
    c.close()


@pytest.mark.parametrize("version", [6, 7])
def test_async(fake_server: Any, version: int) -> None:
    srv, path = sidecar(fake_server, version)
    want = ((BURST, DAILY), 1) if version == 7 else ((), 0)

    async def main() -> None:
        async with AsyncClient(path, timeout=TIMEOUT, on_unavailable="raise") as c:
            for d in (await c.acquire("k", "login"), await c.peek("k", "login"), await c.refund("k", "login", 1)):
                assert not d.allowed and (d.limits, d.bound) == want
    asyncio.run(asyncio.wait_for(main(), 20))
    assert all(v == (7 if version == 7 else 4) for v, _ in srv.seen)
    assert all(bool(f & proto.Flags.ALL) == (version == 7) for _, f in srv.seen)
