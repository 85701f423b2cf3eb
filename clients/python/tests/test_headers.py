"""The HTTP header fields of a decision, checked against the vectors the Go client's tests read too."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest
from conftest import REPO

from sluice import Concurrency, Decision, FixedWindow, GCRA, Lease, Limit, Named, Pacer, SlidingLog, TokenBucket
from sluice import WindowCounters, policy, ratelimit_headers, response_headers, response_headers_of, retry_after

VECTORS = os.path.join(REPO, "clients", "testdata", "ratelimit-headers.json")


def vectors(part: str = "vectors") -> Any:
    with open(VECTORS) as f:
        return json.load(f)[part]


def decision(d: Dict[str, Any]) -> Decision:
    return Decision(d["allowed"], d["remaining"], d["limit"], d["retry_after_ns"], d["reset_after_ns"],
                    d.get("delay_ns", 0), degraded=d.get("degraded", False),
                    shadow_denied=d.get("shadow_denied", False),
                    limits=tuple(decision(x) for x in d.get("limits", ())), bound=d.get("bound", 0))


@pytest.mark.parametrize("v", vectors(), ids=lambda v: v["name"])
def test_vectors(v: Dict[str, Any]) -> None:
    got = dict(response_headers(decision(v["decision"]), Limit.parse(v["limit"]), v["policy"]))
    assert got == v["headers"]


@pytest.mark.parametrize("v", vectors("several"), ids=lambda v: v["name"])
def test_several_policies(v: Dict[str, Any]) -> None:
    ps = [(p["policy"], Limit.parse(p["limit"]), decision(p["decision"])) for p in v["policies"]]
    assert dict(response_headers_of(ps)) == v["headers"]


@pytest.mark.parametrize("v", vectors("lists"), ids=lambda v: v["name"])
def test_lists(v: Dict[str, Any]) -> None:
    # A named list's decision: the headers of one policy per limit, from the single-policy
    # functions too; beside another policy, the list's limits stand in its place.
    d, lim = decision(v["decision"]), Limit.parse(v["limit"])
    assert dict(response_headers(d, lim, v["policy"])) == v["headers"]
    assert dict(ratelimit_headers(d, lim, v["policy"])) == {k: h for k, h in v["headers"].items() if k != "Retry-After"}
    other = ("other", TokenBucket(1000, 3600, 1000), Decision(True, 999, 1000, -1, 1_000_000_000, 0))
    got = dict(response_headers_of([other, (v["policy"], lim, d)]))
    assert got["RateLimit-Policy"] == '"other";q=1000;w=3600, ' + v["headers"]["RateLimit-Policy"]


def test_enough_list_vectors() -> None:
    assert len(vectors("lists")) >= 4


def test_no_policies() -> None:
    with pytest.raises(ValueError, match="no policies"):
        response_headers_of([])


def test_enough_vectors() -> None:
    vs = vectors()
    assert len(vs) >= 20
    algorithms = {v["limit"].split(":")[0] for v in vs}
    assert {"token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log", "window_counters",
            "pacer", "concurrency", "api"} <= algorithms  # every algorithm, and a named limit


def test_a_lease_is_a_concurrency_decision() -> None:
    # A lease of a named limit (its algorithm is the sidecar's) reports as a concurrency limit's.
    held = Lease(False, 0, 2, 60_000_000_000, 60_000_000_000, 0, id=0)
    assert response_headers(held, Named("jobs"), "n") == [
        ("RateLimit-Policy", '"n";q=2;qu="concurrent-requests"'), ("RateLimit", '"n";r=0')]
    assert retry_after(held) is None


def test_policies() -> None:
    assert policy(TokenBucket(10, 3600, 1)) == (10, 36000)
    assert policy(TokenBucket(10, 3600)) == (10, 3600)
    assert policy(TokenBucket(10, 1, 3)) == (10, 4)
    assert policy(GCRA(4, 1, 1)) == (5, 5)
    assert policy(GCRA(0, 10, 1)) == (1, 1)  # w is at least a second
    assert policy(FixedWindow(100, 60)) == (100, 60)
    assert policy(Pacer(4, 1, 2)) == (9, 3)
    assert policy(SlidingLog(5, 10)) == (5, 10)
    assert policy(WindowCounters(60, 3600)) == (60, 3600)
    assert policy(Concurrency(4, 60)) == (4, None)
    with pytest.raises(ValueError, match="named limit"):
        policy(Named("api"))


def test_header_values() -> None:
    allowed = Decision(True, 7, 10, -1, 1_500_000_000, 0)
    assert ratelimit_headers(allowed, FixedWindow(10, 60), "api") == [
        ("RateLimit-Policy", '"api";q=10;w=60'), ("RateLimit", '"api";r=7;t=2')]
    assert retry_after(allowed) is None
    denied = Decision(False, 0, 10, 2_000_000_001, 30_000_000_000, 0)
    assert retry_after(denied) == "3"  # rounded up
    assert response_headers(denied, FixedWindow(10, 60))[-1] == ("Retry-After", "3")
    assert retry_after(Decision(False, 0, 10, -1, 0, 0)) is None  # never
