"""Concurrency limits against the real sidecar: lease, release and concurrency() (protocol version 3).

These run once sluiced serves LEASE and RELEASE (rename this file to
test_concurrency.py). What they hold the sidecar to is proto/doc.go's:
a lease takes one slot and gets an id, never 0; a release of a lease still
held frees its slot (released True), of any other id (released already,
expired, unknown, another key's) frees nothing (False); a lease not
released expires after the limit's lease duration; peek reports the free
slots and reset forgets every lease; acquire, refund and multi refuse a
concurrency limit, and lease and release refuse any other (InvalidLimit).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any, Callable, Iterator, List

import pytest
from conftest import Sidecar, read_frame

from sluice import (
    GCRA, AsyncClient, Client, Concurrency, InvalidLimit, Lease, Named, RateLimited, proto,
)
from sluice.errors import Status

UPLOADS = Concurrency(limit=3, lease="1m")


@pytest.fixture
def client(sidecar: Sidecar) -> Iterator[Client]:
    with Client(sidecar.socket, on_unavailable="raise") as c:
        yield c


def raw(sidecar: Sidecar, version: int, *ops: bytes) -> List[proto.Result]:
    """Send one frame of ``version`` holding ops on a connection of its own; its results."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(sidecar.socket)
        s.sendall(proto.frame(proto.Kind.REQUEST, 1, len(ops), b"".join(ops), version))
        f = read_frame(s)
        assert f is not None
        h, results = proto.decode_frame(f)
        assert h.version == version
        return results  # type: ignore[return-value]


def test_hello_says_version_7(client: Client) -> None:
    # This client and the sidecar speak version 7 (each limit's decision of a named list).
    assert proto.VERSION == 7 and client.hello().version == 7


def test_leases_up_to_the_limit(client: Client) -> None:
    leases = [client.lease("upload:erin", UPLOADS) for _ in range(4)]
    assert [bool(x) for x in leases] == [True, True, True, False]
    assert [x.remaining for x in leases] == [2, 1, 0, 0] and all(x.limit == 3 for x in leases)
    ids = [x.id for x in leases[:3]]
    assert all(ids) and len(set(ids)) == 3 and leases[3].id == 0
    assert all(x.retry_after is None for x in leases[:3])
    assert leases[3].retry_after is not None and 0 < leases[3].retry_after <= 60
    # Another key has slots of its own.
    assert client.lease("upload:frank", UPLOADS).remaining == 2


def test_release_frees_a_slot(client: Client) -> None:
    held = [client.lease("k", UPLOADS) for _ in range(3)]
    assert not client.lease("k", UPLOADS)
    assert client.release("k", UPLOADS, held[1]) is True
    assert client.peek("k", UPLOADS).remaining == 1
    again = client.lease("k", UPLOADS)
    assert again and again.id not in {x.id for x in held}
    assert client.release("k", UPLOADS, held[1]) is False  # released already
    assert client.release("k", UPLOADS, 12345) is False  # never granted
    assert client.release("other", UPLOADS, held[0]) is False  # another key's
    assert client.release("k", Concurrency(4, UPLOADS.lease), held[0]) is False  # another limit's (its slot count)
    assert client.release("k", UPLOADS, held[0]) is True


def test_peek_and_reset(client: Client) -> None:
    fresh = client.peek("k", UPLOADS)
    assert fresh.allowed and fresh.remaining == 3 and fresh.reset_after == 0
    client.lease("k", UPLOADS)
    client.lease("k", UPLOADS)
    assert client.peek("k", UPLOADS).remaining == 1
    assert client.reset("k", UPLOADS) is True
    assert client.peek("k", UPLOADS).remaining == 3
    assert [bool(client.lease("k", UPLOADS)) for _ in range(4)] == [True, True, True, False]


def test_a_lease_not_released_expires(client: Client) -> None:
    short = Concurrency(1, "200ms")
    first = client.lease("k", short)
    assert first and not client.lease("k", short)
    time.sleep(0.3)
    assert client.lease("k", short)
    assert client.release("k", short, first) is False  # expired: its slot went to the next lease


def test_other_operations_refuse_a_concurrency_limit(client: Client) -> None:
    for call in (lambda: client.acquire("k", UPLOADS), lambda: client.refund("k", UPLOADS),
                 lambda: client.multi([("k", UPLOADS)])):
        with pytest.raises(InvalidLimit, match="concurrency limits take LEASE and RELEASE"):
            call()


def test_lease_refuses_other_limits(sidecar: Sidecar) -> None:
    # The client refuses them before asking; sent as they are, the sidecar refuses them too.
    gcra = GCRA(1, 1, 1)
    for op in (proto.encode_lease(gcra, b"k"), proto.encode_release(gcra, 1, b"k")):
        (r,) = raw(sidecar, 3, op)
        assert r.status == Status.INVALID_LIMIT and r.message


def test_lease_in_older_frames_is_an_unknown_opcode(sidecar: Sidecar) -> None:
    for v in (1, 2):
        (r,) = raw(sidecar, v, proto.encode_lease(UPLOADS, b"k"))
        assert r.status == Status.UNKNOWN_OPCODE


def test_concurrency_block(client: Client) -> None:
    with client.concurrency("k", UPLOADS) as lease:
        assert isinstance(lease, Lease) and lease.allowed
        assert client.peek("k", UPLOADS).remaining == 2
    assert client.peek("k", UPLOADS).remaining == 3
    with pytest.raises(ZeroDivisionError):
        with client.concurrency("k", UPLOADS):
            1 / 0
    assert client.peek("k", UPLOADS).remaining == 3
    with client.concurrency("k", UPLOADS), client.concurrency("k", UPLOADS), client.concurrency("k", UPLOADS):
        with pytest.raises(RateLimited) as info:
            with client.concurrency("k", UPLOADS):
                pytest.fail("the block ran without a slot")
        assert info.value.decision.id == 0 and info.value.retry_after is not None
    assert client.peek("k", UPLOADS).remaining == 3


def test_concurrency_across_threads(client: Client) -> None:
    import threading

    inside, most, lock = [0], [0], threading.Lock()
    denied: List[int] = []
    failed: List[BaseException] = []

    def work() -> None:
        try:
            with client.concurrency("busy", UPLOADS):
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.05)
                with lock:
                    inside[0] -= 1
        except RateLimited:
            denied.append(1)
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            failed.append(e)

    threads = [threading.Thread(target=work) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    assert most[0] <= 3 and len(denied) >= 1 and client.peek("busy", UPLOADS).remaining == 3


NAMED = """limits:
  uploads:
    limit: "concurrency:limit=2,lease=1m"
  login:
    limit: "token_bucket:max=3,refill_time=1h,refill_amount=1"
"""


def test_named_concurrency_limit(make_sidecar: Callable[..., Any], tmp_path: Any) -> None:
    path = os.path.join(str(tmp_path), "sluice.yaml")
    with open(path, "w") as f:
        f.write(NAMED)
    sc = make_sidecar(args=["--config", path])
    with Client(sc.socket, on_unavailable="raise") as c:
        leases = [c.lease("erin", "uploads") for _ in range(3)]
        assert [bool(x) for x in leases] == [True, True, False]
        assert c.release("erin", Named("uploads"), leases[0]) is True
        with c.concurrency("erin", "uploads"):
            pass
        with pytest.raises(InvalidLimit):
            c.lease("erin", "login")  # named, but not a concurrency limit


def test_async(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as c:
            a = await c.lease("k", UPLOADS)
            assert a and a.remaining == 2
            assert await c.release("k", UPLOADS, a) is True and await c.release("k", UPLOADS, a) is False
            async with c.concurrency("k", UPLOADS) as lease:
                assert lease and (await c.peek("k", UPLOADS)).remaining == 2
            assert (await c.peek("k", UPLOADS)).remaining == 3
            held = await asyncio.gather(*(c.lease("k", UPLOADS) for _ in range(5)))
            assert sum(bool(x) for x in held) == 3
            with pytest.raises(RateLimited):
                async with c.concurrency("k", UPLOADS):
                    pass

    asyncio.run(asyncio.wait_for(main(), 20))
