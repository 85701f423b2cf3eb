"""The sync Client against the real sluiced."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import threading
import time
from typing import Any, List

import pytest
from conftest import Sidecar

from sluice import (
    GCRA, AsyncClient, Client, Concurrency, FixedWindow, Hello, InvalidCost, InvalidKey, InvalidLimit, MultiItem, Pacer,
    RateLimited, SlidingWindow, TokenBucket, TooManyItems, Unavailable, Unsupported, proto,
)

T0 = datetime.datetime.fromtimestamp(1_700_000_040, datetime.timezone.utc)  # a whole minute
HOUR = TokenBucket(max=3, refill_time=3600)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


@pytest.fixture
def client(sidecar: Sidecar) -> Any:
    with Client(sidecar.socket, on_unavailable="raise") as c:
        yield c


def test_hello_ping_stats(client: Client) -> None:
    h = client.hello()
    # The sidecar speaks this client's version or a newer one (version 5 adds quota, which this
    # client does not send yet).
    assert h.version >= proto.VERSION
    assert h == Hello(version=h.version, max_frame=1 << 20, max_batch=256, max_key=1024, max_multi=16,
                      slot_count=4096, slot_size=128)
    assert client.ping() is None
    client.acquire("k", HOUR)
    stats = client.stats()
    assert stats["ops"] >= 3 and stats["allowed"] >= 1 and all(isinstance(v, int) for v in stats.values())


def test_acquire_until_denied(client: Client) -> None:
    got = [client.acquire("login:alice", HOUR) for _ in range(4)]
    assert [d.allowed for d in got] == [True, True, True, False]
    assert [d.remaining for d in got] == [2, 1, 0, 0]
    assert all(d.limit == 3 and not d.degraded for d in got)
    assert got[0].retry_after is None and got[0].retry_after_ns == -1
    denied = got[3]
    assert not denied and 3590 < denied.retry_after <= 3600  # type: ignore[operator]
    assert denied.retry_after_timedelta == datetime.timedelta(microseconds=denied.retry_after_ns // 1000)
    assert 3590 < denied.reset_after <= 3600 and denied.delay == 0.0  # type: ignore[operator]
    # Cost 0 asks without taking (and is always allowed); a cost above the maximum is denied for good.
    zero = client.acquire("login:alice", HOUR, 0)
    assert zero.allowed and zero.remaining == 0
    never = client.acquire("login:bob", HOUR, 4)
    assert not never.allowed and never.retry_after is None


def test_peek_refund_reset(client: Client) -> None:
    assert client.peek("k", HOUR).remaining == 3  # the bucket as it stands
    assert client.reset("k", HOUR) is False  # peek created nothing
    client.acquire("k", HOUR, 3)
    assert client.peek("k", HOUR).allowed is False
    d = client.refund("k", HOUR, 2)
    assert d.remaining == 2
    assert client.refund("k", HOUR, 10).remaining == 3  # capped at max
    client.acquire("k", HOUR)
    assert client.acquire("k", HOUR, 0).remaining == 2  # cost 0: what is left, unchanged
    assert client.reset("k", HOUR) is True
    assert client.acquire("k", HOUR, 0).remaining == 3


def test_limits_as_spec_strings_and_bytes_keys(client: Client) -> None:
    spec = "token_bucket:max=3,refill_time=1h"
    assert client.acquire(b"bytes:\xff", spec).remaining == 2
    assert client.acquire(bytearray(b"bytes:\xff"), HOUR).remaining == 1  # the same bucket
    assert client.acquire("\u00e9t\u00e9", HOUR).allowed


def test_every_algorithm(client: Client) -> None:
    assert client.acquire("g", GCRA(burst=4, count=1, period=1), at=at(0)).limit == 5
    assert client.acquire("f", FixedWindow(100, 60), 7, at=at(0)).remaining == 93
    assert client.acquire("s", SlidingWindow(10, 60), at=at(0)).remaining == 9
    p = Pacer(rate=4, period=1, max_delay=2)
    first, second = client.acquire("p", p, at=at(0)), client.acquire("p", p, at=at(0))
    assert first.delay == 0.0 and second.delay == 0.25 and second.delay_timedelta == datetime.timedelta(seconds=0.25)


def test_at_replays_time(client: Client) -> None:
    w = FixedWindow(limit=2, window=60)
    assert [client.acquire("w", w, at=at(0)).allowed for _ in range(3)] == [True, True, False]
    denied = client.acquire("w", w, at=at(30))
    assert not denied.allowed and denied.retry_after == 30.0
    assert client.acquire("w", w, at=at(60)).allowed
    # Seconds work as well as datetimes, exactly.
    assert client.acquire("w", w, at=1_700_000_100).allowed
    assert not client.acquire("w", w, at=1_700_000_100.5).allowed


def test_strict_restarts_the_refill_clock(client: Client) -> None:
    tb = TokenBucket(max=1, refill_time=10)
    for key, strict in (("lax", False), ("strict", True)):
        assert client.acquire(key, tb, at=at(0)).allowed
        assert not client.acquire(key, tb, at=at(5), strict=strict).allowed
    assert client.acquire("lax", tb, at=at(10)).allowed
    assert not client.acquire("strict", tb, at=at(10)).allowed  # refills at 15
    assert client.acquire("strict", tb, at=at(15)).allowed


def test_multi_is_all_or_nothing(client: Client) -> None:
    a, b = TokenBucket(5, 3600), TokenBucket(1, 3600)
    m = client.multi([("a", a, 2), MultiItem("b", b)])
    assert m.allowed and bool(m) and len(m) == 2 and [d.remaining for d in m.decisions] == [3, 0]
    m = client.multi([("a", a, 2), ("b", b)])
    assert not m.allowed and [d.allowed for d in m] == [True, False]
    assert client.acquire("a", a, 0).remaining == 3  # nothing consumed
    with pytest.raises(TooManyItems):
        client.multi([("k%d" % i, a) for i in range(17)])
    with pytest.raises(TooManyItems):
        client.multi([])


def test_scan(client: Client) -> None:
    for i in range(5):
        client.acquire(f"scan:{i}", HOUR)
    client.acquire("other", HOUR)
    entries = list(client.scan("scan:", count=2))
    assert sorted(e.key for e in entries) == [f"scan:{i}".encode() for i in range(5)]
    assert all(e.algorithm.spec_name == "token_bucket" and e.fresh_at > time.time() for e in entries)
    assert entries[0].key_text.startswith("scan:")
    assert len(list(client.scan())) == 6
    page = client.scan_page("scan:", 0, 1000)
    assert page.next == 0 and len(page.entries) == 5


def test_scan_needs_inline_keys(make_sidecar: Any) -> None:
    sc = make_sidecar(slot_size=64)
    with Client(sc.socket) as c:
        with pytest.raises(Unsupported):
            list(c.scan())
        assert c.ping() is None  # an error result leaves the connection usable


def test_errors(client: Client) -> None:
    with pytest.raises(InvalidLimit, match="max = 0"):
        client.acquire("k", TokenBucket(0, 3600))  # the sidecar's verdict
    with pytest.raises(InvalidCost):
        client.acquire("k", HOUR, -1)
    with pytest.raises(InvalidLimit, match="unknown algorithm"):
        client.acquire("k", "leaky:rate=1")
    with pytest.raises(InvalidKey):
        client.acquire("", HOUR)
    with pytest.raises(InvalidKey):
        client.acquire("x" * 1025, HOUR)
    with pytest.raises(InvalidCost):
        client.acquire("k", HOUR, 1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidCost):
        client.acquire("k", HOUR, 1 << 63)
    with pytest.raises(TypeError):
        client.acquire("k", 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.scan_page(count=0)
    assert client.acquire("x" * 1024, HOUR).allowed  # the longest key; the connection survived it all
    with pytest.raises(ValueError):
        Client(on_unavailable="maybe")
    with pytest.raises(ValueError):
        Client(timeout=0)


def test_threads_share_one_client_without_over_admission(client: Client) -> None:
    limit = TokenBucket(max=50, refill_time=3600)
    allowed: List[bool] = []

    def worker() -> None:
        for _ in range(25):
            allowed.append(client.acquire("hammer", limit).allowed)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(allowed) == 200 and sum(allowed) == 50


def test_threads_with_their_own_clients(sidecar: Sidecar) -> None:
    limit = GCRA(burst=29, count=1, period=3600)  # 30 at once, then one an hour
    allowed: List[bool] = []

    def worker() -> None:
        with Client(sidecar.socket, on_unavailable="raise") as c:
            for _ in range(20):
                allowed.append(c.acquire("hammer", limit).allowed)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(allowed) == 120 and sum(allowed) == 30


def test_pipeline(client: Client) -> None:
    limit = TokenBucket(max=100, refill_time=3600)
    p = client.pipeline()
    for _ in range(300):  # two frames: 256 + 44
        p.acquire("pipe", limit)
    assert len(p) == 300
    got = p.execute()
    assert [d.allowed for d in got] == [True] * 100 + [False] * 200
    assert [d.remaining for d in got[:3]] == [99, 98, 97]
    mixed = (client.pipeline().ping().hello().peek("pipe", limit).reset("pipe", limit).stats()
             .multi([("m", limit)]).scan_page("pipe").refund("pipe", limit).execute())
    assert mixed[0] is None and mixed[1].version >= proto.VERSION and not mixed[2].allowed and mixed[3] is True
    assert isinstance(mixed[4], dict) and mixed[5].allowed and mixed[6].next == 0 and mixed[7].remaining == 100
    with_error = client.pipeline().acquire("e", limit).acquire("e", limit, -1).acquire("e", limit)
    with pytest.raises(InvalidCost):
        with_error.execute()
    got = with_error.execute(raise_on_error=False)
    assert got[0].remaining == 97 and isinstance(got[1], InvalidCost) and got[2].remaining == 96
    assert client.pipeline().execute() == []


def test_large_pipeline_is_sent_while_answers_are_read(client: Client) -> None:
    # ~300 KiB of requests: more than one write can hand the kernel while the
    # sidecar's answers pile up unread.
    limit = TokenBucket(max=2500, refill_time=3600)
    p = client.pipeline()
    for i in range(3000):
        p.acquire("big:" + "x" * 40 + str(i % 2), limit)
    got = p.execute()
    assert len(got) == 3000
    assert sum(d.allowed for d in got) == 3000  # 1500 per key
    assert got[-1].remaining == 2500 - 1500


def test_pipeline_of_frames_at_the_size_limit(client: Client) -> None:
    # 100 MULTIs of 16 items with 1 KiB keys: 1.7 MB in frames of up to 1 MiB.
    limit = TokenBucket(max=1000, refill_time=3600)
    items = [("wide%02d:" % i + "k" * 1017, limit) for i in range(16)]
    p = client.pipeline()
    for _ in range(100):
        p.multi(items)
    got = p.execute()
    assert len(got) == 100 and all(m.allowed for m in got)
    assert [d.remaining for d in got[-1]] == [900] * 16


def test_idle_connection_closed_by_the_sidecar_is_retried(make_sidecar: Any) -> None:
    sc = make_sidecar(args=["--idle-timeout", "100ms"])
    with Client(sc.socket, on_unavailable="raise") as c:
        assert c.acquire("idle", HOUR).remaining == 2
        time.sleep(0.3)  # the sidecar closes the idle connection
        d = c.acquire("idle", HOUR)
        assert d.remaining == 1 and not d.degraded


def test_restart_reconnects_and_policies_apply_while_down(sidecar: Sidecar) -> None:
    limit = TokenBucket(max=5, refill_time=3600)
    clients = {p: Client(sidecar.socket, timeout=0.5, on_unavailable=p) for p in ("open", "closed", "raise")}
    for c in clients.values():
        assert c.ping() is None
    assert clients["raise"].acquire("r", limit, 3).remaining == 2

    sidecar.stop()
    d = clients["open"].acquire("r", limit)
    assert d.allowed and d.degraded and d.remaining == 0
    assert clients["open"].peek("r", limit).degraded
    assert clients["open"].multi([("r", limit)]).degraded
    d = clients["closed"].acquire("r", limit)
    assert not d.allowed and d.degraded and d.retry_after is None
    with pytest.raises(Unavailable):
        clients["raise"].acquire("r", limit)
    for c in clients.values():
        with pytest.raises(Unavailable):
            c.refund("r", limit)  # only decisions have a policy
        with pytest.raises(Unavailable):
            c.ping()
    got = clients["open"].pipeline().acquire("r", limit).ping().execute(raise_on_error=False)
    assert got[0].degraded and isinstance(got[1], Unavailable)

    sidecar.start()  # same state file: the bucket survived
    got = [c.acquire("r", limit) for c in clients.values()]
    assert [(d.allowed, d.remaining, d.degraded) for d in got] == [
        (True, 1, False), (True, 0, False), (False, 0, False)]
    for c in clients.values():
        c.close()


def test_outage_is_logged_once_each_way(sidecar: Sidecar, caplog: pytest.LogCaptureFixture) -> None:
    limit = TokenBucket(max=5, refill_time=3600)
    c = Client(sidecar.socket, timeout=0.5, on_unavailable="open")
    assert c.acquire("log", limit).remaining == 4
    sidecar.stop()
    with caplog.at_level(logging.INFO, logger="sluice"):
        for _ in range(3):
            assert c.acquire("log", limit).degraded
        sidecar.start()
        for _ in range(3):
            assert not c.acquire("log", limit).degraded
    down = [r for r in caplog.records if "is unavailable (" in r.getMessage()]
    up = [r for r in caplog.records if "again" in r.getMessage()]
    counted = [r for r in caplog.records if "decisions made by on_unavailable" in r.getMessage()]
    assert len(down) == 1 and down[0].levelno == logging.WARNING
    assert len(up) == 1 and up[0].levelno == logging.INFO
    assert len(counted) == 1 and counted[0].levelno == logging.WARNING  # at most one every 10 s
    assert c.degraded_decisions == 3
    c.close()


def test_restart_under_load(sidecar: Sidecar) -> None:
    # Threads keep acquiring while the sidecar stops and starts again: every
    # call returns (degraded while it is down), none raises, and decisions
    # come back from the sidecar once it is up.
    limit = TokenBucket(max=1_000_000, refill_time=3600)
    stop = threading.Event()
    seen: List[Any] = []

    def worker() -> None:
        with Client(sidecar.socket, timeout=0.5, on_unavailable="open") as c:
            while not stop.is_set():
                try:
                    seen.append(c.acquire("load", limit))
                except Exception as e:  # noqa: BLE001 - the test reports any
                    seen.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    sidecar.stop()
    time.sleep(0.05)
    sidecar.start()
    time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    assert not [e for e in seen if isinstance(e, Exception)]
    assert any(d.degraded for d in seen)  # the sidecar was away for 50 ms
    assert not seen[-1].degraded and seen[-1].allowed


def test_restart_between_calls_is_invisible(sidecar: Sidecar) -> None:
    with Client(sidecar.socket, on_unavailable="raise") as c:
        assert c.acquire("x", HOUR).remaining == 2
        sidecar.restart()
        assert c.acquire("x", HOUR).remaining == 1  # the dead connection is retried on a new one


def test_no_sidecar(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing listening is a mistake, not an outage: making the client raises, whatever the
    # policy, and names the socket's absolute path.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICE_SOCKET", raising=False)
    where = os.path.join(str(tmp_path), "var", "sluice.sock")
    for policy in ("open", "closed", "raise"):
        with pytest.raises(Unavailable) as info:
            Client(on_unavailable=policy)
        assert str(info.value) == f"the sidecar is unavailable: nothing listens at {where}: No such file or directory"
        with pytest.raises(Unavailable, match=f"nothing listens at {where}"):
            AsyncClient(on_unavailable=policy)
    # A socket file nobody listens on (left by a sidecar killed with -9).
    left = socket.socket(socket.AF_UNIX)
    left.bind(os.path.join(str(tmp_path), "left.sock"))
    left.close()
    with pytest.raises(Unavailable, match=f"nothing listens at {tmp_path}/left.sock: Connection refused"):
        Client("left.sock")

    # Started before its sidecar (lazy): every call raises until the sidecar has answered once.
    for policy in ("open", "closed"):
        c = Client(on_unavailable=policy, lazy=True)
        assert c.socket_path == where
        with pytest.raises(Unavailable, match="never answered"):
            c.acquire("k", HOUR)
        with pytest.raises(Unavailable, match="never answered"):
            c.lease("k", Concurrency(1, 60))
        with pytest.raises(Unavailable, match="never answered"):
            c.pipeline().acquire("k", HOUR).execute()
        with pytest.raises(InvalidKey):  # bad arguments raise whatever the policy
            c.acquire("", HOUR)
        assert c.degraded_decisions == 0

    async def main() -> None:
        ac = AsyncClient(on_unavailable="open", lazy=True)
        with pytest.raises(Unavailable, match="never answered"):
            await ac.acquire("k", HOUR)
        with pytest.raises(InvalidKey):
            await ac.acquire("", HOUR)
        with pytest.raises(InvalidCost):
            await ac.pipeline().acquire("k", HOUR, 2.5).execute()  # type: ignore[arg-type]
    asyncio.run(main())


def test_lazy_client_decides_by_policy_once_the_sidecar_answered(sluiced_bin: str, tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sc = Sidecar(sluiced_bin)
    monkeypatch.chdir(sc.dir)
    try:
        c = Client("s.sock", on_unavailable="open", lazy=True)  # before the sidecar
        with pytest.raises(Unavailable, match="never answered"):
            c.acquire("k", HOUR)
        sc.start()
        assert c.acquire("k", HOUR).remaining == 2
        sc.stop()
        d = c.acquire("k", HOUR)  # an outage of a sidecar that was there: the policy decides
        assert d.allowed and d.degraded
    finally:
        sc.cleanup()


def test_socket_from_environment(sidecar: Sidecar, monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("SLUICE_SOCKET", sidecar.socket)
    assert Client().socket_path == sidecar.socket
    monkeypatch.delenv("SLUICE_SOCKET")
    monkeypatch.chdir(tmp_path)
    assert Client(lazy=True).socket_path == os.path.join(str(tmp_path), "var", "sluice.sock")
    # A relative path is resolved once: a client that changes directory keeps its sidecar.
    monkeypatch.chdir(os.path.dirname(sidecar.socket))
    c = Client(os.path.basename(sidecar.socket))
    monkeypatch.chdir(tmp_path)
    assert c.acquire("cwd", HOUR).remaining == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_gets_its_own_connection(client: Client) -> None:
    limit = TokenBucket(max=10, refill_time=3600)
    assert client.acquire("fork", limit).remaining == 9
    pid = os.fork()
    if pid == 0:  # the child: the parent's connection must not be used
        try:
            ok = client.acquire("fork", limit).remaining == 8 and client._sock is not None
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert client.acquire("fork", limit).remaining == 7


def test_guard(client: Client) -> None:
    limit = TokenBucket(max=2, refill_time=3600)
    with client.limit("guard", limit) as d:
        assert d.allowed and d.remaining == 1
    guard = client.limit("guard", limit)
    with guard:
        pass
    with pytest.raises(RateLimited) as info:
        with guard:
            pytest.fail("entered a denied guard")
    assert info.value.decision.allowed is False and 3590 < info.value.retry_after <= 3600  # type: ignore[operator]

    calls: List[str] = []

    @client.limit(lambda user: f"report:{user}", TokenBucket(1, 3600))
    def report(user: str) -> str:
        calls.append(user)
        return user.upper()

    assert report("ann") == "ANN" and report("bob") == "BOB"
    with pytest.raises(RateLimited):
        report("ann")
    assert calls == ["ann", "bob"] and report.__name__ == "report"

    with pytest.raises(TypeError):
        with client.limit(lambda: "k", limit):
            pass
    with pytest.raises(TypeError):
        @client.limit("k", limit)
        async def coro() -> None: ...


def test_guard_waits_a_pacer_delay(client: Client) -> None:
    pacer = Pacer(rate=20, period=1, max_delay=1)  # one every 50 ms
    start = time.monotonic()
    for _ in range(3):
        with client.limit("paced", pacer):
            pass
    assert time.monotonic() - start >= 0.09


def test_quota(client: Client, sidecar: Sidecar) -> None:
    """A quota (protocol version 5) through every way of sending one: its time zone reaches the
    sidecar, which counts per local day (explicit times: a day in Paris in winter starts at
    23:00 UTC)."""
    from sluice import Quota
    q = Quota(2, "day", tz="Europe/Paris")
    noon = datetime.datetime(2026, 1, 15, 12, tzinfo=datetime.timezone.utc)
    midnight = datetime.datetime(2026, 1, 15, 23, tzinfo=datetime.timezone.utc)  # Paris, Jan 16
    d = client.acquire("q", q, at=noon)
    assert d.allowed and d.remaining == 1 and d.limit == 2
    assert client.acquire("q", "quota:limit=2,period=day,tz=Europe/Paris", at=noon).allowed
    d = client.acquire("q", q, at=noon)
    assert not d.allowed and d.retry_after == pytest.approx(11 * 3600)
    assert client.peek("q", q, at=midnight).remaining == 2  # a new day in Paris
    assert client.multi([MultiItem("q2", q), MultiItem("q2", HOUR)], at=noon).allowed
    assert client.pipeline().acquire("q3", q, at=noon).execute()[0].allowed

    async def from_asyncio() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as ac:
            d = await ac.acquire("q", q, at=midnight)
            assert d.allowed and d.remaining == 1
    asyncio.run(from_asyncio())
