"""The AsyncClient against the real sluiced (each test runs its own event loop)."""

from __future__ import annotations

import asyncio
import datetime
import gc
import warnings
from typing import Any, Awaitable, Callable, List, TypeVar

import pytest
from conftest import Sidecar

from sluice import (
    GCRA, AsyncClient, Client, InvalidCost, InvalidKey, InvalidLimit, Pacer, RateLimited, TokenBucket,
    TooManyItems, Unavailable,
)

T = TypeVar("T")
HOUR = TokenBucket(max=3, refill_time=3600)
T0 = datetime.datetime.fromtimestamp(1_700_000_040, datetime.timezone.utc)


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(fn(), 20))


def test_every_operation(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as c:
            assert (await c.hello()).slot_count == 4096
            assert await c.ping() is None
            assert [(await c.acquire("k", HOUR)).remaining for _ in range(3)] == [2, 1, 0]
            denied = await c.acquire("k", HOUR)
            assert not denied.allowed and 3590 < denied.retry_after <= 3600  # type: ignore[operator]
            assert not (await c.peek("k", HOUR)).allowed
            assert (await c.refund("k", HOUR, 2)).remaining == 2
            assert await c.reset("k", HOUR) is True and await c.reset("k", HOUR) is False
            m = await c.multi([("a", HOUR, 2), ("b", GCRA(0, 1, 60))], at=T0)
            assert m.allowed and [d.remaining for d in m] == [1, 0]
            assert not (await c.multi([("a", HOUR, 2), ("c", HOUR)], at=T0)).allowed
            assert sorted([e.key async for e in c.scan(count=1)]) == [b"a", b"b"]
            assert (await c.scan_page("a")).entries[0].key == b"a"
            assert (await c.stats())["ops"] > 10
            with pytest.raises(InvalidLimit):
                await c.acquire("k", TokenBucket(0, 1))
            with pytest.raises(InvalidCost):
                await c.acquire("k", HOUR, -1)
            with pytest.raises(InvalidKey):
                await c.acquire(b"", HOUR)
            with pytest.raises(TooManyItems):
                await c.multi([("k", HOUR)] * 17)
            assert (await c.acquire("k", HOUR)).allowed  # errors left the connection usable
    run(main)


def test_tasks_share_one_connection_without_over_admission(sidecar: Sidecar) -> None:
    limit = TokenBucket(max=50, refill_time=3600)

    async def main() -> None:
        c = AsyncClient(sidecar.socket, on_unavailable="raise")
        got = await asyncio.gather(*[c.acquire("hammer", limit) for _ in range(300)])
        assert sum(d.allowed for d in got) == 50
        assert [d.remaining for d in got[:50]] == list(range(49, -1, -1))  # answered in order
        before = (await c.stats())["connections_total"]
        # Many clients, many tasks, one budget.
        others = [AsyncClient(sidecar.socket, on_unavailable="raise") for _ in range(4)]
        more = await asyncio.gather(*[o.acquire("hammer2", limit) for o in others for _ in range(40)])
        assert sum(d.allowed for d in more) == 50
        stats = await c.stats()
        # All the tasks of a client used its one connection (and its start check one more).
        assert stats["connections_total"] - before == 8
        for x in [c] + others:
            await x.close()
    run(main)


def test_pipeline(sidecar: Sidecar) -> None:
    limit = TokenBucket(max=100, refill_time=3600)

    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as c:
            p = c.pipeline()
            for _ in range(300):
                p.acquire("pipe", limit)
            got = await p.execute()
            assert [d.allowed for d in got] == [True] * 100 + [False] * 200
            mixed = await c.pipeline().ping().acquire("x", limit, -1).stats().execute(raise_on_error=False)
            assert mixed[0] is None and isinstance(mixed[1], InvalidCost) and isinstance(mixed[2], dict)
            with pytest.raises(InvalidCost):
                await c.pipeline().acquire("x", limit, -1).execute()
            assert await c.pipeline().execute() == []
    run(main)


def test_restart_reconnects_and_policies_apply_while_down(sidecar: Sidecar) -> None:
    limit = TokenBucket(max=5, refill_time=3600)

    async def main() -> None:
        clients = {p: AsyncClient(sidecar.socket, timeout=0.5, on_unavailable=p) for p in ("open", "closed", "raise")}
        assert (await clients["raise"].acquire("r", limit, 3)).remaining == 2
        for c in clients.values():
            await c.ping()
        sidecar.stop()
        await asyncio.sleep(0.01)  # let the loop see the connections close
        d = await clients["open"].acquire("r", limit)
        assert d.allowed and d.degraded
        assert (await clients["open"].multi([("r", limit)])).degraded
        d = await clients["closed"].acquire("r", limit)
        assert not d.allowed and d.degraded
        with pytest.raises(Unavailable):
            await clients["raise"].acquire("r", limit)
        with pytest.raises(Unavailable):
            await clients["open"].ping()
        got = await clients["closed"].pipeline().acquire("r", limit).stats().execute(raise_on_error=False)
        assert not got[0].allowed and got[0].degraded and isinstance(got[1], Unavailable)

        sidecar.start()
        got = [await c.acquire("r", limit) for c in clients.values()]
        assert [(d.remaining, d.degraded) for d in got] == [(1, False), (0, False), (0, False)]
        assert not got[2].allowed
        # A restart the loop has not noticed yet: the request is retried on a new connection.
        sidecar.restart()
        assert (await clients["raise"].refund("r", limit, 1)).remaining == 1
        for c in clients.values():
            await c.close()
    run(main)


def test_used_from_a_second_event_loop(sidecar: Sidecar) -> None:
    c = AsyncClient(sidecar.socket, on_unavailable="raise")
    with warnings.catch_warnings():
        # The first loop's connection is left behind: its transport warns when
        # collected, as any transport not closed before its loop ended.
        warnings.simplefilter("ignore", ResourceWarning)
        assert run(lambda: c.acquire("loops", HOUR)).remaining == 2

        async def second() -> int:
            d = await c.acquire("loops", HOUR)
            await c.close()
            return d.remaining
        assert run(second) == 1
        gc.collect()


def test_guard(sidecar: Sidecar) -> None:
    limit = TokenBucket(max=1, refill_time=3600)

    async def main() -> None:
        c = AsyncClient(sidecar.socket, on_unavailable="raise")
        async with c.limit("g", limit) as d:
            assert d.allowed
        with pytest.raises(RateLimited) as info:
            async with c.limit("g", limit):
                pytest.fail("entered a denied guard")
        assert info.value.retry_after is not None

        calls: List[str] = []

        @c.limit(lambda user: "u:" + user, limit)
        async def handler(user: str) -> str:
            calls.append(user)
            return user

        assert await handler("a") == "a" and await handler("b") == "b"
        with pytest.raises(RateLimited):
            await handler("a")
        assert calls == ["a", "b"]
        with pytest.raises(TypeError):
            c.limit("k", limit)(lambda: None)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(3):
            async with c.limit("paced", Pacer(rate=20, period=1, max_delay=1)):
                pass
        assert loop.time() - start >= 0.09
        await c.close()
    run(main)


def test_sync_and_async_clients_share_the_budget(sidecar: Sidecar) -> None:
    limit = TokenBucket(max=10, refill_time=3600)
    with Client(sidecar.socket) as sync:
        for _ in range(4):
            sync.acquire("both", limit)

    async def main() -> Any:
        async with AsyncClient(sidecar.socket) as c:
            return await c.acquire("both", limit)
    assert run(main).remaining == 5
