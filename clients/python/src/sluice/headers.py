"""HTTP headers from a decision: ``Retry-After`` and the IETF ``RateLimit`` fields.

Following draft-ietf-httpapi-ratelimit-headers, a response names its quota
policy and what is left of it::

    RateLimit-Policy: "default";q=100;w=60
    RateLimit: "default";r=42;t=17

``q`` is the policy's quota (the most requests a fresh bucket allows at
once), ``w`` its window in seconds, ``r`` the quota remaining, ``t`` the
seconds until the bucket is back to its fresh state. Seconds are whole,
rounded up. A limit maps to a policy as:

===============  ==========================  =====================================
algorithm        q                           w
===============  ==========================  =====================================
token_bucket     max                         refill_time * ceil(max / refill_amount)
gcra             burst + 1                   (burst + 1) * period / count
fixed_window     limit                       window
sliding_window   limit                       window
pacer            max_delay // interval + 1   q * interval, interval = ceil(period / rate)
===============  ==========================  =====================================

so ``q`` is the ``limit`` field of the decisions the sidecar answers and
``w`` the time an empty bucket takes to be full again.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from .limits import GCRA, FixedWindow, Limit, Pacer, SlidingWindow, TokenBucket
from .results import Decision

_NS = 1_000_000_000


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _seconds_up(ns: int) -> int:
    """Whole seconds, rounded up; 0 stays 0, negative counts as 0."""
    return _ceil_div(ns, _NS) if ns > 0 else 0


def policy(limit: Limit) -> Tuple[int, int]:
    """The (quota, window in whole seconds) of a limit's RateLimit-Policy; see the module doc."""
    if isinstance(limit, TokenBucket):
        steps = _ceil_div(limit.max, limit.refill_amount) if limit.refill_amount > 0 else 1
        return limit.max, max(1, _seconds_up(limit.refill_time_ns * steps))
    if isinstance(limit, GCRA):
        q = limit.burst + 1
        return q, max(1, _seconds_up(q * limit.period_ns // max(limit.count, 1)))
    if isinstance(limit, (FixedWindow, SlidingWindow)):
        return limit.limit, max(1, _seconds_up(limit.window_ns))
    if isinstance(limit, Pacer):
        interval = max(1, _ceil_div(limit.period_ns, max(limit.rate, 1)))
        q = limit.max_delay_ns // interval + 1
        return q, max(1, _seconds_up(q * interval))
    raise TypeError(f"no RateLimit policy for {limit!r}")


def _sf_string(name: str) -> str:
    """A structured-field string: printable ASCII in double quotes, with \\ and \" escaped."""
    if not all(" " <= ch <= "~" for ch in name):
        raise ValueError(f"a RateLimit policy name is printable ASCII, got {name!r}")
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def retry_after(decision: Decision) -> Optional[str]:
    """The ``Retry-After`` value of a denial, whole seconds rounded up; None if not applicable."""
    if decision.allowed or decision.retry_after_ns < 0:
        return None
    return str(_seconds_up(decision.retry_after_ns))


def ratelimit_headers(decision: Decision, limit: Limit, name: str = "default") -> List[Tuple[str, str]]:
    """The ``RateLimit-Policy`` and ``RateLimit`` headers of a decision, as (name, value) pairs.

    A degraded decision (the sidecar was not asked) has none: nothing is known.
    """
    if decision.degraded:
        return []
    q, w = policy(limit)
    n = _sf_string(name)
    return [
        ("RateLimit-Policy", f"{n};q={q};w={w}"),
        ("RateLimit", f"{n};r={max(decision.remaining, 0)};t={_seconds_up(decision.reset_after_ns)}"),
    ]


def response_headers(decision: Decision, limit: Limit, name: str = "default") -> List[Tuple[str, str]]:
    """Every header for a response: the RateLimit pair and, for a denial, ``Retry-After``."""
    headers = ratelimit_headers(decision, limit, name)
    ra = retry_after(decision)
    if ra is not None:
        headers.append(("Retry-After", ra))
    return headers
