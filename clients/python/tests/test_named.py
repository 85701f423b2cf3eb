"""Named limits: the sidecar's config file defines them, callers use the name (protocol version 2)."""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from sluice import Client
from sluice.errors import InvalidLimit
from sluice.limits import Limit, Named, TokenBucket

CONFIG = """limits:
  login:
    limit: "token_bucket:max=3,refill_time=1h,refill_amount=1"
  watched:
    limit: "gcra:burst=0,count=1,period=1h"
    shadow: true
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
