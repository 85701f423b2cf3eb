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


def test_named_limits(make_sidecar: Callable[..., Any], tmp_path: Any) -> None:
    path = os.path.join(str(tmp_path), "sluice.yaml")
    with open(path, "w") as f:
        f.write(CONFIG)
    sc = make_sidecar(args=["--config", path])
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
