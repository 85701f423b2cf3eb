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

``client.concurrency(...)``: hold a lease of a concurrency limit for a block,
as nginx's limit_conn holds a connection's slot for the request::

    uploads = Concurrency(limit=10, lease="5m")

    with client.concurrency(f"upload:{user}", uploads) as lease:   # raises RateLimited if all 10 are held
        store(upload)                                              # released on exit, even on an exception

    @client.concurrency(lambda user, **kw: f"report:{user}", Concurrency(2, "10m"))
    def build_report(user, **kw): ...

A denied lease raises :class:`RateLimited` (its ``decision`` is the
:class:`~sluice.Lease`, ``retry_after`` when the earliest held lease
expires), so the block never runs without its slot; nothing is released
then. On exit the lease is released, whatever the block raised. A release
that fails because the sidecar cannot be asked is logged, not raised: the
lease expires on its own ``lease`` after it was taken. A lease the
``on_unavailable`` policy granted (``degraded``) holds nothing and releases
nothing. Unlike ``client.limit``, a concurrency guard holds its lease
between entering and leaving: one ``with`` at a time per guard (each
``client.concurrency(...)`` call makes a new one; the decorator makes one
per call).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Optional, TypeVar, Union

from ._calls import Key, LimitLike, limit_of
from ._policy import release_failed
from .errors import RateLimited, SluiceError, Unavailable
from .results import Decision, Lease

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


class _ConcurrencyBase:
    def __init__(self, client: Any, key: KeyOrFunc, limit: LimitLike) -> None:
        self.client = client
        self.key = key
        self.limit = limit_of(limit)
        self._held: Optional[Lease] = None
        self._held_key: Optional[Key] = None

    def _fixed_key(self) -> Key:
        if callable(self.key):
            raise TypeError("a concurrency guard with a key function works as a decorator only")
        return self.key

    def _take(self, key: Key, lease: Lease) -> Lease:
        """Hold an allowed lease; raise RateLimited for a denied one (nothing to release)."""
        if not lease.allowed:
            raise RateLimited(key, lease)
        self._held, self._held_key = lease, key
        return lease

    def _check_free(self) -> None:
        if self._held is not None:
            raise RuntimeError("this concurrency guard holds a lease already: make one per use "
                               "(client.concurrency(...) in each with)")

    def _release_failed(self, key: Key, lease: Lease, e: SluiceError, raising: bool) -> None:
        """A release that failed: logged when the sidecar could not be asked or the block is
        raising already (its exception goes on), else raised."""
        if not isinstance(e, Unavailable) and not raising:
            raise e
        release_failed(self.limit, key, lease.id, e)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r}, {self.limit!r})"


class ConcurrencyGuard(_ConcurrencyBase):
    """Hold a lease of a concurrency limit for a block, with a sync :class:`~sluice.Client`.

    ``with guard as lease:`` leases (raising :class:`RateLimited` if every
    slot is held) and releases on exit, even on an exception. ``@guard``
    does the same around every call of a function; the key may then be a
    function of the call's arguments.
    """

    def __enter__(self) -> Lease:
        self._check_free()
        key = self._fixed_key()
        return self._take(key, self.client.lease(key, self.limit))

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        lease, key = self._held, self._held_key
        self._held = self._held_key = None
        if lease is None or not lease.id:
            return None
        try:
            self.client.release(key, self.limit, lease.id)
        except SluiceError as e:
            self._release_failed(key, lease, e, exc_type is not None)  # type: ignore[arg-type]
        return None

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise TypeError("decorate coroutine functions with AsyncClient.concurrency")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = self.key(*args, **kwargs) if callable(self.key) else self.key
            with ConcurrencyGuard(self.client, key, self.limit):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class AsyncConcurrencyGuard(_ConcurrencyBase):
    """:class:`ConcurrencyGuard` for an :class:`~sluice.AsyncClient`: ``async with`` and ``@guard`` on
    coroutine functions."""

    async def __aenter__(self) -> Lease:
        self._check_free()
        key = self._fixed_key()
        return self._take(key, await self.client.lease(key, self.limit))

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        lease, key = self._held, self._held_key
        self._held = self._held_key = None
        if lease is None or not lease.id:
            return None
        try:
            await self.client.release(key, self.limit, lease.id)
        except SluiceError as e:
            self._release_failed(key, lease, e, exc_type is not None)  # type: ignore[arg-type]
        return None

    def __call__(self, fn: F) -> F:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError("AsyncClient.concurrency decorates coroutine functions; use Client.concurrency")

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = self.key(*args, **kwargs) if callable(self.key) else self.key
            async with AsyncConcurrencyGuard(self.client, key, self.limit):
                return await fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
