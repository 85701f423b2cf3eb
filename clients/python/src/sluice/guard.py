"""``client.limit(...)``: acquire as a context manager or a decorator.

::

    login = TokenBucket(10, "1h", 1)

    with client.limit(f"login:{user}", login):      # raises RateLimited if denied
        check_password(user, password)

    @client.limit(lambda user, **kw: f"report:{user}", GCRA(0, 1, 60))
    def build_report(user, **kw): ...

    async with aclient.limit("send:" + addr, Pacer(4, 1, 2)):  # sleeps the pacer's delay
        await send(addr)

The guard holds no state between uses: one guard can serve many threads or
tasks at once, each use acquiring afresh. Nothing is refunded on exit: a
request that was let through was spent, even if it failed.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Optional, TypeVar, Union

from ._common import Key, LimitLike, limit_of
from .errors import RateLimited
from .results import Decision

F = TypeVar("F", bound=Callable[..., Any])
KeyOrFunc = Union[Key, Callable[..., Key]]


class _Base:
    def __init__(self, client: Any, key: KeyOrFunc, limit: LimitLike, cost: int = 1, *,
                 strict: bool = False, wait: bool = True) -> None:
        self.client = client
        self.key = key
        self.limit = limit_of(limit)
        self.cost = cost
        self.strict = strict
        self.wait = wait

    def _key(self, args: Any = (), kwargs: Any = None) -> Key:
        if callable(self.key):
            return self.key(*args, **(kwargs or {}))
        return self.key

    def _fixed_key(self) -> Key:
        if callable(self.key):
            raise TypeError("a guard with a key function works as a decorator only")
        return self.key

    def _check(self, key: Key, d: Decision) -> Optional[float]:
        """Raise RateLimited for a denial; return the pacer delay to sleep, if any."""
        if not d.allowed:
            raise RateLimited(key, d)
        if self.wait and d.delay_ns > 0:
            return d.delay_ns / 1e9
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r}, {self.limit!r}, cost={self.cost})"


class Guard(_Base):
    """Acquire ``cost`` of ``limit`` for ``key`` with a sync :class:`~sluice.Client`.

    ``with guard as decision:`` acquires, raises :class:`RateLimited` if
    denied, and sleeps an allowed pacer decision's delay when ``wait`` is
    true. ``@guard`` does the same around every call of a function; the key
    may then be a function of the call's arguments.
    """

    def acquire(self, key: Optional[Key] = None) -> Decision:
        """Acquire once for ``key`` (default: the guard's), as entering the guard does."""
        k = self._fixed_key() if key is None else key
        d: Decision = self.client.acquire(k, self.limit, self.cost, strict=self.strict)
        delay = self._check(k, d)
        if delay:
            time.sleep(delay)
        return d

    def __enter__(self) -> Decision:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise TypeError("decorate coroutine functions with AsyncClient.limit")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.acquire(self._key(args, kwargs))
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class AsyncGuard(_Base):
    """Acquire with an :class:`~sluice.AsyncClient`: ``async with guard`` and ``@guard`` on coroutine functions."""

    async def acquire(self, key: Optional[Key] = None) -> Decision:
        """Acquire once for ``key`` (default: the guard's), as entering the guard does."""
        k = self._fixed_key() if key is None else key
        d: Decision = await self.client.acquire(k, self.limit, self.cost, strict=self.strict)
        delay = self._check(k, d)
        if delay:
            await asyncio.sleep(delay)
        return d

    async def __aenter__(self) -> Decision:
        return await self.acquire()

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def __call__(self, fn: F) -> F:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError("AsyncClient.limit decorates coroutine functions; use Client.limit")

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            await self.acquire(self._key(args, kwargs))
            return await fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
