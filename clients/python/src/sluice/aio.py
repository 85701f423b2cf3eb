"""The asyncio client: one connection, pipelined, shared by every task.

# Concurrency

An :class:`AsyncClient` serves any number of tasks of one event loop over
one Unix-socket connection. Each call writes its request at once and waits
for its answer; answers come back in request order and are matched to
their requests by that order and checked by frame id, so concurrent tasks
pipeline without a lock. Used from a different event loop (a new
``asyncio.run``), the client opens a new connection.

# Failures

As the sync client: lazy connect, reconnect after a restart, one retry of
requests a reused connection lost before any answer arrived, and the
``on_unavailable`` policy for acquire, peek, multi and lease. ``timeout`` bounds
connecting and the wait for each answer; when the oldest outstanding answer
is late, the connection is closed and every outstanding request fails with
:class:`Unavailable` (answers arrive in order, so the rest are stuck
behind it). Cancelling a waiting task is safe: its answer is read and
dropped when it arrives.
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any, AsyncIterator, Deque, Iterable, List, NamedTuple, Optional, Sequence, Union

from ._answers import FrameReader, frame_error, value
from ._calls import (
    At, Call, Key, LimitLike, PipelineBase, item_call, lease_call, lease_id, multi_call, named, release_call,
    request_flags, scan_call, simple_call,
)
from ._policy import breaker_open, no_answer
from ._protocol_core import ProtocolCore, decide_call
from .client import check_sidecar
from .errors import ProtocolError, SluiceError, Unavailable
from .guard import AsyncConcurrencyGuard, AsyncGuard, KeyOrFunc
from .proto import Opcode
from .results import Decision, Hello, Lease, MultiDecision, MultiItem, ScanEntry, ScanPage, Stats

__all__ = ["AsyncClient", "AsyncPipeline"]

class _Stale(Unavailable):
    """A reused connection was lost before any byte answered this request: safe to resend."""


class _Pending(NamedTuple):
    fid: int
    future: "asyncio.Future[Any]"
    deadline: float
    rx: int  # bytes the connection had received when the request was sent


class _Conn(asyncio.Protocol):
    """One connection: writes requests, splits the answers into frames, resolves futures in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, path: str, timeout: Optional[float]) -> None:
        self.loop = loop
        self.path = path
        self.timeout = timeout
        self.transport: Optional[asyncio.Transport] = None
        self.fd = -1
        self.error: Optional[BaseException] = None  # what closed the connection, if it was a failure
        self.reader = FrameReader()
        self.pending: Deque[_Pending] = collections.deque()
        self.closed = False
        self.rx = 0
        self.asking: "Optional[asyncio.Future[int]]" = None  # the HELLO asking the sidecar's version
        self._timer: Optional[asyncio.TimerHandle] = None
        self._wbuf: List[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def _write(self, payload: bytes) -> None:
        """Write at once on an idle connection; else gather the writes of this loop
        iteration into one (tasks that ask together cost one syscall, and the
        sidecar answers them in one batch)."""
        if not self.pending and not self._wbuf:
            self.transport.write(payload)  # type: ignore[union-attr]
        elif self._wbuf:
            self._wbuf.append(payload)
        else:
            self._wbuf.append(payload)
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        buf, self._wbuf = self._wbuf, []
        if buf and not self.closed:
            self.transport.write(b"".join(buf))  # type: ignore[union-attr]

    def _closed_future(self) -> "asyncio.Future[Any]":
        """The answer of a request on a connection that closed before it was sent:
        the error that closed it (a refusal the sidecar sent, say)."""
        fut = self.loop.create_future()
        fut.set_exception(self.error or Unavailable(f"the sidecar is unavailable: {self.path} closed the connection"))
        return fut

    def send_one(self, payload: bytes, fid: int) -> "asyncio.Future[Any]":
        """Write one request frame; return the future of its answer."""
        if self.closed:
            return self._closed_future()
        self._write(payload)
        fut = self.loop.create_future()
        if self.timeout is None:
            self.pending.append(_Pending(fid, fut, 0.0, self.rx))
        else:
            deadline = self.loop.time() + self.timeout
            self.pending.append(_Pending(fid, fut, deadline, self.rx))
            if self._timer is None:
                self._timer = self.loop.call_at(deadline, self._expire)
        return fut

    def send(self, payload: bytes, fids: Sequence[int]) -> List["asyncio.Future[Any]"]:
        """Write a payload of len(fids) request frames; return the futures of their answers."""
        if self.closed:
            return [self._closed_future() for _ in fids]
        self._write(payload)
        deadline = self.loop.time() + (self.timeout or 0.0)
        futs = []
        for fid in fids:
            fut = self.loop.create_future()
            self.pending.append(_Pending(fid, fut, deadline, self.rx))
            futs.append(fut)
        if self._timer is None and self.timeout is not None:
            self._timer = self.loop.call_at(deadline, self._expire)
        return futs

    def data_received(self, data: bytes) -> None:
        self.rx += len(data)
        try:
            frames = self.reader.feed(data)
        except ProtocolError as e:
            self.fail(e)
            return
        pending = self.pending
        for f in frames:
            err: Optional[Exception] = frame_error(f)
            if err is None and not pending:
                err = ProtocolError("the sidecar sent an answer to no request")
            if err is not None:
                self.fail(err)  # a frame-level error fails everything outstanding
                return
            fut = pending.popleft().future
            if not fut.done():
                fut.set_result(f)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if exc is not None and self.pending and self.fd >= 0:
            # A failed write: the sidecar closed the connection, maybe after
            # writing why (a refusal: Busy at its connection limit, Denied for
            # a peer it does not allow). The socket is still open here: read
            # it, so that the refusal, not "broken pipe", fails the requests.
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                data = b""
            if data:
                self.data_received(data)
        why = f": {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}" if exc else ""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        cut = self.reader.buffered
        while self.pending:
            p = self.pending.popleft()
            if p.future.done():
                continue
            err: Exception
            if cut:
                err = ProtocolError(f"the sidecar closed the connection in the middle of a frame "
                                    f"({cut} bytes of it received)")
            elif p.rx > 0 and p.rx == self.rx:
                err = _Stale(f"the sidecar is unavailable: {self.path} closed the connection{why}")
            else:
                err = Unavailable(f"the sidecar is unavailable: lost the connection to {self.path}{why}")
            p.future.set_exception(err)

    def fail(self, exc: BaseException) -> None:
        """Fail every outstanding request with exc and close the connection."""
        self.closed = True
        if self.error is None:
            self.error = exc
        while self.pending:
            fut = self.pending.popleft().future
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close the transport from any loop or thread; outstanding requests fail."""
        t = self.transport
        if t is None or t.is_closing():
            return
        try:
            current: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is self.loop:
            t.close()
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(t.close)
        # else its loop has ended: nothing can run its callbacks; the socket is
        # closed when the transport is collected (with a ResourceWarning).

    def _expire(self) -> None:
        self._timer = None
        if not self.pending or self.closed:
            return
        deadline = self.pending[0].deadline
        if deadline <= self.loop.time():
            self.fail(no_answer(self.path, self.timeout))
        else:
            self._timer = self.loop.call_at(deadline, self._expire)


class AsyncClient(ProtocolCore):
    """An asyncio client of the sidecar's native protocol; the API of :class:`~sluice.Client`, awaited.

    Args:
        socket_path: the sidecar's Unix socket; default $SLUICE_SOCKET, else "var/sluice.sock".
        timeout: seconds to wait to connect and for each answer (default 0.05); None waits for ever.
        on_unavailable: "open" (the default), "closed" or "raise", as for :class:`~sluice.Client`.
        breaker: the circuit breaker's settings, as for :class:`~sluice.Client`.
        lazy: as for :class:`~sluice.Client`: without it, making the client checks that the
            sidecar answers (a blocking PING on a connection of its own, since there may be no
            event loop yet: tens of microseconds, at most 1 s or ``timeout``).

    Use ``async with AsyncClient(...) as client`` or ``await client.close()``.
    """

    _start_check = staticmethod(check_sidecar)  # blocking: there may be no event loop yet
    _conn: Optional[_Conn]  # the connection, of the event loop it was made in
    _lock: Optional[asyncio.Lock]  # held while connecting, of _lock_loop
    _lock_loop: Optional[asyncio.AbstractEventLoop]

    def __repr__(self) -> str:
        return f"AsyncClient({self.socket_path!r}, timeout={self.timeout!r}, on_unavailable={self.on_unavailable!r})"

    async def acquire(self, key: Key, limit: LimitLike, cost: int = 1, *, at: At = None,
                      strict: bool = False, shadow: bool = False) -> Decision:
        """Decide a request of ``cost`` tokens and, if allowed, consume them. See :meth:`Client.acquire`."""
        return await self._decide(Opcode.ACQUIRE, key, limit, cost, at, request_flags(strict, shadow))

    async def peek(self, key: Key, limit: LimitLike, *, at: At = None) -> Decision:
        """The bucket as it stands, changing and creating nothing. See :meth:`Client.peek`."""
        return await self._decide(Opcode.PEEK, key, limit, 0, at, False)

    async def refund(self, key: Key, limit: LimitLike, amount: int = 1, *, at: At = None) -> Decision:
        """Give ``amount`` tokens back (capped at the limit's maximum); the decision after it."""
        return await self._one(item_call(Opcode.REFUND, key, limit, amount, at, False))  # type: ignore[no-any-return]

    async def reset(self, key: Key, limit: LimitLike) -> bool:
        """Forget the bucket; return whether it existed."""
        return await self._one(item_call(Opcode.RESET, key, limit, 0, None, False))  # type: ignore[no-any-return]

    async def multi(self, items: Iterable[Union[MultiItem, Sequence[Any]]], *, at: At = None) -> MultiDecision:
        """Acquire up to 16 items all or nothing. See :meth:`Client.multi`."""
        return await self._one(multi_call(items, at))  # type: ignore[no-any-return]

    async def lease(self, key: Key, limit: LimitLike) -> Lease:
        """Take one slot of a concurrency limit; falsy when every slot is held. See :meth:`Client.lease`."""
        return await self._one(lease_call(key, limit))  # type: ignore[no-any-return]

    async def release(self, key: Key, limit: LimitLike, lease: Union[int, Lease]) -> bool:
        """Give a lease's slot back: True if it was held and is free now. See :meth:`Client.release`."""
        lid = lease_id(lease)
        if lid == 0:
            return False
        return (await self._one(release_call(key, limit, lid))).released  # type: ignore[no-any-return]

    def concurrency(self, key: KeyOrFunc, limit: LimitLike) -> AsyncConcurrencyGuard:
        """``async with client.concurrency(key, lim) as lease:``, or ``@client.concurrency(...)`` on a
        coroutine function: hold a lease for the block, released on exit; raises :class:`RateLimited`
        if every slot is held. See :meth:`Client.concurrency`."""
        return AsyncConcurrencyGuard(self, key, limit)

    async def scan(self, prefix: Key = "", *, count: int = 100) -> AsyncIterator[ScanEntry]:
        """Iterate the buckets whose key starts with ``prefix``: ``async for e in client.scan("login:")``."""
        cursor = 0
        while True:
            page = await self.scan_page(prefix, cursor, count)
            for e in page.entries:
                yield e
            if page.next == 0:
                return
            cursor = page.next

    async def scan_page(self, prefix: Key = "", cursor: int = 0, count: int = 100) -> ScanPage:
        """One page of a scan: at most ``count`` entries and the next cursor (0: done)."""
        return await self._one(scan_call(prefix, cursor, count))  # type: ignore[no-any-return]

    async def stats(self) -> Stats:
        """The sidecar's counters, by name."""
        return await self._one(simple_call(Opcode.STATS))  # type: ignore[no-any-return]

    async def ping(self) -> None:
        """Check that the sidecar answers; raise :class:`Unavailable` if not."""
        await self._one(simple_call(Opcode.PING))

    async def hello(self) -> Hello:
        """The sidecar's protocol version, limits and table geometry."""
        return await self._one(simple_call(Opcode.HELLO))  # type: ignore[no-any-return]

    def pipeline(self) -> AsyncPipeline:
        """A batch of operations sent in one write; ``await p.execute()``."""
        return AsyncPipeline(self)

    def limit(self, key: KeyOrFunc, limit: LimitLike, cost: int = 1, *, strict: bool = False,
              wait: bool = True) -> AsyncGuard:
        """``async with client.limit(key, lim)`` or ``@client.limit(...)`` on a coroutine function.

        Raises :class:`RateLimited` when denied; sleeps a pacer's delay when ``wait``.
        """
        return AsyncGuard(self, key, limit, cost, strict=strict, wait=wait)

    async def close(self) -> None:
        """Close the connection; outstanding requests fail. The client reconnects if used again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ---- internals -----------------------------------------------------------

    async def _decide(self, code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int) -> Decision:
        fid, payload = self._decide_request(code, key, limit, n, at, flags, False)  # bad arguments raise before any I/O
        brk = self._breaker
        ok, probe = brk.allow()
        if not ok:
            return self._unavailable(breaker_open(self.socket_path), decide_call(code, limit))  # type: ignore[no-any-return]
        for attempt in (0, 1):
            try:
                conn = self._conn
                if conn is None or conn.closed or conn.loop is not asyncio.get_running_loop():
                    conn = await self._connect()
                ver = await self._sidecar_version(conn) if named(limit) else 0
                v4 = ver >= 4
                if v4:
                    fid, payload = self._decide_request(code, key, limit, n, at, flags, True, fid, ver >= 7)
                f = await conn.send_one(payload, fid)
                d = self._decided(f, fid, code, payload[4], limit, v4)  # answered in the request's version
                if d is None:
                    d = value(self._results(conn, f, fid, (decide_call(code, limit),))[0])
                brk.done(probe, None)
                return d  # type: ignore[no-any-return]
            except Unavailable as e:
                if isinstance(e, _Stale) and attempt == 0:
                    continue  # resent once, on a new connection
                return self._outage(probe, e, decide_call(code, limit))  # type: ignore[no-any-return]
            except BaseException as e:
                brk.done(probe, e)
                raise
        raise AssertionError("unreachable")

    async def _sidecar_version(self, conn: _Conn) -> int:
        """The protocol version of conn's sidecar, asked with a HELLO the first time (the tasks
        that come meanwhile wait for its answer); 0 if it failed."""
        v = self._known_version(conn)
        if v is not None:
            return v
        if conn.asking is None:
            conn.asking = asyncio.ensure_future(self._ask_version(conn))
        return await asyncio.shield(conn.asking)

    async def _ask_version(self, conn: _Conn) -> int:
        fid, hello = self._hello_request()
        try:
            return self._hello_answered(conn, await conn.send_one(hello, fid), fid)
        except ProtocolError as e:
            conn.fail(e)  # the stream is out of step
        except SluiceError:
            pass  # the request goes without its deadline, and meets the same trouble
        return self._hello_answered(conn, None, fid)

    async def _one(self, call: Call) -> Any:
        out = await self._run((call,), raise_on_error=True)
        return out[0]

    async def _run(self, calls: Sequence[Call], raise_on_error: bool) -> List[Any]:
        out: List[Any] = []
        if not calls:
            return out
        failure: Optional[Unavailable] = None
        ok, probe = self._breaker.allow()
        if not ok:
            return self._refused(calls, raise_on_error)
        try:
            await self._send(calls, out)
        except Unavailable as e:
            failure = e
        except BaseException as e:
            self._breaker.done(probe, e)
            raise
        self._breaker.done(probe, failure)
        return self._finish(out, calls, failure, raise_on_error)

    async def _send(self, calls: Sequence[Call], out: List[Any]) -> List[Any]:
        """_run past the breaker: appends the answers to out, then raises Unavailable if some are missing."""
        failure: Optional[Unavailable] = None
        for attempt in (0, 1):
            failure = None
            try:
                conn = self._conn
                if conn is None or conn.closed or conn.loop is not asyncio.get_running_loop():
                    conn = await self._connect()
            except Unavailable as e:
                failure = e
                break
            packed = self._batch(calls, await self._sidecar_version(conn) if self._needs_version(calls) else 0)
            futs = conn.send(packed.payload, [fid for fid, _ in packed.frames])
            try:
                for (fid, group), fut in zip(packed.frames, futs):
                    try:
                        f = await fut
                    except Unavailable as e:
                        failure = e
                        break
                    out.extend(self._results(conn, f, fid, group))
            finally:
                for fut in futs:  # after a failure: the rest failed with it; mark them retrieved
                    if not fut.done():
                        fut.cancel()
                    elif not fut.cancelled():
                        fut.exception()
            if isinstance(failure, _Stale) and not out and attempt == 0:
                continue
            break
        if failure is not None:
            raise failure
        return out

    def _results(self, conn: _Conn, f: Any, fid: int, calls: Sequence[Call]) -> List[Any]:
        """The answers of a response frame; on a protocol or frame-level error, the connection failed."""
        try:
            return self._answers(f, fid, calls)
        except SluiceError as e:
            conn.fail(e)  # the stream is out of step: nothing after this can be trusted
            raise

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        assert self._lock is not None
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed and conn.loop is loop:
                return conn  # another task connected while this one waited
            if conn is not None and conn.loop is not loop:
                self._conn = None  # another event loop's
                conn.close()
            try:
                _, proto = await asyncio.wait_for(
                    loop.create_unix_connection(lambda: _Conn(loop, self.socket_path, self.timeout),
                                                self._path),
                    self.timeout)
            except (OSError, asyncio.TimeoutError) as e:
                raise self._cannot_connect(e, isinstance(e, asyncio.TimeoutError)) from e
            self._conn = proto
            return proto

    def _forget(self) -> None:
        """No connection: when made, and after fork in the child (the connection is the parent's)."""
        self._conn, self._lock, self._lock_loop = None, None, None


class AsyncPipeline(PipelineBase):
    """A batch of operations for an :class:`AsyncClient`, sent in one write by :meth:`execute`.

    Queue with the same chaining methods as :class:`~sluice.Pipeline`, then
    ``results = await p.execute()``.
    """

    async def execute(self, raise_on_error: bool = True) -> List[Any]:
        """Send the queued operations and return their answers, in order. See :meth:`Pipeline.execute`."""
        return await self._client._run(list(self._calls), raise_on_error)  # type: ignore[no-any-return]
