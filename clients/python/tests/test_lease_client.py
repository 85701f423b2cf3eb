"""lease, release and concurrency(), against a fake server that speaks LEASE and RELEASE.

The fake keeps a concurrency limit's slots in a dict and records every
operation it decodes, so the tests see what the clients send (version-3
frames, the lease ids they give back) and what they do with each answer:
a denied lease raises RateLimited and releases nothing, a block that raises
still releases, a release the sidecar cannot answer is logged. Against the
real sidecar, see test_concurrency.py.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any, Dict, List, Set, Tuple

import pytest
from conftest import Sidecar, read_frame

from sluice import (
    GCRA, AsyncClient, Client, Concurrency, InvalidLimit, Lease, Named, RateLimited, Unavailable, proto,
)
from sluice.results import Decision, Released

LIMIT = Concurrency(limit=2, lease="30s")
TIMEOUT = 0.5


class LeaseServer:
    """A fake sidecar: LEASE and RELEASE of concurrency limits, nothing else.

    ``fail_release``: close the connection instead of answering a RELEASE.
    """

    def __init__(self, fail_release: bool = False) -> None:
        self.fail_release = fail_release
        self.held: Dict[bytes, Set[int]] = {}
        self.ops: List[Tuple[int, proto.Op]] = []  # (frame version, operation)
        self.next_id = 1 << 63  # ids above int64: they travel as u64
        self.lock = threading.Lock()

    def handle(self, conn: socket.socket, n: int) -> None:
        while True:
            req = read_frame(conn)
            if req is None:
                return
            h, ops = proto.decode_frame(req)
            results = []
            for op in ops:
                assert isinstance(op, proto.Op)
                with self.lock:
                    self.ops.append((h.version, op))
                    if op.code == proto.Opcode.RELEASE and self.fail_release:
                        conn.close()
                        return
                    results.append(self.answer(op))
            conn.sendall(proto.encode_frame(proto.Kind.RESPONSE, h.id, results, h.version))

    def answer(self, op: proto.Op) -> proto.Result:
        assert isinstance(op.limit, Concurrency)
        n, lease_ns = op.limit.limit, op.limit.lease_ns
        held = self.held.setdefault(op.key, set())
        if op.code == proto.Opcode.LEASE:
            if len(held) >= n:
                return proto.Result(op.code, value=Lease(False, 0, n, 12_000_000_000, lease_ns, 0, id=0))
            self.next_id += 1
            held.add(self.next_id)
            return proto.Result(op.code, value=Lease(True, n - len(held), n, -1, lease_ns, 0, id=self.next_id))
        released = op.lease in held
        held.discard(op.lease)
        return proto.Result(op.code, value=Released(released, Decision(len(held) < n, n - len(held), n, -1, 0, 0)))

    def codes(self) -> List[int]:
        return [op.code for _, op in self.ops]


@pytest.fixture
def lease_server(fake_server: Any) -> Any:
    def make(**kw: Any) -> Tuple[LeaseServer, str]:
        s = LeaseServer(**kw)
        return s, fake_server(s.handle).path
    return make


def test_lease_and_release(lease_server: Any) -> None:
    srv, path = lease_server()
    with Client(path, timeout=TIMEOUT) as c:
        a, b, denied = (c.lease("upload:erin", LIMIT) for _ in range(3))
        assert a and b and not denied
        assert (a.remaining, b.remaining, a.limit) == (1, 0, 2) and a.id != b.id and a.id > (1 << 63)
        assert (denied.id, denied.retry_after, denied.allowed) == (0, 12.0, False)
        assert c.release("upload:erin", LIMIT, a) is True
        assert c.release("upload:erin", LIMIT, a.id) is False  # released already
        assert c.release("upload:erin", LIMIT, denied) is False  # id 0: not asked
        assert c.lease("upload:erin", "concurrency:limit=2,lease=30s")  # a spec works too
    assert all(v == 3 for v, _ in srv.ops)
    assert srv.codes() == [proto.Opcode.LEASE] * 3 + [proto.Opcode.RELEASE] * 2 + [proto.Opcode.LEASE]
    assert [op.lease for _, op in srv.ops if op.code == proto.Opcode.RELEASE] == [a.id, a.id]
    assert all(op.n == 1 and op.at == 0 and op.flags == 0 for _, op in srv.ops if op.code == proto.Opcode.LEASE)


def test_arguments_refused_before_asking(lease_server: Any) -> None:
    srv, path = lease_server()
    c = Client(path, timeout=TIMEOUT)
    with pytest.raises(InvalidLimit, match="only a concurrency limit"):
        c.lease("k", GCRA(1, 1, 1))
    with pytest.raises(InvalidLimit):
        c.release("k", "fixed_window:limit=1,window=1s", 5)
    with pytest.raises(ValueError):
        c.release("k", LIMIT, -1)
    with pytest.raises(ValueError):
        c.release("k", LIMIT, 1 << 64)
    with pytest.raises(TypeError):
        c.release("k", LIMIT, "7")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.release("k", LIMIT, True)  # type: ignore[arg-type]
    assert srv.ops == []
    # A named limit is the sidecar's to check.
    assert proto.decode_op(proto.encode_lease(Named("uploads"), b"k"))[0].flags == proto.Flags.NAMED


def test_concurrency_releases_on_exit(lease_server: Any) -> None:
    srv, path = lease_server()
    c = Client(path, timeout=TIMEOUT)
    with c.concurrency("k", LIMIT) as lease:
        assert isinstance(lease, Lease) and lease.allowed and srv.held[b"k"] == {lease.id}
    assert srv.held[b"k"] == set()
    with pytest.raises(KeyError):
        with c.concurrency("k", LIMIT) as lease:
            raise KeyError("the block failed")
    assert srv.held[b"k"] == set() and srv.codes()[-1] == proto.Opcode.RELEASE


def test_concurrency_denied_raises_and_releases_nothing(lease_server: Any) -> None:
    srv, path = lease_server()
    c = Client(path, timeout=TIMEOUT)
    ran = []
    with c.concurrency("k", LIMIT), c.concurrency("k", LIMIT):
        with pytest.raises(RateLimited) as info:
            with c.concurrency("k", LIMIT):
                ran.append(1)
        assert not ran and isinstance(info.value.decision, Lease) and info.value.retry_after == 12.0
        assert srv.codes().count(proto.Opcode.RELEASE) == 0
    assert srv.codes().count(proto.Opcode.RELEASE) == 2 and srv.held[b"k"] == set()


def test_concurrency_guard_is_one_use_at_a_time(lease_server: Any) -> None:
    _, path = lease_server()
    guard = Client(path, timeout=TIMEOUT).concurrency("k", LIMIT)
    with guard:
        with pytest.raises(RuntimeError, match="holds a lease"):
            guard.__enter__()
    with guard:  # free again after the exit
        pass


def test_concurrency_decorator(lease_server: Any) -> None:
    srv, path = lease_server()
    c = Client(path, timeout=TIMEOUT)

    @c.concurrency(lambda user, **_: f"report:{user}", LIMIT)
    def report(user: str) -> Set[int]:
        return set(srv.held[f"report:{user}".encode()])

    assert len(report("ann")) == 1 and len(report(user="bob")) == 1
    assert srv.held[b"report:ann"] == set() and srv.held[b"report:bob"] == set()
    with pytest.raises(TypeError, match="decorator only"):
        with c.concurrency(lambda: "k", LIMIT):
            pass


def test_a_release_that_fails_is_logged(lease_server: Any, caplog: Any) -> None:
    _, path = lease_server(fail_release=True)
    c = Client(path, timeout=TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="sluice"):
        with c.concurrency("k", LIMIT):
            pass
    assert "could not release lease" in caplog.text and "within 30s" in caplog.text
    # Called directly, release raises: the policy answers leases, not releases.
    lease = c.lease("k", LIMIT)
    with pytest.raises(Unavailable):
        c.release("k", LIMIT, lease)


def test_policy_answers_a_lease(sidecar: Sidecar) -> None:
    # Clients that had an answer, then an outage: the policy decides.
    path = sidecar.socket
    clients = {p: Client(path, on_unavailable=p) for p in ("open", "closed", "raise")}
    sidecar.stop()
    lease = clients["open"].lease("k", LIMIT)
    assert isinstance(lease, Lease) and lease.allowed and lease.degraded and lease.id == 0
    with clients["open"].concurrency("k", LIMIT) as held:
        assert held.degraded  # ran without the sidecar; nothing to release
    with pytest.raises(RateLimited):
        with clients["closed"].concurrency("k", LIMIT):
            pass
    with pytest.raises(Unavailable):
        clients["raise"].lease("k", LIMIT)
    with pytest.raises(Unavailable):
        clients["open"].release("k", LIMIT, 5)


def test_async_lease_release_and_concurrency(lease_server: Any) -> None:
    srv, path = lease_server()

    async def main() -> None:
        async with AsyncClient(path, timeout=TIMEOUT) as c:
            a = await c.lease("k", LIMIT)
            assert a and await c.release("k", LIMIT, a) and not await c.release("k", LIMIT, a)
            async with c.concurrency("k", LIMIT) as lease:
                assert srv.held[b"k"] == {lease.id}
            assert srv.held[b"k"] == set()
            with pytest.raises(ValueError):
                async with c.concurrency("k", LIMIT):
                    raise ValueError("the block failed")
            assert srv.held[b"k"] == set()
            async with c.concurrency("k", LIMIT), c.concurrency("k", LIMIT):
                with pytest.raises(RateLimited):
                    async with c.concurrency("k", LIMIT):
                        pass

            @c.concurrency(lambda user: "report:" + user, LIMIT)
            async def report(user: str) -> int:
                return len(srv.held[b"report:" + user.encode()])

            assert await report("ann") == 1 and srv.held[b"report:ann"] == set()

    asyncio.run(asyncio.wait_for(main(), 20))
    # 7 leases (one denied); 7 releases (one lease twice, the denied one never).
    assert srv.codes().count(proto.Opcode.LEASE) == srv.codes().count(proto.Opcode.RELEASE) == 7
    assert all(op.lease != 0 for _, op in srv.ops if op.code == proto.Opcode.RELEASE)
