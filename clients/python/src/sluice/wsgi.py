"""WSGI middleware: one acquire per request, 429 when denied.

::

    from sluice import Client, GCRA
    from sluice.wsgi import RateLimitMiddleware

    client = Client()  # one per process; safe to create before gunicorn forks
    app.wsgi_app = RateLimitMiddleware(          # Flask; for Django wrap get_wsgi_application()
        app.wsgi_app, client, GCRA(burst=10, count=5, period=1),
        key=lambda environ: "ip:" + environ.get("REMOTE_ADDR", "?"),
    )

``key`` maps the WSGI environ to the bucket's key; returning None lets the
request through unlimited (health checks, staff). A denied request gets
``429 Too Many Requests`` with ``Retry-After`` (whole seconds, rounded
up) and the ``RateLimit-Policy`` / ``RateLimit`` headers; an allowed one
goes to the app and its response gets the two RateLimit headers added. When
the sidecar cannot be asked, the client's ``on_unavailable`` policy decides
("open" lets requests through without RateLimit headers; "closed" answers
429 without ``Retry-After``; "raise" propagates :class:`Unavailable`).
An allowed pacer decision waits its ``delay`` before calling the app.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ._common import Key, LimitLike, limit_of
from .headers import _sf_string, ratelimit_headers, retry_after

__all__ = ["RateLimitMiddleware"]

StartResponse = Callable[..., Any]
Environ = Dict[str, Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

_BODY = b"Too Many Requests\n"


_log = logging.getLogger("sluice")


class RateLimitMiddleware:
    """Wrap a WSGI app so that every request acquires ``cost`` of ``limit`` for ``key(environ)``.

    Args:
        app: the WSGI application.
        client: a :class:`~sluice.Client`.
        limit: the limit every request is counted against (a Limit or a spec).
        key: environ -> key (str or bytes), or None to let the request through.
        cost: tokens per request.
        name: the policy name in the RateLimit headers.
        headers: add the RateLimit headers to allowed responses too.
        shadow: make every acquire a shadow request: a request the limit would
            deny is let through and logged (WARNING, logger "sluice"). A limit
            the sidecar's config marks shadow does the same without it.
        shadow_ban: answer a shadow-denied request with this WSGI app instead of
            ``app`` (it should answer 2xx): the caller sees success while the
            work is not done (a shadow ban).
    """

    def __init__(self, app: WSGIApp, client: Any, limit: LimitLike,
                 key: Callable[[Environ], Optional[Key]], *, cost: int = 1, name: str = "default",
                 headers: bool = True, shadow: bool = False, shadow_ban: Optional[WSGIApp] = None) -> None:
        self.app = app
        self.shadow = shadow
        self.shadow_ban = shadow_ban
        self.client = client
        self.limit = limit_of(limit)
        self.key = key
        self.cost = cost
        self.name = name
        self.headers = headers
        _sf_string(name)  # fail at start-up, not per request

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        k = self.key(environ)
        if k is None:
            return self.app(environ, start_response)
        d = self.client.acquire(k, self.limit, self.cost, shadow=self.shadow) if self.shadow \
            else self.client.acquire(k, self.limit, self.cost)
        if d.shadow_denied:
            _log.warning("rate limit %s shadow-denied a request for %r%s", self.name, k,
                         " (shadow-banned)" if self.shadow_ban is not None else "")
            if self.shadow_ban is not None:
                return self.shadow_ban(environ, start_response)
        extra: List[Tuple[str, str]] = ratelimit_headers(d, self.limit, self.name)
        if not d.allowed:
            ra = retry_after(d)
            if ra is not None:
                extra.append(("Retry-After", ra))
            start_response("429 Too Many Requests", [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_BODY))),
            ] + extra)
            return [_BODY]
        if d.delay_ns > 0:
            time.sleep(d.delay_ns / 1e9)
        if not self.headers or not extra:
            return self.app(environ, start_response)

        def start(status: str, response_headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            have = {h.lower() for h, _ in response_headers}
            add = [(h, v) for h, v in extra if h.lower() not in have]
            return start_response(status, list(response_headers) + add, exc_info) if exc_info \
                else start_response(status, list(response_headers) + add)

        return self.app(environ, start)
