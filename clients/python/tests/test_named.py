"""Named limits: the sidecar's config file defines them, callers use the name (protocol version 2)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable

import pytest

from sluice import AsyncClient, Client
from sluice.errors import InvalidLimit
from sluice.limits import Limit, Named, TokenBucket

CONFIG = """limits:
  login:
    limit: "token_bucket:max=3,refill_time=1h,refill_amount=1"
  watched:
    limit: "gcra:burst=0,count=1,period=1h"
    shadow: true
  spied:
    limit: "gcra:burst=0,count=1,period=1h,shadow=true"
"""


def with_config(make_sidecar: Callable[..., Any], tmp_path: Any, text: str) -> Any:
    """A sidecar of the config file text."""
    path = os.path.join(str(tmp_path), "sluice.yaml")
    with open(path, "w") as f:
        f.write(text)
    return make_sidecar(args=["--config", path])


def test_named_limits(make_sidecar: Callable[..., Any], tmp_path: Any) -> None:
    sc = with_config(make_sidecar, tmp_path, CONFIG)
    with Client(sc.socket, on_unavailable="raise") as c:
        got = [c.acquire("alice", "login").allowed for _ in range(4)]
        assert got == [True, True, True, False]
        # The name and its spec are one bucket.
        assert not c.acquire("alice", TokenBucket(3, 3600, 1)).allowed
        assert c.acquire("bob", Named("login")).remaining == 2
        # A shadow limit answers its denials as allowed.
        assert all(c.acquire("eve", "watched").allowed for _ in range(3))
        assert c.stats()["shadow_denied"] == 2
        # So does one whose spec says shadow=true.
        assert all(c.acquire("mallory", "spied").allowed for _ in range(3))
        assert c.stats()["shadow_denied"] == 4
        with pytest.raises(InvalidLimit, match="nope"):
            c.acquire("x", Named("nope"))


def test_names_parse() -> None:
    assert Limit.parse("login") == Named("login")
    assert str(Named("api.v2-read")) == "api.v2-read"
    for bad in ("1x", "has space", "x" * 65):
        with pytest.raises(InvalidLimit):
            Named(bad)


def test_shadow(sidecar: Any) -> None:
    from sluice.limits import GCRA

    one = GCRA(0, 1, 3600)
    with Client(sidecar.socket, on_unavailable="raise") as c:
        first = c.acquire("s", one, shadow=True)
        assert first.allowed and not first.shadow_denied
        second = c.acquire("s", one, shadow=True)
        assert second.allowed and second.shadow_denied
        plain = c.acquire("s", one)
        assert not plain.allowed and not plain.shadow_denied


SHADOW_SPEC = "gcra:burst=0,count=1,period=1h,shadow=true"


def test_shadow_spec(sidecar: Any) -> None:
    from sluice.limits import GCRA

    lim = Limit.parse(SHADOW_SPEC)
    assert lim.shadow and lim == GCRA(0, 1, 3600, shadow=True)
    with Client(sidecar.socket, on_unavailable="raise") as c:
        first = c.acquire("s", SHADOW_SPEC)
        assert first.allowed and not first.shadow_denied
        # Past the limit: allowed, shadow-denied, as acquire(..., shadow=True).
        second = c.acquire("s", SHADOW_SPEC)
        assert second.allowed and second.shadow_denied
        assert c.acquire("s", lim, strict=True).shadow_denied
        assert c.pipeline().acquire("s", lim).execute()[0].shadow_denied
        assert c.stats()["shadow_denied"] == 3
        # The same bucket as the limit without shadow=true, which is denied.
        plain = c.acquire("s", GCRA(0, 1, 3600))
        assert not plain.allowed and not plain.shadow_denied
        # Only an acquire is a shadow request.
        peek = c.peek("s", lim)
        assert not peek.allowed and not peek.shadow_denied
        assert not c.multi([("s", lim)]).allowed
        assert c.reset("s", lim) is True
        assert c.stats()["shadow_denied"] == 3


def test_shadow_spec_async(sidecar: Any) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as c:
            assert not (await c.acquire("a", SHADOW_SPEC)).shadow_denied
            second = await c.acquire("a", SHADOW_SPEC)
            assert second.allowed and second.shadow_denied
            assert not (await c.acquire("a", SHADOW_SPEC[:-len(",shadow=true")])).allowed
            assert not (await c.peek("a", SHADOW_SPEC)).allowed
            assert not (await c.multi([("a", SHADOW_SPEC)])).allowed
    asyncio.run(asyncio.wait_for(main(), 20))


QUOTAS = """limits:
  login: ["token_bucket:max=5,refill_time=1h,refill_amount=5", "quota:limit=3,period=day,tz=Europe/Paris"]
  api:
    limit: "quota:limit=1,period=month,tz=America/New_York,anchor=31"
    overrides:
      "tenant:acme": "quota:limit=4,period=month"
      "tenant:*:admin": ["gcra:burst=9,count=1,period=1h", "quota:limit=2,period=week"]
      "tenant:*": "token_bucket:max=3,refill_time=1h"
"""


def test_lists_quotas_and_overrides(make_sidecar: Callable[..., Any], tmp_path: Any) -> None:
    # A named list, a named quota and its overrides (exact, glob, prefix) through the client,
    # sync and async, and a middleware.
    from sluice.wsgi import RateLimitMiddleware
    from sluice.errors import SluiceError
    sc = with_config(make_sidecar, tmp_path, QUOTAS)
    with Client(sc.socket, on_unavailable="raise") as c:
        # The list: the day's quota of 3 binds before the bucket of 5; nothing is taken on a denial.
        got = [(d.allowed, d.remaining, d.limit) for d in (c.acquire("alice", "login") for _ in range(4))]
        assert got == [(True, 2, 3), (True, 1, 3), (True, 0, 3), (False, 0, 3)]
        # Each limit's decision too (protocol version 7), in the list's order, and which binds.
        d = c.peek("alice", "login")
        assert d.remaining == 0 and d.bound == 1
        assert [(x.allowed, x.remaining, x.limit) for x in d.limits] == [(True, 2, 5), (False, 0, 3)]
        d = c.refund("alice", "login", 1)
        assert d.remaining == 1 and [x.remaining for x in d.limits] == [3, 1]
        assert c.acquire("dave", "token_bucket:max=5,refill_time=1h").limits == ()  # one limit: no list
        assert c.reset("alice", "login") and c.peek("alice", "login").remaining == 3
        with pytest.raises(SluiceError, match="cannot name a list"):
            c.multi([("alice", "login", 1)])
        with pytest.raises(SluiceError, match="cannot be leased"):
            c.lease("alice", "login")
        # The quota and its overrides: the most specific wins.
        assert [c.acquire("someone", "api").allowed for _ in range(2)] == [True, False]
        assert c.acquire("tenant:acme", "api").limit == 4
        assert c.acquire("tenant:acme:admin", "api").limit == 2  # the glob, a list: its quota binds
        assert c.acquire("tenant:beta", "api").limit == 3
        m = c.multi([("tenant:acme", "api", 1), ("tenant:beta", "api", 1)])
        assert m.allowed and [d.limit for d in m] == [4, 3]

    async def main() -> None:
        async with AsyncClient(sc.socket, on_unavailable="raise") as ac:
            d = await ac.acquire("bob", "login")
            assert d.limit == 3 and d.bound == 1 and [x.remaining for x in d.limits] == [4, 2]
            d = await ac.refund("bob", "login", 1)
            assert [x.remaining for x in d.limits] == [5, 3]
            assert (await ac.acquire("tenant:acme", "api")).remaining == 1
    asyncio.run(main())

    # A middleware on the list lists each of its limits, RateLimit the binding one's; on the
    # quota, each key's override.
    with Client(sc.socket, on_unavailable="raise") as c:
        def app(environ: Any, start_response: Any) -> Any:
            start_response("200 OK", [])
            return [b"ok"]
        got: Any = {}

        def call(mw: Any, key: str) -> Any:
            def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
                got["status"], got["headers"] = status, dict(headers)
            b"".join(mw({"REQUEST_METHOD": "GET", "PATH_INFO": "/", "KEY": key}, start_response))
            return got["status"], got["headers"]
        mw = RateLimitMiddleware(app, c, "login", key=lambda e: e["KEY"], name="login")
        status, headers = call(mw, "carol")
        assert status == "200 OK" and headers["RateLimit-Policy"] == '"login.1";q=5, "login.2";q=3'
        assert headers["RateLimit"].startswith('"login.2";r=2;t=')
        mw = RateLimitMiddleware(app, c, "api", key=lambda e: e["KEY"], name="api")
        assert call(mw, "tenant:gamma")[1]["RateLimit-Policy"] == '"api";q=3'
