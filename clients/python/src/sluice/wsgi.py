"""WSGI middleware: one acquire per request, 429 when denied; optionally a
concurrency limit's slot held while the request runs.

::

    from sluice import Client, Concurrency, GCRA
    from sluice.wsgi import RateLimitMiddleware

    client = Client()  # one per process; safe to create before gunicorn forks
    app.wsgi_app = RateLimitMiddleware(          # Flask; for Django wrap get_wsgi_application()
        app.wsgi_app, client, GCRA(burst=10, count=5, period=1),
        key=lambda environ: "ip:" + environ.get("REMOTE_ADDR", "?"),
        concurrency=Concurrency(limit=4, lease="1m"),  # optional: at most 4 requests at once per IP
    )

``key`` maps the WSGI environ to the bucket's key; returning None lets the
request through unlimited (health checks, staff). ``limit`` is any limit the
client accepts: a limit of any algorithm but concurrency, a spec, or a name
from the sidecar's config. A denied request gets ``429 Too Many Requests``
with ``Retry-After`` (whole seconds, rounded up) and the ``RateLimit-Policy``
/ ``RateLimit`` headers; an allowed one goes to the app and its response gets
the two RateLimit headers added (unless ``headers=False``). An allowed pacer
decision waits its ``delay`` before calling the app.

When a decision fails, the client's ``on_unavailable`` policy decides if the
sidecar cannot ("open" lets requests through without RateLimit headers;
"closed" answers 429 without ``Retry-After``; "raise" answers 503): an outage
of a sidecar that answered the client before, a full table, an internal
error. A sidecar that has never answered gets 503, and a mistake (an unknown
name, an invalid limit, a limit this sidecar cannot serve, a refused
process, an invalid key) 500, whatever the policy: such a request is never
let through. Each kind of failure is logged at ERROR on the ``sluice``
logger, at most once every 10 s (see the README's "Failure policies").

``concurrency`` (a :class:`~sluice.Concurrency` limit, or the name of one in
the sidecar's config) makes every request hold one of its slots while it
runs, as nginx's limit_conn does, for the key ``concurrency_key(environ)``
(by default ``key``'s; None: no slot). The slot is leased once the rate
limit allowed the request (and its pacer delay was waited) and released
when the response iterable is closed or exhausted, whichever comes first,
or when the app raises: a streamed response holds it until it is done.
(The response is wrapped for that, so a server's ``wsgi.file_wrapper``
fast path does not see it.)
``limit`` may be None for a concurrency limit alone; its responses then carry
its own RateLimit pair, ``"NAME";q=LIMIT;qu="concurrent-requests"`` and
``"NAME";r=FREE``. When every slot is held the request is answered ``429 Too
Many Requests`` as a rate-limit denial is, without ``Retry-After`` (a slot
frees when a request finishes, which nothing foresees; the lease's
``retry_after`` only bounds that by the lease time); with a rate limit too,
the rate limit's RateLimit pair is added as to an allowed response. Failures
are handled as the acquire's: "open" lets the request through holding no
slot, "closed" answers 429. A release the sidecar does not answer is logged,
not raised: the lease expires on its own after the limit's ``lease`` time.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ._calls import Key, LimitLike
from ._middleware import Failed, Failures, limits_of, release_failed, shadow_denied
from .errors import SluiceError
from .headers import check_name, ratelimit_headers, response_headers
from .proto import Opcode

__all__ = ["RateLimitMiddleware"]

StartResponse = Callable[..., Any]
Environ = Dict[str, Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
KeyFunc = Callable[[Environ], Optional[Key]]

_BODY = b"Too Many Requests\n"


class RateLimitMiddleware:
    """Wrap a WSGI app so that every request acquires ``cost`` of ``limit`` for ``key(environ)``.

    Args:
        app: the WSGI application.
        client: a :class:`~sluice.Client`.
        limit: the limit every request is counted against (a Limit or a
            spec); None for none (``concurrency`` alone).
        key: environ -> key (str or bytes), or None to let the request through.
        cost: tokens per request.
        name: the policy name in the RateLimit headers.
        headers: add the RateLimit headers to allowed responses too.
        shadow: make every acquire a shadow request: a request the limit would
            deny is let through and logged (WARNING, logger "sluice"). A limit
            the sidecar's config marks shadow does the same without it. A
            request the concurrency limit would deny is let through too,
            holding no slot, and logged.
        shadow_ban: answer a shadow-denied request with this WSGI app instead of
            ``app`` (it should answer 2xx): the caller sees success while the
            work is not done (a shadow ban).
        concurrency: a :class:`~sluice.Concurrency` limit (or a spec, or the
            name of one in the sidecar's config): every request holds one of
            its slots from before ``app`` is called until its response is
            closed or exhausted, or ``app`` raises.
        concurrency_key: environ -> the concurrency limit's key, or None for
            no slot; by default the key ``key`` gave.
    """

    def __init__(self, app: WSGIApp, client: Any, limit: Optional[LimitLike],
                 key: KeyFunc, *, cost: int = 1, name: str = "default",
                 headers: bool = True, shadow: bool = False, shadow_ban: Optional[WSGIApp] = None,
                 concurrency: Optional[LimitLike] = None, concurrency_key: Optional[KeyFunc] = None) -> None:
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

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        k = self.key(environ) if self.limit is not None or self.concurrency_key is None else None
        start = start_response
        extra: List[Tuple[str, str]] = []
        if k is not None and self.limit is not None:
            try:
                d = self.client.acquire(k, self.limit, self.cost, shadow=self.shadow) if self.shadow \
                    else self.client.acquire(k, self.limit, self.cost)
            except SluiceError as e:
                d = self.failures.answer(self.client, e, Opcode.ACQUIRE, self.limit)
                if isinstance(d, Failed):
                    return _fail(start_response, d)
            if d.shadow_denied:
                shadow_denied("rate limit", self.name, k, self.shadow_ban is not None)
                if self.shadow_ban is not None:
                    return self.shadow_ban(environ, start_response)
            if not d.allowed:
                return _deny(start_response, response_headers(d, self.limit, self.name))
            if d.delay_ns > 0:
                time.sleep(d.delay_ns / 1e9)
            if self.headers:
                extra = ratelimit_headers(d, self.limit, self.name)
            if extra:
                start = _adding(start_response, extra)
        if self.concurrency is None:
            return self.app(environ, start)
        ck = k if self.concurrency_key is None else self.concurrency_key(environ)
        if ck is None:
            return self.app(environ, start)
        try:
            lease = self.client.lease(ck, self.concurrency)
        except SluiceError as e:
            lease = self.failures.answer(self.client, e, Opcode.LEASE)
            if isinstance(lease, Failed):
                return _fail(start_response, lease)
        own = self.limit is None  # the concurrency limit's fields, when it is the only limit
        if not lease.allowed:
            if not self.shadow or lease.degraded:
                return _deny(start_response, response_headers(lease, self.concurrency, self.name) if own else extra)
            shadow_denied("concurrency limit", self.concurrency, ck, self.shadow_ban is not None)
            if self.shadow_ban is not None:
                return self.shadow_ban(environ, start_response)
        if own and self.headers:
            start = _adding(start_response, ratelimit_headers(lease, self.concurrency, self.name))
        if not lease.allowed or not lease.id:  # shadow-denied, or granted by the policy: holds nothing
            return self.app(environ, start)

        def release() -> None:
            try:
                self.client.release(ck, self.concurrency, lease.id)
            except SluiceError as e:
                release_failed(self.concurrency, ck, lease.id, e)  # type: ignore[arg-type]

        try:
            return _Held(self.app(environ, start), release)
        except BaseException:
            release()
            raise


def _fail(start_response: StartResponse, failed: Failed) -> List[bytes]:
    start_response(f"{failed.status} {failed.reason}", [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(failed.body))),
    ])
    return [failed.body]


def _deny(start_response: StartResponse, extra: List[Tuple[str, str]]) -> List[bytes]:
    start_response("429 Too Many Requests", [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(_BODY))),
    ] + extra)
    return [_BODY]


def _adding(start_response: StartResponse, extra: List[Tuple[str, str]]) -> StartResponse:
    """start_response adding the headers of ``extra`` the app did not set itself."""

    def start(status: str, response_headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        have = {h.lower() for h, _ in response_headers}
        add = [(h, v) for h, v in extra if h.lower() not in have]
        return start_response(status, list(response_headers) + add, exc_info) if exc_info \
            else start_response(status, list(response_headers) + add)

    return start


class _Held:
    """A response iterable that calls ``release`` once, when it is exhausted, fails, or is closed."""

    def __init__(self, body: Iterable[bytes], release: Callable[[], None]) -> None:
        self._body = body
        self._it = iter(body)
        self._release: Optional[Callable[[], None]] = release

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._it)
        except BaseException:  # StopIteration included: the response is done
            self._done()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._done()

    def _done(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()
