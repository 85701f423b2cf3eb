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

from ._calls import Key
from ._middleware_core import APP, CALL, RESPOND, SHADOW_BAN, SLEEP, MiddlewareCore
from .errors import SluiceError

__all__ = ["RateLimitMiddleware"]

Scope = Dict[str, Any]
Message = Dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
KeyFunc = Callable[[Scope], Union[Optional[Key], Awaitable[Optional[Key]]]]


class RateLimitMiddleware(MiddlewareCore):
    """Wrap an ASGI app so that every HTTP request acquires ``cost`` of ``limit`` for ``key(scope)``.

    Args as :class:`sluice.wsgi.RateLimitMiddleware`, with ``key`` and
    ``concurrency_key`` taking the scope.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        steps, answer = self._steps(scope), None
        while True:
            verb, arg = steps.send(answer)
            if verb == CALL:
                try:
                    answer = arg()
                    if inspect.isawaitable(answer):
                        answer = await answer
                except SluiceError as e:
                    answer = e
            elif verb == SLEEP:
                answer = None
                await asyncio.sleep(arg)
            elif verb == RESPOND:
                await send({"type": "http.response.start", "status": arg.status, "headers": _encoded(arg.headers)})
                await send({"type": "http.response.body", "body": arg.body})
                return
            elif verb == SHADOW_BAN:
                await self.shadow_ban(scope, receive, send)
                return
            else:
                assert verb == APP
                add, lease = arg
                out = send if add is None else _adding(send, _encoded(add))
                if lease is None:
                    await self.app(scope, receive, out)
                    return
                try:
                    await self.app(scope, receive, out)
                finally:
                    await self._release(*lease)
                return

    async def _release(self, key: Key, lease_id: int) -> None:
        try:
            r = self.client.release(key, self.concurrency, lease_id)
            if inspect.isawaitable(r):
                # Shielded: a cancellation of the request (the client went away) must not stop it halfway.
                await asyncio.shield(r)
        except SluiceError as e:
            self._release_failed(key, lease_id, e)


def _encoded(headers: List[Tuple[str, str]]) -> List[Tuple[bytes, bytes]]:
    return [(h.lower().encode(), v.encode()) for h, v in headers]


def _adding(send: Send, extra: List[Tuple[bytes, bytes]]) -> Send:
    """send adding the headers of ``extra`` the app did not set itself to the response's start."""

    async def send_with_headers(message: Message) -> None:
        if message.get("type") == "http.response.start":
            headers = list(message.get("headers", ()))
            have = {bytes(h).lower() for h, _ in headers}
            message = dict(message, headers=headers + [(h, v) for h, v in extra if h not in have])
        await send(message)

    return send_with_headers

