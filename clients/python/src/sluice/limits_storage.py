"""A storage for the ``limits`` library (Flask-Limiter, SlowAPI) on the sidecar: ``sluice://PATH``.

Importing this module registers the scheme (``limits`` finds storages by
the classes defined, not by entry points), so import it once before
``storage_from_string``, ``Limiter(storage_uri=...)`` or
``Limiter(key_func, storage_uri=...)`` reads the URI::

    import sluice.limits_storage  # registers sluice:// (and nothing else)
    from flask_limiter import Limiter

    limiter = Limiter(get_remote_address, app=app, storage_uri="sluice:///run/sluice/sluice.sock")

``PATH`` is the sidecar's socket, absolute (``sluice:///run/sluice.sock``)
or relative to the working directory the storage is made in
(``sluice://var/sluice.sock``); ``sluice://`` alone is the client's default
($SLUICE_SOCKET, else var/sluice.sock). Making the storage makes its client,
which checks that the sidecar answers (raising :class:`sluice.Unavailable`
naming the socket if not), so a wrong path fails when the app starts.
Options, in the query or as keyword options
(``RATELIMIT_STORAGE_OPTIONS``): ``timeout`` (seconds per answer, the
client's default if not given; ``none`` waits for ever), ``key_prefix``
(``LIMITS`` by default: keys are ``LIMITS:`` and limits' key, as the Redis
storage makes them; ``reset`` clears what is under it) and ``lazy``
(``true``: no check when the storage is made, for an app that may start
before its sidecar; its calls raise until the sidecar has answered). :mod:`sluice.aio_limits_storage` is the asyncio
storage, ``async+sluice://PATH``. Needs ``limits`` 5.x
(``pip install sluice-ratelimit[limits]``).

Every decision (``incr``, ``acquire_entry``,
``acquire_sliding_window_entry``) is one acquire, one round trip, atomic
across every process of the host. What each method asks:

============================== ===========================================================
``incr(key, expiry, n)``       acquire ``n`` of ``token_bucket`` of ``MAX`` tokens refilled
                               whole every ``expiry``; the count is ``MAX - remaining``
``get``, ``get_expiry``        peek it (the window read from the key)
``clear(key)``                 reset it and the key's moving window
``acquire_entry``              acquire on ``sliding_log:limit,window=expiry``
                               (``window_counters`` of 64 sub-windows above 4096)
``get_moving_window``          peek it; a second round trip for the oldest entry's time
                               unless the window is empty or full
``acquire_sliding_window_      acquire ``n * 10**6`` of ``sliding_window`` of
entry``                        ``10**6 * (limit + 1) - 1`` per ``expiry``
``get_sliding_window``         two peeks in one round trip: at this window's start and the
                               next's, which give both windows' counts
``clear_sliding_window``       reset it
``check``                      ping
``reset``                      scan the prefix and reset what it lists
============================== ===========================================================

Where it differs from the Redis storage:

- A fixed window starts at the key's first hit, as limits defines it,
  and the next one starts where it ends (limits' docs: 10 per minute from
  00:00:45 resets at 00:01:45, and again at 00:02:45), where Redis starts
  it at the next hit after its key expired; once the sidecar has reused an
  idle bucket's slot, the next window starts at the next hit too. A count
  past the limit goes on counting, as Redis's INCR does, so ``incr``
  reports what Redis would. (The sidecar's ``fixed_window`` starts windows
  at multiples of their length since the epoch; a ``token_bucket`` that
  refills whole does what limits asks.)
- The moving window is exact (a log of every entry's time, as Redis's
  list) up to a limit of 4096 per key, the sidecar's largest log; above
  it the window is counted in 64 sub-windows and admits no more than the
  exact one, sometimes less.
- The sliding window counter's windows are aligned to the epoch as the
  memory and Memcached storages' are (the class is a
  ``TimestampedSlidingWindow``). It admits what limits' definition,
  ``floor(weighted count) + cost <= limit``, admits, but denies where the
  weighted count is less than a millionth below a whole number (for a
  millionth of the window per request the previous window counted, about
  3.6 ms an hour for each), where Redis would admit.
- ``get``, ``get_expiry`` and ``clear`` read the window's length from the
  end of limits' key (``.../10/1/minute``); a key without one, which no
  strategy, Flask-Limiter or SlowAPI makes, is a ValueError.
- ``reset`` lists the prefix's buckets with the sidecar's scan, which needs
  a state file of ``--slot-size 128`` or ``256`` (without, it raises
  NotImplementedError: Flask-Limiter's ``reset`` logs that the storage
  cannot be reset). A slot keeps 64 or 192 key bytes: longer keys are not
  listed, and so not reset; nor are buckets made while it runs. It returns
  the number of buckets that existed.

Failures are exceptions, as with the other storages: the client does not
answer by a policy (it is made with ``on_unavailable="raise"``), so a
sidecar that cannot be asked raises :class:`sluice.Unavailable` (all
:class:`sluice.SluiceError`, the storage's ``base_exceptions``, which
``wrap_exceptions=True`` turns into limits' ``StorageError``).
Flask-Limiter's and SlowAPI's ``swallow_errors`` (let the request through)
and in-memory fallback (``in_memory_fallback_enabled``, until ``check()``
answers again) decide what a request gets then. The client's circuit
breaker makes those errors immediate while the sidecar does not answer.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple, Type, Union

from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from . import _limits_plan as plan
from .client import Client
from .errors import SluiceError

__all__ = ["SluiceStorage"]


class SluiceStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """The ``limits`` storage of ``sluice://PATH``: fixed window, moving window and sliding
    window counter strategies on the sidecar. See the module's docs."""

    STORAGE_SCHEME = ["sluice"]

    def __init__(self, uri: Optional[str] = None, wrap_exceptions: bool = False, **options: Union[float, str, bool]) -> None:
        self._plans, self.client = plan.client_of(uri, "sluice", options, Client)
        super().__init__(uri, wrap_exceptions=wrap_exceptions)

    @property
    def base_exceptions(self) -> Union[Type[Exception], Tuple[Type[Exception], ...]]:
        return SluiceError

    def _send(self, ops: List[plan.Op]) -> List[Any]:
        if len(ops) == 1:
            return [ops[0].call(self.client)]
        p = self.client.pipeline()
        for op in ops:
            op.call(p)
        return p.execute()

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return plan.run(self._plans.incr(key, expiry, amount), self._send)

    def get(self, key: str) -> int:
        return plan.run(self._plans.get(key), self._send)

    def get_expiry(self, key: str) -> float:
        return plan.run(self._plans.get_expiry(key), self._send)

    def check(self) -> bool:
        return plan.run(self._plans.check(), self._send)

    def reset(self) -> Optional[int]:
        return plan.run(self._plans.reset(), self._send)

    def clear(self, key: str) -> None:
        plan.run(self._plans.clear(key), self._send)

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return plan.run(self._plans.acquire_entry(key, limit, expiry, amount), self._send)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return plan.run(self._plans.get_moving_window(key, limit, expiry), self._send)

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return plan.run(self._plans.acquire_sliding_window_entry(key, limit, expiry, amount), self._send)

    def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        return plan.run(self._plans.get_sliding_window(key, expiry), self._send)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        plan.run(self._plans.clear_sliding_window(key, expiry), self._send)

    def __repr__(self) -> str:
        return f"SluiceStorage({self.client.socket_path!r})"
