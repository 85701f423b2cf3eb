"""The one core of the WSGI and ASGI middlewares: what each request asks and gets, without I/O.

:meth:`MiddlewareCore._steps` walks one request through the rate limit and the concurrency
limit and yields what to do next, as (verb, argument) pairs: call a function (CALL: a key
function on the request, the client's acquire or lease), wait a pacer's delay (SLEEP), answer the request
itself (RESPOND: a 429, 500 or 503, with its headers and body), hand it to the shadow-ban app
(SHADOW_BAN), or call the app (APP: with the RateLimit headers to add to its response, and the
lease to release when it is done). :mod:`sluice.wsgi` and :mod:`sluice.asgi` drive it, each in
its own I/O (calls or awaits, start_response or send); neither decides anything.

When a decision fails (README, "Failure policy", has the table; the Go middleware does the
same):

- the sidecar cannot decide this request (a full table, an internal error, an answer that
  cannot be decoded): the client's ``on_unavailable`` policy decides, as for an outage, and
  the failure is logged;
- the sidecar is unavailable and the policy did not decide ("raise", or the sidecar has
  never answered the client): 503 Service Unavailable, logged;
- anything else is a mistake to fix (an unknown name, an invalid limit, a limit this sidecar
  cannot serve, a sidecar that refuses this process or is older than the request, an invalid
  key or cost): 500 Internal Server Error, logged, and the request is never let through.

Each kind of failure is logged at ERROR (logger ``sluice``) at most once every 10 seconds,
with the count of requests since the last line.
"""

from __future__ import annotations

import logging
import threading
import time
import dataclasses
from typing import Any, Callable, Dict, Generator, List, NamedTuple, Optional, Sequence, Tuple, Union

from ._calls import Call, Key, LimitLike, leasable, limit_of, name_of
from .errors import Internal, ProtocolError, SluiceError, TableFull, Unavailable
from .headers import check_name, closest, ratelimit_headers, response_headers, response_headers_of
from .limits import Concurrency, Limit
from .proto import MAX_MULTI, Opcode
from ._policy import release_failed
from .results import Decision

log = logging.getLogger("sluice")

#: The least seconds between two log lines about one kind of failure.
FAILURE_LOG_INTERVAL = 10.0

#: Errors of a sidecar that is there but cannot decide the request: the policy decides.
_POLICY_ERRORS = (TableFull, Internal, ProtocolError)


def limits_of(limit: Optional[LimitLike], concurrency: Optional[LimitLike]) -> Tuple[Optional[Limit], Optional[Limit]]:
    """The rate limit and the concurrency limit of a middleware, checked at start-up."""
    if limit is None and concurrency is None:
        raise TypeError("a middleware needs a limit, a concurrency limit, or both")
    rate = None if limit is None else limit_of(limit)
    if isinstance(rate, Concurrency):
        raise TypeError(f"{rate} is a concurrency limit: pass it as concurrency=, not as the rate limit")
    return rate, None if concurrency is None else leasable(concurrency)


class Failed(NamedTuple):
    """The answer to a request whose decision failed and that the policy did not decide."""

    status: int  #: 500 or 503
    reason: str  #: "Internal Server Error" or "Service Unavailable"

    @property
    def body(self) -> bytes:
        return self.reason.encode() + b"\n"


_UNAVAILABLE = Failed(503, "Service Unavailable")
_MISTAKE = Failed(500, "Internal Server Error")


class Failures:
    """What a middleware does about requests whose decision failed; see the module doc."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._kinds: Dict[str, List[float]] = {}  # kind -> [count, logged count, time logged]

    def answer(self, client: Any, exc: SluiceError, code: int, limit: Optional[Limit] = None) -> Union[Decision, Failed]:
        """The policy's decision for ``exc``, the error of an acquire or lease (``code``) of
        ``limit``, or the answer to send."""
        if isinstance(exc, _POLICY_ERRORS):
            by_policy = getattr(client, "_by_policy", None)
            if by_policy is not None:
                try:
                    d: Decision = by_policy(exc, Call(b"", code, True, 0, 1, None if limit is None else name_of(limit)))
                except SluiceError:
                    pass  # "raise": 503
                else:
                    self._report(exc, f"decided by on_unavailable={client.on_unavailable}")
                    return d
        failed = _UNAVAILABLE if isinstance(exc, (Unavailable,) + _POLICY_ERRORS) else _MISTAKE
        self._report(exc, f"answered {failed.status}")
        return failed

    def _report(self, exc: SluiceError, answer: str) -> None:
        kind = type(exc).__name__
        now = time.monotonic()
        with self._lock:
            k = self._kinds.setdefault(kind, [0, 0, -FAILURE_LOG_INTERVAL - 1.0])
            k[0] += 1
            if now - k[2] < FAILURE_LOG_INTERVAL and k[1]:
                return
            n, k[1], k[2] = k[0] - k[1], k[0], now
            total = k[0]
        log.error("the rate limit middleware (policy %r) could not decide requests, %s: %d since the last line "
                  "(%d in all): %s", self.name, answer, n, total, exc)


def shadow_denied(what: str, name: object, key: Key, banned: bool) -> None:
    """Log a request a limit would deny, let through (or answered by shadow_ban)."""
    log.warning("%s %s shadow-denied a request for %r%s", what, name, key, " (shadow-banned)" if banned else "")


Headers = List[Tuple[str, str]]


class Response(NamedTuple):
    """A response the middleware sends itself, instead of the app's."""

    status: int
    reason: str
    headers: Headers  #: Content-Type, Content-Length, then the RateLimit headers
    body: bytes


def _response(status: int, reason: str, body: bytes, extra: Headers) -> Response:
    return Response(status, reason, [("Content-Type", "text/plain; charset=utf-8"),
                                     ("Content-Length", str(len(body)))] + extra, body)


_TOO_MANY = b"Too Many Requests\n"

# The verbs of _steps: what the adapter does next, and what it sends back.
CALL = 1  #: call arg(); send back its value (awaited if need be), or the SluiceError it raised
SLEEP = 2  #: wait arg seconds (an allowed pacer decision's delay); send back None
RESPOND = 3  #: send the Response arg, and stop
SHADOW_BAN = 4  #: hand the request to the shadow_ban app, and stop
APP = 5  #: call the app: arg is (headers to add to its response or None, (key, lease id) to release after or None)

Step = Tuple[int, Any]


def _key(key: Callable[[Any], Any], request: Any) -> Generator[Step, Any, Any]:
    """The key ``key`` gives the request: its exceptions are the app's, not decisions that failed."""
    k = yield CALL, lambda: key(request)
    if isinstance(k, SluiceError):
        raise k
    return k


class MiddlewareCore:
    """What the WSGI and ASGI ``RateLimitMiddleware`` hold and decide; their arguments are
    documented at :class:`sluice.wsgi.RateLimitMiddleware`."""

    def __init__(self, app: Any, client: Any, limit: Optional[LimitLike], key: Callable[[Any], Any], *,
                 cost: int = 1, name: str = "default", headers: bool = True, shadow: bool = False,
                 shadow_ban: Any = None, concurrency: Optional[LimitLike] = None,
                 concurrency_key: Optional[Callable[[Any], Any]] = None,
                 policies: Sequence[Tuple[str, LimitLike]] = ()) -> None:
        self.app = app
        self.shadow = shadow
        self.shadow_ban = shadow_ban
        self.client = client
        self.limit, self.concurrency = limits_of(limit, concurrency)
        self.key = key
        self.concurrency_key = concurrency_key
        self.cost = cost
        self.name = name
        self.headers = headers
        check_name(name)  # fail at start-up, not per request
        self.failures = Failures(name)
        self.policies = [(n, limit_of(p)) for n, p in policies]
        for n, _ in self.policies:
            check_name(n)
        if self.policies and (self.limit is None or shadow or len(self.policies) >= MAX_MULTI):
            raise ValueError(f"policies: several policies are decided as one multi of at most {MAX_MULTI} limits, "
                             "beside a limit, and cannot be shadowed")

    def _acquire_all(self, m: Any, limit: Limit) -> Tuple[Decision, List[Tuple[str, Limit, Decision]]]:
        """The request's decision and each policy's, from the multi's answer ``m``."""
        ps = [(self.name, limit, m.decisions[0])] + [(n, p, d) for (n, p), d in zip(self.policies, m.decisions[1:])]
        d = m.decisions[closest(m.decisions)]
        delay = max(x.delay_ns for x in m.decisions) if m.allowed else 0
        return dataclasses.replace(d, allowed=m.allowed, delay_ns=delay), ps

    def _steps(self, request: Any) -> Generator[Step, Any, None]:
        """One request (a WSGI environ, an ASGI scope), as the steps the adapter takes (see the
        module doc)."""
        client, limit, conc, name = self.client, self.limit, self.concurrency, self.name
        k = (yield from _key(self.key, request)) if limit is not None or self.concurrency_key is None else None
        extra: Headers = []
        add: Optional[Headers] = None
        if k is not None and limit is not None:
            ps: Optional[List[Tuple[str, Limit, Decision]]] = None
            if self.policies:
                items = [(k, limit, self.cost)] + [(k, p, self.cost) for _, p in self.policies]
                d = yield CALL, lambda: client.multi(items)
                if not isinstance(d, SluiceError):
                    d, ps = self._acquire_all(d, limit)
            else:
                d = yield CALL, (lambda: client.acquire(k, limit, self.cost, shadow=True)) if self.shadow \
                    else (lambda: client.acquire(k, limit, self.cost))
            if isinstance(d, SluiceError):
                d = self.failures.answer(client, d, Opcode.ACQUIRE, limit)
                if isinstance(d, Failed):
                    yield RESPOND, _response(d.status, d.reason, d.body, [])
                    return
            if d.shadow_denied:
                shadow_denied("rate limit", name, k, self.shadow_ban is not None)
                if self.shadow_ban is not None:
                    yield SHADOW_BAN, None
                    return
            if not d.allowed:
                yield RESPOND, _response(429, "Too Many Requests", _TOO_MANY,
                                         response_headers_of(ps) if ps else response_headers(d, limit, name))
                return
            if d.delay_ns > 0:
                yield SLEEP, d.delay_ns / 1e9
            if self.headers:
                extra = response_headers_of(ps) if ps else ratelimit_headers(d, limit, name)
            if extra:
                add = extra
        if conc is None:
            yield APP, (add, None)
            return
        ck = k if self.concurrency_key is None else (yield from _key(self.concurrency_key, request))
        if ck is None:
            yield APP, (add, None)
            return
        lease = yield CALL, lambda: client.lease(ck, conc)
        if isinstance(lease, SluiceError):
            lease = self.failures.answer(client, lease, Opcode.LEASE)
            if isinstance(lease, Failed):
                yield RESPOND, _response(lease.status, lease.reason, lease.body, [])
                return
        own = limit is None  # the concurrency limit's fields, when it is the only limit
        if not lease.allowed:
            if not self.shadow or lease.degraded:
                yield RESPOND, _response(429, "Too Many Requests", _TOO_MANY,
                                         response_headers(lease, conc, name) if own else extra)
                return
            shadow_denied("concurrency limit", conc, ck, self.shadow_ban is not None)
            if self.shadow_ban is not None:
                yield SHADOW_BAN, None
                return
        if own and self.headers:
            add = ratelimit_headers(lease, conc, name)
        # Shadow-denied, or granted by the policy: the lease holds nothing to release.
        yield APP, (add, (ck, lease.id) if lease.allowed and lease.id else None)

    def _release_failed(self, key: Key, lease_id: int, e: SluiceError) -> None:
        """Log a release the sidecar did not do: the response is on its way, and the lease
        expires on its own."""
        release_failed(self.concurrency, key, lease_id, e)  # type: ignore[arg-type]
