"""The limits storage against the real sidecar: the mapping, the URI, keys, reset and failures.

limits' own storage and strategy tests run against it too (limits-suite/);
these pin down what they do not: where each decision's window lies, the
counts limits reads back, what reset reaches, and what a caller sees when
the sidecar is gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import multiprocessing
import os
import subprocess
import sys
import time
from typing import Any, Callable, Iterator, List, Tuple

import pytest

pytest.importorskip("limits", reason="the limits storage's tests need limits (requirements-test.txt): make "
                                     "test runs them with .venv/bin/python, which make setup prepares")

from limits import RateLimitItemPerDay, RateLimitItemPerHour, RateLimitItemPerMinute, parse
from limits.errors import ConfigurationError, StorageError
from limits.storage import storage_from_string
from limits.strategies import (
    FixedWindowRateLimiter, MovingWindowRateLimiter, RateLimiter, SlidingWindowCounterRateLimiter,
)

import sluice
from conftest import HERE, Sidecar
from sluice import Client, SlidingLog, SlidingWindow, Unavailable
from sluice import _limits_plan as plan
from sluice import aio_limits_storage, limits_storage

SRC = os.path.abspath(os.path.join(HERE, "..", "src"))
DAY = 86400


def storage(sc: Sidecar, **options: Any) -> limits_storage.SluiceStorage:
    return limits_storage.SluiceStorage("sluice://" + sc.socket, timeout=10, **options)


@pytest.fixture
def s(sidecar: Sidecar) -> limits_storage.SluiceStorage:
    return storage(sidecar)


@pytest.fixture
def client(sidecar: Sidecar) -> Iterator[Client]:
    with Client(sidecar.socket, timeout=10, on_unavailable="raise") as c:
        yield c


def away_from_boundary(window: int, margin: float) -> None:
    """Wait, if needed, until at least ``margin`` seconds are left in the epoch-aligned window of
    ``window`` seconds, so that what a test does in the next ``margin`` stays in one window."""
    left = window - time.time() % window
    if left < margin:
        time.sleep(left + 0.01)


# ---- the package ------------------------------------------------------------


def test_importing_sluice_imports_no_limits() -> None:
    code = ("import sys, sluice, sluice.aio, sluice.wsgi, sluice.asgi; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'limits'], 'limits was imported'; "
            "from limits.storage import SCHEMES; assert 'sluice' not in SCHEMES; "
            "import sluice.limits_storage; assert 'sluice' in SCHEMES and 'async+sluice' not in SCHEMES; "
            "import sluice.aio_limits_storage; assert 'async+sluice' in SCHEMES; print('ok')")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC), capture_output=True,
                       text=True, timeout=120)
    assert p.stdout.strip() == "ok", p.stderr


@pytest.mark.parametrize("uri, options, path, timeout, prefix", [
    ("sluice:///run/sluice/sluice.sock", {}, "/run/sluice/sluice.sock", "default", "LIMITS:"),
    ("sluice://var/sluice.sock", {}, "var/sluice.sock", "default", "LIMITS:"),
    ("sluice://", {}, "var/sluice.sock", "default", "LIMITS:"),
    ("sluice:///tmp/a%20b.sock?timeout=0.5&key_prefix=app", {}, "/tmp/a b.sock", 0.5, "app:"),
    ("sluice:///s.sock?timeout=0.5", {"timeout": 2, "key_prefix": ""}, "/s.sock", 2.0, ""),
    ("sluice:///s.sock?timeout=none", {}, "/s.sock", None, "LIMITS:"),
])
def test_uri(uri: str, options: Any, path: str, timeout: Any, prefix: str, monkeypatch: pytest.MonkeyPatch,
             tmp_path: Any) -> None:
    # Lazy, as an option or in the query: nothing listens at these paths. A relative path is the
    # working directory's.
    monkeypatch.delenv("SLUICE_SOCKET", raising=False)
    monkeypatch.chdir(tmp_path)
    if timeout == "default":
        timeout = Client("x", lazy=True).timeout
    lazy_query = uri + ("&" if "?" in uri else "?") + "lazy=true"
    for scheme, cls in (("", limits_storage.SluiceStorage), ("async+", aio_limits_storage.SluiceStorage)):
        for st in (storage_from_string(scheme + uri, **options, lazy=True),
                   storage_from_string(scheme + lazy_query, **options)):
            assert isinstance(st, cls)
            assert (st.client.socket_path, st.client.timeout, st._plans.prefix) == (
                os.path.join(str(tmp_path), path), timeout, prefix)
            assert st.client.on_unavailable == "raise"


@pytest.mark.parametrize("uri, options, message", [
    ("sluice:///s.sock?retries=3", {}, "unknown sluice storage option 'retries'"),
    ("sluice:///s.sock", {"pool_size": 3}, "unknown sluice storage option 'pool_size'"),
    ("sluice:///s.sock?timeout=soon", {}, "timeout is seconds above 0 or none, got 'soon'"),
    ("sluice:///s.sock", {"timeout": 0}, "timeout is seconds above 0 or none, got 0"),
    ("sluice:///s.sock?timeout=nan", {}, "timeout is seconds above 0 or none, got 'nan'"),
    ("sluice:///s.sock?timeout=inf", {}, "timeout is seconds above 0 or none, got 'inf'"),
    ("sluice:///s.sock?lazy=maybe", {}, "lazy is true or false, got 'maybe'"),
])
def test_uri_errors(uri: str, options: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        storage_from_string(uri, **options)


def test_a_storage_checks_its_sidecar_when_made(tmp_path: Any, sidecar: Sidecar) -> None:
    # A wrong path fails when the app starts, naming the socket; lazy defers to the first call.
    missing = str(tmp_path / "nothing.sock")
    for scheme in ("sluice://", "async+sluice://"):
        with pytest.raises(Unavailable, match="nothing listens at " + missing):
            storage_from_string(scheme + missing)
    lazy = storage_from_string("sluice://" + missing, lazy=True)
    with pytest.raises(Unavailable):
        lazy.incr(RateLimitItemPerMinute(1).key_for("u"), 60)
    assert not lazy.check()
    assert storage_from_string("sluice://" + sidecar.socket).check()


# ---- fixed window -----------------------------------------------------------


def test_incr_counts_past_the_limit_and_clear_forgets(s: limits_storage.SluiceStorage) -> None:
    key = RateLimitItemPerMinute(1).key_for("u")
    assert [s.incr(key, 60), s.incr(key, 60, amount=10), s.get(key)] == [1, 11, 11]
    s.clear(key)
    assert s.get(key) == 0
    assert s.incr(key, 60) == 1


def test_fixed_window_starts_at_the_first_hit(s: limits_storage.SluiceStorage) -> None:
    # A day's window ends a day after the first hit, not at midnight UTC (where a window aligned
    # to the epoch would end).
    key = RateLimitItemPerDay(5).key_for("u")
    assert s.get_expiry(key) == pytest.approx(time.time(), abs=5)  # nothing counted: now
    t0 = time.time()
    s.incr(key, DAY)
    assert s.get_expiry(key) == pytest.approx(t0 + DAY, abs=5)
    stats = FixedWindowRateLimiter(s).get_window_stats(RateLimitItemPerDay(5), "u")
    assert stats.remaining == 4 and stats.reset_time == pytest.approx(t0 + DAY, abs=5)


def test_keys_without_a_window_are_refused(s: limits_storage.SluiceStorage) -> None:
    assert s.incr("plain", 60) == 1  # incr is told the window
    for read in (s.get, s.get_expiry, s.clear):
        with pytest.raises(ValueError, match="reads the window of a key from its end"):
            read("plain")


def test_long_keys_keep_their_window(make_sidecar: Callable[..., Sidecar]) -> None:
    # A key past the sidecar's 1024 bytes is its SHA-256, with limits' tail kept: get and reset
    # still read its window (reset lists it in slots of 256 bytes, which keep 192 key bytes).
    sc = make_sidecar(slot_size=256)
    s, client = storage(sc), Client(sc.socket, on_unavailable="raise")
    item = RateLimitItemPerMinute(3)
    key = item.key_for("x" * 2000)
    assert [s.incr(key, 60), s.incr(key, 60), s.get(key)] == [1, 2, 2]
    assert [e.key_text for e in client.scan("LIMITS:")] == [
        "LIMITS:sha256:" + hashlib.sha256(key.encode()).hexdigest() + "/3/1/minute"]
    assert s.reset() == 1
    assert s.get(key) == 0


# ---- moving window ----------------------------------------------------------


def test_moving_window_is_exact(s: limits_storage.SluiceStorage) -> None:
    key = RateLimitItemPerMinute(5).key_for("u")
    assert s.get_moving_window(key, 5, 60) == (pytest.approx(time.time(), abs=5), 0)
    t0 = time.time()
    assert [s.acquire_entry(key, 5, 60) for _ in range(6)] == [True] * 5 + [False]
    assert not s.acquire_entry(key, 5, 60, amount=6)  # never fits
    start, n = s.get_moving_window(key, 5, 60)
    assert n == 5 and start == pytest.approx(t0, abs=5)
    assert not s.acquire_entry(key, 0, 60)  # a limit of 0 admits nothing
    s.clear(key)
    assert s.get_moving_window(key, 5, 60)[1] == 0


def test_moving_window_start_is_the_oldest_entry(s: limits_storage.SluiceStorage, client: Client) -> None:
    # An entry half a minute old, one now: the window started with the older one. A window that is
    # neither empty nor full takes the second round trip (the multi that cannot pass).
    key = RateLimitItemPerMinute(5).key_for("u")
    old = time.time() - 30
    assert client.acquire(b"LIMITS:" + key.encode(), SlidingLog(5, 60), at=old).allowed
    assert s.acquire_entry(key, 5, 60)
    start, n = s.get_moving_window(key, 5, 60)
    assert n == 2 and start == pytest.approx(old, abs=1)  # not the newest entry's time, now
    assert MovingWindowRateLimiter(s).get_window_stats(RateLimitItemPerMinute(5), "u") == (
        pytest.approx(old + 60, abs=1), 3)
    assert client.peek(b"LIMITS:" + key.encode(), SlidingLog(5, 60)).remaining == 3  # the probe took nothing


def test_moving_window_above_the_log_is_never_more_lenient(s: limits_storage.SluiceStorage, client: Client) -> None:
    key = RateLimitItemPerMinute(5000).key_for("u")
    assert s.acquire_entry(key, 5000, 60, amount=4999)
    assert s.acquire_entry(key, 5000, 60)
    assert not s.acquire_entry(key, 5000, 60)
    assert s.get_moving_window(key, 5000, 60)[1] == 5000
    assert [e.algorithm for e in client.scan("LIMITS:")] == [sluice.Algorithm.WINDOW_COUNTERS]


# ---- sliding window counter -------------------------------------------------


def test_sliding_window_counter_admits_what_limits_admits(s: limits_storage.SluiceStorage, client: Client) -> None:
    # prev requests in yesterday's (epoch-aligned) day window weigh prev * (share of today left):
    # limits admits while floor(weighted) + hits <= limit, so limit - floor(weighted) more today.
    # A bucket deciding weighted + hits <= limit exactly would admit one fewer.
    limit = 20
    key = RateLimitItemPerDay(limit).key_for("u")
    now = time.time()
    # A previous count whose weight now is not within a hundredth of a whole number (where the two
    # rules agree): there is one but in the day's first seconds.
    fits = [(p, p * (DAY - now % DAY) / DAY) for p in range(7, 20)]
    fits = [(p, w) for p, w in fits if 0.01 < w % 1 < 0.99]
    if not fits:
        pytest.skip("every previous count weighs a whole number now (the day's first seconds)")
    prev, weighted = fits[0]
    start = now - now % DAY
    assert client.acquire(b"LIMITS:" + key.encode(), plan.sliding_limit(limit, DAY), prev * plan.SCALE,
                          at=start - DAY / 2).allowed
    admitted = 0
    while s.acquire_sliding_window_entry(key, limit, DAY):
        admitted += 1
    assert admitted == limit - math.floor(weighted)
    p, p_ttl, c, c_ttl = s.get_sliding_window(key, DAY)
    elapsed = time.time() % DAY
    assert (p, c) == (prev, admitted)
    assert p_ttl == pytest.approx(DAY - elapsed, abs=5) and c_ttl == pytest.approx(2 * DAY - elapsed, abs=5)
    stats = SlidingWindowCounterRateLimiter(s).get_window_stats(RateLimitItemPerDay(limit), "u")
    assert stats.remaining == 0
    s.clear_sliding_window(key, DAY)
    assert s.get_sliding_window(key, DAY)[::2] == (0, 0)


def test_sliding_window_counter_costs_and_limits(s: limits_storage.SluiceStorage) -> None:
    key = RateLimitItemPerHour(10).key_for("u")
    away_from_boundary(3600, 30)
    assert not s.acquire_sliding_window_entry(key, 10, 3600, amount=11)  # never fits
    assert s.acquire_sliding_window_entry(key, 10, 3600, amount=10)
    assert not s.acquire_sliding_window_entry(key, 10, 3600)
    assert s.get_sliding_window(key, 3600)[2] == 10
    assert not s.acquire_sliding_window_entry(key, 0, 3600)  # a limit of 0 admits nothing
    with pytest.raises(ConfigurationError, match="at most 9223372036853"):
        s.acquire_sliding_window_entry(key, plan.MAX_SLIDING + 1, 3600)


# ---- reset ------------------------------------------------------------------


def test_reset_clears_every_bucket_under_the_prefix(make_sidecar: Callable[..., Sidecar]) -> None:
    sc = make_sidecar(slot_size=256)
    s = storage(sc)
    minute, other = RateLimitItemPerMinute(10), RateLimitItemPerMinute(10, namespace="OTHER")
    keys = [minute.key_for(str(i)) for i in range(5)] + [other.key_for(str(i)) for i in range(5)]
    for k in keys:
        s.incr(k, 60)
    assert s.acquire_entry(minute.key_for("m"), 10, 60)
    assert s.acquire_entry(RateLimitItemPerMinute(5000).key_for("big"), 5000, 60)
    assert s.acquire_sliding_window_entry(minute.key_for("w"), 10, 60)
    with Client(sc.socket, on_unavailable="raise") as c:
        c.acquire("someone-else:1/1/minute", SlidingWindow(10, 60))  # not under the prefix
        assert s.reset() == 13
        assert c.peek("someone-else:1/1/minute", SlidingWindow(10, 60)).remaining == 9
    assert [s.get(k) for k in keys] == [0] * 10
    assert s.get_moving_window(minute.key_for("m"), 10, 60)[1] == 0
    assert s.get_sliding_window(minute.key_for("w"), 60)[2] == 0
    assert s.reset() == 0


def test_reset_needs_keys_in_the_slots(make_sidecar: Callable[..., Sidecar]) -> None:
    s = storage(make_sidecar(slot_size=64))
    s.incr(RateLimitItemPerMinute(10).key_for("u"), 60)
    with pytest.raises(NotImplementedError, match="--slot-size 128 or 256"):
        s.reset()


# ---- failures ---------------------------------------------------------------


def test_an_unreachable_sidecar_raises(sidecar: Sidecar) -> None:
    s, wrapped = storage(sidecar), storage_from_string("sluice://" + sidecar.socket, wrap_exceptions=True)
    key = RateLimitItemPerMinute(10).key_for("u")
    assert s.check() and s.incr(key, 60) == 1
    sidecar.stop()
    assert not s.check()
    for call in (lambda st: st.incr(key, 60), lambda st: st.get(key), lambda st: st.acquire_entry(key, 10, 60),
                 lambda st: st.acquire_sliding_window_entry(key, 10, 60), lambda st: st.get_sliding_window(key, 60)):
        with pytest.raises(Unavailable):
            call(s)
        with pytest.raises(StorageError) as e:
            call(wrapped)
        assert isinstance(e.value.storage_error, Unavailable)
    sidecar.start()
    deadline = time.monotonic() + 60  # the client's breaker may hold calls back for a while
    while not s.check():
        assert time.monotonic() < deadline, "check() did not see the sidecar back within a minute"
        time.sleep(0.05)
    assert s.incr(key, 60) == 2


# ---- asyncio ----------------------------------------------------------------


def test_async_storage_answers_as_the_sync_one(sidecar: Sidecar) -> None:
    sync = storage(sidecar, key_prefix="sync")
    hour = RateLimitItemPerHour(3)

    async def both() -> List[Tuple[str, Any]]:
        a = storage_from_string("async+sluice://" + sidecar.socket, timeout=10, key_prefix="async")
        out = []
        for name, args in [("check", ()), ("incr", (hour.key_for("f"), 3600, 2)), ("get", (hour.key_for("f"),)),
                           ("acquire_entry", (hour.key_for("m"), 3, 3600, 2)),
                           ("acquire_entry", (hour.key_for("m"), 3, 3600, 2)),
                           ("acquire_sliding_window_entry", (hour.key_for("w"), 3, 3600, 3)),
                           ("acquire_sliding_window_entry", (hour.key_for("w"), 3, 3600)),
                           ("reset", ()), ("get", (hour.key_for("f"),))]:
            got = await getattr(a, name)(*args)
            assert got == getattr(sync, name)(*args), name
            out.append((name, got))
        await a.clear(hour.key_for("f"))
        await a.clear_sliding_window(hour.key_for("w"), 3600)
        assert await a.get_expiry(hour.key_for("f")) == pytest.approx(time.time(), abs=5)
        assert (await a.get_moving_window(hour.key_for("m"), 3, 3600))[1] == 0
        assert (await a.get_sliding_window(hour.key_for("w"), 3600))[2] == 0
        await a.client.close()
        return out

    away_from_boundary(3600, 30)
    assert [v for _, v in asyncio.run(both())] == [True, 2, 2, True, False, True, False, 3, 0]


def test_async_storage_raises_when_the_sidecar_is_gone(sidecar: Sidecar) -> None:
    key = RateLimitItemPerMinute(10).key_for("u")

    async def gone() -> None:
        a = storage_from_string("async+sluice://" + sidecar.socket, timeout=10, wrap_exceptions=True)
        assert await a.check() and await a.incr(key, 60) == 1
        sidecar.stop()
        assert not await a.check()
        with pytest.raises(StorageError) as e:
            await a.acquire_entry(key, 10, 60)
        assert isinstance(e.value.storage_error, Unavailable)
        await a.client.close()

    asyncio.run(gone())


def test_async_tasks_admit_exactly_the_limit(sidecar: Sidecar) -> None:
    from limits.aio.strategies import MovingWindowRateLimiter as AsyncMoving

    async def burst() -> int:
        st = storage_from_string("async+sluice://" + sidecar.socket, timeout=10)
        limiter, item = AsyncMoving(st), parse("50/minute")
        hits = await asyncio.gather(*(limiter.hit(item, "burst") for _ in range(200)))
        await st.client.close()
        return sum(hits)

    assert asyncio.run(burst()) == 50


# ---- processes --------------------------------------------------------------


def _hits(uri: str, strategy: str, item: str, n: int, barrier: Any, out: Any) -> None:
    limiter: RateLimiter = {
        "fixed": FixedWindowRateLimiter, "moving": MovingWindowRateLimiter, "sliding": SlidingWindowCounterRateLimiter,
    }[strategy](storage_from_string(uri, timeout=30))
    lim = parse(item)
    barrier.wait(120)
    out.put(sum(limiter.hit(lim, "shared") for _ in range(n)))


@pytest.mark.parametrize("strategy", ["fixed", "moving", "sliding"])
def test_processes_admit_exactly_the_limit(sidecar: Sidecar, strategy: str) -> None:
    # 8 processes, released together, 25 hits each on one key of 50 per hour.
    away_from_boundary(3600, 30)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_hits, args=("sluice://" + sidecar.socket, strategy, "50/hour", 25, barrier, out))
             for _ in range(8)]
    for p in procs:
        p.start()
    admitted = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sum(admitted) == 50, admitted
