"""HTTP headers from a decision: ``Retry-After`` and the IETF ``RateLimit`` fields.

Following draft-ietf-httpapi-ratelimit-headers (-11), a response names its
quota policy and what is left of it::

    RateLimit-Policy: "default";q=100;w=60
    RateLimit: "default";r=42;t=17

``q`` is the decision's ``limit`` (the most requests of cost 1 a full bucket
allows), ``w`` the seconds an empty bucket takes to be full again, ``r``
the quota remaining, and ``t`` the draft's "effective window", the seconds
within which the client can use no more than ``r``: for an allowed request
the time until the bucket is back to its fresh state (``reset_after``), for
a denied one the time until it would be allowed (``retry_after``), because
until then 0 is all the client can use, and so that ``Retry-After`` (which
the draft says should not be earlier than the end of the effective window)
names the same moment. A request that can never pass (a cost above the
limit) has ``t`` the time until fresh and no ``Retry-After``. Seconds are
whole, rounded up. ``w`` by algorithm:

===============================  =========================================
algorithm                        w
===============================  =========================================
token_bucket                     ceil(max / refill_amount) * refill_time
gcra                             (burst + 1) * period / count
fixed_window, sliding_window,    window
sliding_log, window_counters
pacer                            q * period / rate
quota of days or weeks           their nominal length (86400 s a day)
quota of months or years         none (their length varies: ``t`` says when the period ends)
a named limit                    none (the sidecar's config has its parameters)
===============================  =========================================

A concurrency limit counts requests in progress, not over time: its fields
are ``RateLimit-Policy: "NAME";q=LIMIT;qu="concurrent-requests"`` (the
draft's quota unit for it) and ``RateLimit: "NAME";r=FREE``, and a denial
gets no ``Retry-After`` (a slot frees when a request in progress ends,
which nothing foresees). A degraded decision (the sidecar was not asked)
has no RateLimit fields, only ``Retry-After`` when it denies with a retry
time.

A request decided under several policies at once, all or nothing (a
``multi`` of one item per policy), gets :func:`response_headers_of`: the
draft's fields are lists, so ``RateLimit-Policy`` lists every policy, in
order, and ``RateLimit`` names the one closest to its limit, whose numbers
bind the client: if any denied, the denied one that allows last (one that
never allows counting as last), else the one with the least remaining; the
first of equals. ``Retry-After`` is that policy's::

    RateLimit-Policy: "burst";q=5;w=1, "daily";q=1000;w=86400
    RateLimit: "daily";r=0;t=36000

The decision of a named limit that lists several limits (the sidecar's
config: ``login: [SPEC, SPEC]``) carries each limit's decision
(``Decision.limits``, from a sidecar of protocol version 7): its headers,
from :func:`response_headers` as from :func:`response_headers_of`, are
those of several policies, one per limit of the list, named ``NAME.1``,
``NAME.2``, ... in the list's order (:func:`list_policies`)::

    RateLimit-Policy: "login.1";q=5, "login.2";q=1000
    RateLimit: "login.2";r=0;t=36000

The Go client's ``SetRateLimitHeaders`` and ``SetRateLimitHeadersOf`` give
the same fields for the same limits and decisions: both are checked
against one set of vectors, ``clients/testdata/ratelimit-headers.json``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .limits import Algorithm, Concurrency, Limit, Named
from .results import Decision, Lease, make_decision

_NS = 1_000_000_000
_MAX_I64 = (1 << 63) - 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _seconds_up(ns: int) -> int:
    """Whole seconds, rounded up; 0 stays 0, negative counts as 0."""
    return _ceil_div(ns, _NS) if ns > 0 else 0


def _window(limit: Limit, q: int) -> Optional[int]:
    """The seconds (rounded up) a bucket of ``limit`` holding ``q`` takes to refill from empty;
    None if its parameters make none, or it does not fit in int64 nanoseconds."""
    a, p0, p1, p2 = limit._wire
    ns = None
    if a == Algorithm.TOKEN_BUCKET:  # max, refill_time, refill_amount
        if p0 >= 0 and p1 >= 0 and p2 > 0:
            ns = _ceil_div(p0, p2) * p1
    elif a == Algorithm.GCRA:  # burst, count, period
        if p0 >= 0 and p2 >= 0 and p1 > 0:
            ns = _ceil_div((p0 + 1) * p2, p1)
    elif a in (Algorithm.FIXED_WINDOW, Algorithm.SLIDING_WINDOW, Algorithm.SLIDING_LOG,
               Algorithm.WINDOW_COUNTERS):  # limit, window
        ns = max(p1, 0)
    elif a == Algorithm.PACER:  # rate, period, max_delay
        if q >= 0 and p1 >= 0 and p0 > 0:
            ns = _ceil_div(q * p1, p0)
    elif a == Algorithm.QUOTA:  # limit, period (unit | every << 8): days and weeks have a nominal length
        unit, every = p1 & 0xFF, p1 >> 8
        if unit in (1, 2):
            ns = every * (86400 if unit == 1 else 7 * 86400) * _NS
    if not ns or ns > _MAX_I64:
        return None
    return _seconds_up(ns)


def policy(limit: Limit) -> Tuple[int, Optional[int]]:
    """The (quota, window in whole seconds) of a limit's RateLimit-Policy, from its parameters
    alone; window None for a limit without one (concurrency). The headers take the quota from
    the decision (its ``limit``), which is the same for the sidecar's decisions.

    A :class:`~sluice.Named` limit's parameters are in the sidecar's config: ValueError.
    """
    if isinstance(limit, Named):
        raise ValueError(f"the quota of the named limit {limit} is in the sidecar's config: "
                         "use ratelimit_headers with one of its decisions")
    a, p0, p1, p2 = limit._wire
    if a == Algorithm.GCRA:
        q = p0 + 1
    elif a == Algorithm.PACER:
        q = p2 // max(1, _ceil_div(p1, max(p0, 1))) + 1  # max_delay // interval + 1
    else:
        q = p0  # max, limit
    return q, None if isinstance(limit, Concurrency) else _window(limit, q)


def _sf_string(name: str) -> str:
    """A Structured Fields String (RFC 9651 section 3.3.3): '"' and '\\' escaped, each byte of
    the UTF-8 encoding outside printable ASCII replaced with '?' (as the Go client does)."""
    out = ['"']
    for b in name.encode("utf-8", "surrogatepass"):
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= b <= 0x7E:
            out.append(ch)
        else:
            out.append("?")
    out.append('"')
    return "".join(out)


def check_name(name: str) -> None:
    """Refuse a policy name that is not printable ASCII (a middleware checks its own at start-up,
    rather than sending '?' in place of its other characters)."""
    if not isinstance(name, str) or not all(" " <= ch <= "~" for ch in name):
        raise ValueError(f"a RateLimit policy name is printable ASCII, got {name!r}")


def retry_after(decision: Decision, limit: Optional[Limit] = None) -> Optional[str]:
    """The ``Retry-After`` value of a denial, whole seconds rounded up; None if not applicable:
    an allowed decision, one that can never pass, or a concurrency limit's denial (see the module
    doc). A :class:`~sluice.Lease` is a concurrency limit's decision, whatever ``limit`` is."""
    if decision.allowed or decision.retry_after_ns <= 0:
        return None
    if not decision.degraded and _leased(decision, limit):
        return None
    return str(_seconds_up(decision.retry_after_ns))


def _leased(decision: Decision, limit: Optional[Limit]) -> bool:
    return isinstance(decision, Lease) or isinstance(limit, Concurrency)


def ratelimit_headers(decision: Decision, limit: Limit, name: str = "default") -> List[Tuple[str, str]]:
    """The ``RateLimit-Policy`` and ``RateLimit`` headers of a decision, as (name, value) pairs.

    A degraded decision (the sidecar was not asked) has none: nothing is known. A named list's
    decision has those of every limit of the list (see the module doc).
    """
    if decision.degraded:
        return []
    if decision.limits:
        return [h for h in response_headers_of([(name, limit, decision)]) if h[0] != "Retry-After"]
    n = _sf_string(name)
    q = max(decision.limit, 0)
    pol = f"{n};q={q}"
    rl = f"{n};r={max(decision.remaining, 0)}"
    if _leased(decision, limit):
        return [("RateLimit-Policy", pol + ';qu="concurrent-requests"'), ("RateLimit", rl)]
    w = None if isinstance(limit, Named) else _window(limit, q)
    if w:
        pol += f";w={w}"
    t = decision.retry_after_ns if not decision.allowed and decision.retry_after_ns > 0 else decision.reset_after_ns
    return [("RateLimit-Policy", pol), ("RateLimit", f"{rl};t={_seconds_up(t)}")]


def response_headers(decision: Decision, limit: Limit, name: str = "default") -> List[Tuple[str, str]]:
    """Every header for a response: the RateLimit pair and, for a denial, ``Retry-After``."""
    if decision.limits and not decision.degraded:
        return response_headers_of([(name, limit, decision)])
    headers = ratelimit_headers(decision, limit, name)
    ra = retry_after(decision, limit)
    if ra is not None:
        headers.append(("Retry-After", ra))
    return headers


def _binds(a: Decision, b: Decision) -> bool:
    """Whether a is closer to its limit than b (see response_headers_of)."""
    if a.allowed != b.allowed:
        return not a.allowed
    if not a.allowed:
        def rank(ns: int) -> int:
            return _MAX_I64 if ns < 0 else ns
        return rank(a.retry_after_ns) > rank(b.retry_after_ns)
    return a.remaining < b.remaining


def closest(decisions: Sequence[Decision]) -> int:
    """The index of the decision closest to its limit (see the module doc)."""
    which = 0
    for i in range(1, len(decisions)):
        if _binds(decisions[i], decisions[which]):
            which = i
    return which


def response_headers_of(policies: Sequence[Tuple[str, Limit, Decision]]) -> List[Tuple[str, str]]:
    """Every header for a request decided under several policies, each a (name, limit,
    decision): ``RateLimit-Policy`` lists each, ``RateLimit`` and ``Retry-After`` are the
    closest policy's (see the module doc). A degraded decision gives only the first degraded
    one's ``Retry-After``. A named list's decision counts as one policy per limit of the list
    (:func:`list_policies`)."""
    if not policies:
        raise ValueError("no policies: want at least one (name, limit, decision)")
    policies = list_policies(policies)
    for name, limit, d in policies:
        if d.degraded:
            return response_headers(d, limit, name)
    which = closest([d for _, _, d in policies])
    items = [dict(ratelimit_headers(d, limit, name))["RateLimit-Policy"] for name, limit, d in policies]
    name, limit, d = policies[which]
    headers = [("RateLimit-Policy", ", ".join(items)), ("RateLimit", dict(ratelimit_headers(d, limit, name))["RateLimit"])]
    ra = retry_after(d, limit)
    if ra is not None:
        headers.append(("Retry-After", ra))
    return headers


def list_policies(policies: Sequence[Tuple[str, Limit, Decision]]) -> List[Tuple[str, Limit, Decision]]:
    """The policies with each whose decision is a named list's (``Decision.limits``) replaced by
    one policy per limit of the list, in the list's order, named ``NAME.1``, ``NAME.2``, ...
    after the policy's name, each with its limit's decision. A shadowed request's limits that
    denied are shown allowed, as the sidecar answered the request."""
    out: List[Tuple[str, Limit, Decision]] = []
    for name, limit, d in policies:
        if not d.limits or d.degraded:
            out.append((name, limit, d))
            continue
        for i, x in enumerate(d.limits):
            if d.shadow_denied and not x.allowed:  # as the sidecar answers a shadow denial
                x = make_decision(True, x.remaining, x.limit, -1, x.reset_after_ns, x.delay_ns)
            out.append((f"{name}.{i + 1}", limit, x))
    return out
