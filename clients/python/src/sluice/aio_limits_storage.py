"""The asyncio storage for ``limits.aio``: ``async+sluice://PATH``.

Importing this module registers the scheme; the storage is
:mod:`sluice.limits_storage`'s, awaited, on an :class:`~sluice.AsyncClient`
(one connection per event loop, shared by every task), and that module's
docs say what each method asks and how it differs from the Redis storage::

    import sluice.aio_limits_storage  # registers async+sluice://
    from limits import parse
    from limits.aio.strategies import MovingWindowRateLimiter
    from limits.storage import storage_from_string

    limiter = MovingWindowRateLimiter(storage_from_string("async+sluice:///run/sluice/sluice.sock"))
    if not await limiter.hit(parse("10/minute"), "user", user_id): ...

SlowAPI calls the sync strategies even under Starlette and FastAPI: it
takes ``sluice://`` (:mod:`sluice.limits_storage`), whose calls wait for
the sidecar on the event loop's thread (tens of microseconds each).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, Type, TypeVar, Union

from limits.aio.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from . import _limits_plan as plan
from .aio import AsyncClient
from .errors import SluiceError

__all__ = ["SluiceStorage"]

T = TypeVar("T")


async def _run(p: plan.Plan[T], storage: SluiceStorage) -> T:
    """:func:`sluice._limits_plan.run`, awaited."""
    done, v = plan.step(p)
    while not done:
        try:
            answers = await storage._send(v)
        except SluiceError as e:
            done, v = plan.step(p, error=e)
        else:
            done, v = plan.step(p, answers)
    return v  # type: ignore[no-any-return]


class SluiceStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """The ``limits.aio`` storage of ``async+sluice://PATH``; see :mod:`sluice.limits_storage`."""

    STORAGE_SCHEME = ["async+sluice"]

    def __init__(self, uri: Optional[str] = None, wrap_exceptions: bool = False, **options: Union[float, str, bool]) -> None:
        self._plans, self.client = plan.client_of(uri, "async+sluice", options, AsyncClient)
        super().__init__(uri, wrap_exceptions=wrap_exceptions)

    @property
    def base_exceptions(self) -> Union[Type[Exception], Tuple[Type[Exception], ...]]:
        return SluiceError

    async def _send(self, ops: List[plan.Op]) -> List[Any]:
        if len(ops) == 1:
            return [await ops[0].call(self.client)]
        p = self.client.pipeline()
        for op in ops:
            op.call(p)
        return await p.execute()

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return await _run(self._plans.incr(key, expiry, amount), self)

    async def get(self, key: str) -> int:
        return await _run(self._plans.get(key), self)

    async def get_expiry(self, key: str) -> float:
        return await _run(self._plans.get_expiry(key), self)

    async def check(self) -> bool:
        return await _run(self._plans.check(), self)

    async def reset(self) -> Optional[int]:
        return await _run(self._plans.reset(), self)

    async def clear(self, key: str) -> None:
        await _run(self._plans.clear(key), self)

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return await _run(self._plans.acquire_entry(key, limit, expiry, amount), self)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return await _run(self._plans.get_moving_window(key, limit, expiry), self)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return await _run(self._plans.acquire_sliding_window_entry(key, limit, expiry, amount), self)

    async def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        return await _run(self._plans.get_sliding_window(key, expiry), self)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await _run(self._plans.clear_sliding_window(key, expiry), self)

    def __repr__(self) -> str:
        return f"SluiceStorage({self.client.socket_path!r}, asyncio)"
