"""ASGI middleware: one acquire per HTTP request, 429 when denied.

::

    from sluice import AsyncClient, SlidingWindow
    from sluice.asgi import RateLimitMiddleware

    client = AsyncClient()
    app = RateLimitMiddleware(app, client, SlidingWindow(100, 60),   # FastAPI/Starlette: app.add_middleware(...)
                              key=lambda scope: "ip:" + (scope.get("client") or ("?",))[0])

Behaves as the WSGI middleware (:mod:`sluice.wsgi`): ``key`` maps the
ASGI scope to a key (None: not limited; it may also be a coroutine
function), denials get 429 with ``Retry-After`` and the RateLimit headers,
allowed responses get the RateLimit headers, an allowed pacer decision is
awaited, and the client's ``on_unavailable`` policy decides when the
sidecar cannot be asked. Only ``http`` scopes are limited; ``websocket`` and
``lifespan`` pass through. ``client`` is normally an
:class:`~sluice.AsyncClient`; a sync :class:`~sluice.Client` works too (each
acquire then blocks the loop for one round trip, tens of microseconds).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, Union

from ._common import Key, LimitLike, limit_of
from .headers import _sf_string, ratelimit_headers, retry_after

__all__ = ["RateLimitMiddleware"]

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
KeyFunc = Callable[[Scope], Union[Optional[Key], Awaitable[Optional[Key]]]]

_BODY = b"Too Many Requests\n"


_log = logging.getLogger("sluice")


class RateLimitMiddleware:
    """Wrap an ASGI app so that every HTTP request acquires ``cost`` of ``limit`` for ``key(scope)``.

    Args as :class:`sluice.wsgi.RateLimitMiddleware`, with ``key`` taking the scope.
    """

    def __init__(self, app: ASGIApp, client: Any, limit: LimitLike, key: KeyFunc, *,
                 cost: int = 1, name: str = "default", headers: bool = True, shadow: bool = False,
                 shadow_ban: Optional[ASGIApp] = None) -> None:
        self.app = app
        self.shadow = shadow
        self.shadow_ban = shadow_ban
        self.client = client
        self.limit = limit_of(limit)
        self.key = key
        self.cost = cost
        self.name = name
        self.headers = headers
        _sf_string(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        k = self.key(scope)
        if inspect.isawaitable(k):
            k = await k
        if k is None:
            await self.app(scope, receive, send)
            return
        d = self.client.acquire(k, self.limit, self.cost, shadow=self.shadow) if self.shadow \
            else self.client.acquire(k, self.limit, self.cost)
        if inspect.isawaitable(d):
            d = await d
        if d.shadow_denied:
            _log.warning("rate limit %s shadow-denied a request for %r%s", self.name, k,
                         " (shadow-banned)" if self.shadow_ban is not None else "")
            if self.shadow_ban is not None:
                await self.shadow_ban(scope, receive, send)
                return
        extra: List[Tuple[bytes, bytes]] = [(h.lower().encode(), v.encode())
                                            for h, v in ratelimit_headers(d, self.limit, self.name)]
        if not d.allowed:
            ra = retry_after(d)
            if ra is not None:
                extra.append((b"retry-after", ra.encode()))
            await send({"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(_BODY)).encode()),
            ] + extra})
            await send({"type": "http.response.body", "body": _BODY})
            return
        if d.delay_ns > 0:
            await asyncio.sleep(d.delay_ns / 1e9)
        if not self.headers or not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start":
                headers = list(message.get("headers", ()))
                have = {bytes(h).lower() for h, _ in headers}
                message = dict(message, headers=headers + [(h, v) for h, v in extra if h not in have])
            await send(message)

        await self.app(scope, receive, send_with_headers)
