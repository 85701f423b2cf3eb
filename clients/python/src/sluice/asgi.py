"""ASGI middleware: one acquire per HTTP request, 429 when denied; optionally a
concurrency limit's slot held while the request runs.

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
awaited, and failures are handled the same way (the ``on_unavailable``
policy when the sidecar cannot decide, 503 for a sidecar that never
answered, 500 for a mistake, each logged). Only ``http`` scopes are limited; ``websocket`` and
``lifespan`` pass through. ``client`` is normally an
:class:`~sluice.AsyncClient`; a sync :class:`~sluice.Client` works too (each
acquire then blocks the loop for one round trip, tens of microseconds).

``concurrency`` and ``concurrency_key`` (which may be a coroutine function
too) work as the WSGI middleware's: the request holds a slot of the
concurrency limit from before the app is called until the app returns or
raises, which includes its cancellation (a server cancels the request's
task when the client disconnects); every slot held: 429 without
``Retry-After``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, Union

from ._calls import Key, LimitLike
from ._middleware import Failed, Failures, limits_of, release_failed, shadow_denied
from .errors import SluiceError
from .headers import check_name, ratelimit_headers, response_headers
from .limits import Limit
from .proto import Opcode

__all__ = ["RateLimitMiddleware"]

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
KeyFunc = Callable[[Scope], Union[Optional[Key], Awaitable[Optional[Key]]]]

_BODY = b"Too Many Requests\n"


class RateLimitMiddleware:
    """Wrap an ASGI app so that every HTTP request acquires ``cost`` of ``limit`` for ``key(scope)``.

    Args as :class:`sluice.wsgi.RateLimitMiddleware`, with ``key`` and
    ``concurrency_key`` taking the scope.
    """

    def __init__(self, app: ASGIApp, client: Any, limit: Optional[LimitLike], key: KeyFunc, *,
                 cost: int = 1, name: str = "default", headers: bool = True, shadow: bool = False,
                 shadow_ban: Optional[ASGIApp] = None, concurrency: Optional[LimitLike] = None,
                 concurrency_key: Optional[KeyFunc] = None) -> None:
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
        check_name(name)
        self.failures = Failures(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        k = self.key(scope) if self.limit is not None or self.concurrency_key is None else None
        if inspect.isawaitable(k):
            k = await k
        out = send
        extra: List[Tuple[bytes, bytes]] = []
        if k is not None and self.limit is not None:
            d = await self._ask(lambda: self.client.acquire(k, self.limit, self.cost, shadow=self.shadow)
                                if self.shadow else self.client.acquire(k, self.limit, self.cost), Opcode.ACQUIRE, send,
                                self.limit)
            if d is None:
                return
            if d.shadow_denied:
                shadow_denied("rate limit", self.name, k, self.shadow_ban is not None)
                if self.shadow_ban is not None:
                    await self.shadow_ban(scope, receive, send)
                    return
            if not d.allowed:
                await _deny(send, _encoded(response_headers(d, self.limit, self.name)))
                return
            if d.delay_ns > 0:
                await asyncio.sleep(d.delay_ns / 1e9)
            if self.headers:
                extra = _encoded(ratelimit_headers(d, self.limit, self.name))
            if extra:
                out = _adding(send, extra)
        if self.concurrency is None:
            await self.app(scope, receive, out)
            return
        ck = k
        if self.concurrency_key is not None:
            ck = self.concurrency_key(scope)
            if inspect.isawaitable(ck):
                ck = await ck
        if ck is None:
            await self.app(scope, receive, out)
            return
        lease = await self._ask(lambda: self.client.lease(ck, self.concurrency), Opcode.LEASE, send)
        if lease is None:
            return
        own = self.limit is None  # the concurrency limit's fields, when it is the only limit
        if not lease.allowed:
            if not self.shadow or lease.degraded:
                await _deny(send, _encoded(response_headers(lease, self.concurrency, self.name)) if own else extra)
                return
            shadow_denied("concurrency limit", self.concurrency, ck, self.shadow_ban is not None)
            if self.shadow_ban is not None:
                await self.shadow_ban(scope, receive, send)
                return
        if own and self.headers:
            out = _adding(send, _encoded(ratelimit_headers(lease, self.concurrency, self.name)))
        if not lease.allowed or not lease.id:  # shadow-denied, or granted by the policy: holds nothing
            await self.app(scope, receive, out)
            return
        try:
            await self.app(scope, receive, out)
        finally:
            await self._release(ck, lease.id)

    async def _ask(self, ask: Callable[[], Any], code: int, send: Send, limit: Optional[Limit] = None) -> Any:
        """The decision ``ask()`` returns (awaited if need be), or the ``on_unavailable`` policy's
        if it failed and the policy decides (``limit``'s); None once a failure was answered (see
        _middleware)."""
        try:
            d = ask()
            if inspect.isawaitable(d):
                d = await d
        except SluiceError as e:
            d = self.failures.answer(self.client, e, code, limit)
            if isinstance(d, Failed):
                await _fail(send, d)
                return None
        return d

    async def _release(self, key: Key, lease_id: int) -> None:
        try:
            r = self.client.release(key, self.concurrency, lease_id)
            if inspect.isawaitable(r):
                # Shielded: a cancellation of the request (the client went away) must not stop it halfway.
                await asyncio.shield(r)
        except SluiceError as e:
            release_failed(self.concurrency, key, lease_id, e)  # type: ignore[arg-type]


def _encoded(headers: List[Tuple[str, str]]) -> List[Tuple[bytes, bytes]]:
    return [(h.lower().encode(), v.encode()) for h, v in headers]


async def _fail(send: Send, failed: Failed) -> None:
    await send({"type": "http.response.start", "status": failed.status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(failed.body)).encode()),
    ]})
    await send({"type": "http.response.body", "body": failed.body})


async def _deny(send: Send, extra: List[Tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": 429, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(_BODY)).encode()),
    ] + extra})
    await send({"type": "http.response.body", "body": _BODY})


def _adding(send: Send, extra: List[Tuple[bytes, bytes]]) -> Send:
    """send adding the headers of ``extra`` the app did not set itself to the response's start."""

    async def send_with_headers(message: Message) -> None:
        if message.get("type") == "http.response.start":
            headers = list(message.get("headers", ()))
            have = {bytes(h).lower() for h, _ in headers}
            message = dict(message, headers=headers + [(h, v) for h, v in extra if h not in have])
        await send(message)

    return send_with_headers

