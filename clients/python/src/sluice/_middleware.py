"""What the WSGI and ASGI middlewares share: their limits' checks, what they do when a
decision fails, and their log lines.

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
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from ._calls import Call, Key, LimitLike, leasable, limit_of, name_of
from ._gotime import format_duration
from .errors import Internal, ProtocolError, SluiceError, TableFull, Unavailable
from .limits import Concurrency, Limit
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


def release_failed(limit: Limit, key: Key, lease_id: int, e: SluiceError) -> None:
    """Log a release the sidecar did not do: the response is on its way, and the lease expires on its own."""
    within = format_duration(limit.lease_ns) if isinstance(limit, Concurrency) else "its lease time"
    log.warning("could not release lease %d of %s for %r (%s); it expires on its own within %s",
                lease_id, limit, key, e, within)
