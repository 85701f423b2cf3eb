"""What the WSGI and ASGI middlewares share: their limits' checks and their log lines."""

from __future__ import annotations

import logging
from typing import Optional, Tuple

from ._common import Key, LimitLike, _leasable, limit_of
from ._gotime import format_duration
from .errors import SluiceError
from .limits import Concurrency, Limit

log = logging.getLogger("sluice")


def limits_of(limit: Optional[LimitLike], concurrency: Optional[LimitLike]) -> Tuple[Optional[Limit], Optional[Limit]]:
    """The rate limit and the concurrency limit of a middleware, checked at start-up."""
    if limit is None and concurrency is None:
        raise TypeError("a middleware needs a limit, a concurrency limit, or both")
    rate = None if limit is None else limit_of(limit)
    if isinstance(rate, Concurrency):
        raise TypeError(f"{rate} is a concurrency limit: pass it as concurrency=, not as the rate limit")
    return rate, None if concurrency is None else _leasable(concurrency)


def shadow_denied(what: str, name: object, key: Key, banned: bool) -> None:
    """Log a request a limit would deny, let through (or answered by shadow_ban)."""
    log.warning("%s %s shadow-denied a request for %r%s", what, name, key, " (shadow-banned)" if banned else "")


def release_failed(limit: Limit, key: Key, lease_id: int, e: SluiceError) -> None:
    """Log a release the sidecar did not do: the response is on its way, and the lease expires on its own."""
    within = format_duration(limit.lease_ns) if isinstance(limit, Concurrency) else "its lease time"
    log.warning("could not release lease %d of %s for %r (%s); it expires on its own within %s",
                lease_id, limit, key, e, within)
