"""Sluice's Python client: host-wide rate limits from the Sluice sidecar.

Every process on a host asks one ``sluiced`` over a Unix socket, so a limit
holds across gunicorn/uwsgi workers and restarts::

    from sluice import Client, TokenBucket

    client = Client("/run/sluice/sluice.sock")
    login = TokenBucket(max=10, refill_time="1h", refill_amount=1)

    decision = client.acquire(f"login:{user}", login)
    if not decision.allowed:
        return too_many(retry_after=decision.retry_after)   # seconds

- :class:`Client` (threads) and :class:`AsyncClient` (asyncio): acquire,
  peek, refund, reset, multi, lease, release, scan, stats, ping, hello,
  pipelines.
- Limits: :class:`TokenBucket`, :class:`GCRA`, :class:`FixedWindow`,
  :class:`SlidingWindow`, :class:`Pacer`, :class:`SlidingLog`,
  :class:`WindowCounters`, :class:`Concurrency`, :class:`Quota`, or a spec string
  (``Limit.parse("gcra:burst=4,count=1,period=1s")``).
- ``client.limit(key, limit)``: a context manager and decorator raising
  :class:`RateLimited`; ``client.concurrency(key, limit)`` holds a lease
  of a concurrency limit for its block.
- :mod:`sluice.wsgi` and :mod:`sluice.asgi`: middleware answering 429 with
  ``Retry-After`` and the IETF ``RateLimit`` headers (:mod:`sluice.headers`).
- :mod:`sluice.proto`: the wire codec.
- :mod:`sluice.limits_storage` and :mod:`sluice.aio_limits_storage`: a
  storage of the ``limits`` library (Flask-Limiter, SlowAPI), ``sluice://``;
  import one to register its scheme. They need ``limits`` (the ``limits``
  extra); this package imports neither.

Standard library only (but for the limits storages).
"""

from .aio import AsyncClient, AsyncPipeline
from .client import Client, Pipeline
from .errors import (
    BadVersion, BatchTooLarge, Busy, Contended, Denied, FrameTooLarge, Internal, InvalidCost,
    InvalidKey, InvalidLimit, Malformed, ProtocolError, RateLimited, ShuttingDown, SluiceError,
    Status, StatusError, TableFull, TooManyItems, Unavailable, UnknownOpcode, Unsupported,
)
from .guard import AsyncConcurrencyGuard, AsyncGuard, ConcurrencyGuard, Guard
from .headers import policy, ratelimit_headers, response_headers, response_headers_of, retry_after
from .limits import (
    GCRA, Algorithm, Concurrency, FixedWindow, Limit, Named, Pacer, Quota, SlidingLog, SlidingWindow, TokenBucket,
    WindowCounters, duration_ns,
)
from .results import Decision, Hello, Lease, MultiDecision, MultiItem, Released, ScanEntry, ScanPage

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "Pipeline", "AsyncPipeline", "Guard", "AsyncGuard", "ConcurrencyGuard",
    "AsyncConcurrencyGuard",
    "Limit", "Algorithm", "TokenBucket", "GCRA", "FixedWindow", "SlidingWindow", "Pacer", "SlidingLog",
    "WindowCounters", "Concurrency", "Quota", "Named", "duration_ns",
    "Decision", "Lease", "Released", "MultiDecision", "MultiItem", "Hello", "ScanEntry", "ScanPage",
    "policy", "ratelimit_headers", "response_headers", "response_headers_of", "retry_after",
    "SluiceError", "StatusError", "Status", "Malformed", "BadVersion", "FrameTooLarge",
    "BatchTooLarge", "UnknownOpcode", "InvalidLimit", "InvalidKey", "InvalidCost", "TableFull",
    "TooManyItems", "Contended", "Unsupported", "ShuttingDown", "Internal", "Busy", "Denied",
    "Unavailable", "ProtocolError", "RateLimited",
]
