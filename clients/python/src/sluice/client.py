"""The synchronous client: one Unix-socket connection, shared by every thread.

# Concurrency

A :class:`Client` is safe to share between threads. It holds one
connection and a lock around each exchange (send the request, read its
answer), so threads take turns; an exchange costs one round trip, tens of
microseconds. :meth:`Client.pipeline` sends many operations in one write
and reads all their answers: use it for batches. After ``os.fork`` a child
process drops the inherited connection and opens its own on first use (so
a client made before gunicorn forks its workers is fine).

# Failures

Making a client checks that the sidecar answers (a PING on a connection of
its own): nothing listening at the socket, a sidecar that does not answer
within 1 s, or one that refuses this process raises at once, so a wrong
path fails the application's start instead of turning limiting off
(``lazy=True`` skips the check; calls then raise until the sidecar first
answers). Then the client connects on first use and reconnects on the next
call after the sidecar restarts. A request sent on a reused connection that fails before
any byte of the answer arrives (the sidecar restarted or closed an idle
connection) is retried once on a new connection. When the sidecar cannot
be asked (no socket, the connection broke, no answer within ``timeout``,
50 ms by default, it is shutting down or busy), acquire, peek, multi and
lease answer by the ``on_unavailable`` policy: "open" (the default, as the
Go client's) returns an allowed decision with ``degraded=True`` (a lease
that holds nothing), "closed" a denied one, "raise" raises
:class:`Unavailable`; the other operations always raise it. The policy
covers outages of a sidecar that has answered the client; it never answers
for one that refuses this process (:class:`Denied`), nor for a request the
sidecar rejects. The ``sluice`` logger says once when the sidecar becomes
unavailable and once when it answers again. ``degraded_decisions`` counts the policy's answers, and
the ``sluice`` logger says how many at most every 10 seconds.

A sidecar that accepts connections but does not answer (stopped,
overloaded) would cost every call its timeout: after 3 consecutive calls
without an answer in time, the circuit breaker opens and calls fail at
once (the policy answers) for 0.25 s, doubling after each failed probe up
to 10 s (each period drawn at random from its upper half); then one call
probes the sidecar, and an answer closes the breaker. ``healthy()`` is
False while it is open; each opening and closing is logged once.

A sidecar that refuses a connection (:class:`Busy` at its connection
limit, an outage; :class:`Denied` for a peer it does not allow, a mistake)
writes its refusal and closes; the client reports the refusal even if its
request was written after the close.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Union

from . import proto
from ._answers import FrameReader, results, value
from ._calls import (
    At, Call, Frames, Key, LimitLike, PipelineBase, item_call, lease_call, lease_id, multi_call, named, release_call,
    request_flags, scan_call, simple_call,
)
from ._policy import breaker_open, cannot_connect, no_answer
from ._protocol_core import ProtocolCore, decide_call
from .errors import ProtocolError, SluiceError, Unavailable
from .guard import ConcurrencyGuard, Guard, KeyOrFunc
from .limits import Limit, Named
from .proto import Opcode
from .results import Decision, Hello, Lease, MultiDecision, MultiItem, ScanEntry, ScanPage, Stats

__all__ = ["Client", "Pipeline", "PipelineBase"]

_U32 = struct.Struct("<I")
_SENDALL_MAX = 64 << 10  # above this, interleave sending with reading (a blocking sendall could deadlock)
_RECV = 64 << 10

class _Stale(Exception):
    """The connection failed before any byte of the answer arrived."""


#: Seconds the start check (a PING when a client is made) waits for the sidecar, unless the
#: client's timeout is longer: generous, since an application that fails to start because its
#: host was busy for a moment is worse than one that starts a second late.
START_TIMEOUT = 1.0


def check_sidecar(path: str, where: str, timeout: Optional[float]) -> None:
    """The start check: connect to ``path`` and PING; raise what the client would (an
    Unavailable that names ``where``, the sidecar's refusal, a ProtocolError) if that fails."""
    wait = None if timeout is None else max(timeout, START_TIMEOUT)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(wait)
    try:
        try:
            s.connect(path)
        except OSError as e:
            raise cannot_connect(where, e, isinstance(e, socket.timeout)) from e
        data = b""
        try:
            s.sendall(proto.frame(proto.Kind.REQUEST, 1, 1, bytes((Opcode.PING,)), proto.MIN_VERSION))
            reader = FrameReader()
            frames: List[Any] = []
            while not frames:
                more = s.recv(1 << 16)
                if not more:
                    break
                data += more
                frames = reader.feed(more)
        except socket.timeout as e:
            raise no_answer(where, wait) from e
        except OSError as e:
            try:  # a refusal written before the close is the error, not the broken pipe
                data += s.recv(1 << 16, socket.MSG_DONTWAIT)
                frames = FrameReader().feed(data)
            except (OSError, SluiceError):
                frames = []
            if not frames:
                raise Unavailable(f"the sidecar is unavailable: lost the connection to {where}: "
                                  f"{e.strerror or e}") from e
        if not frames:
            raise Unavailable(f"the sidecar is unavailable: {where} closed the connection")
        value(results(frames[0], 1, (simple_call(Opcode.PING),))[0])
    finally:
        s.close()


class Client(ProtocolCore):
    """A thread-safe client of the sidecar's native protocol.

    Args:
        socket_path: the sidecar's Unix socket; default $SLUICE_SOCKET, else
            "var/sluice.sock" (sluiced's default, relative to the working
            directory). A relative path is resolved once, when the client is
            made; ``client.socket_path`` is the absolute path.
        timeout: seconds to wait for the sidecar on connect and on each read
            and write (default 0.05); None waits for ever.
        on_unavailable: what acquire, peek, multi and lease do when the sidecar
            cannot be asked, after it has answered this client once:
            "open" (allow, ``degraded=True``; the default), "closed" (deny,
            ``degraded=True``) or "raise" (:class:`Unavailable`).
        breaker: the circuit breaker's (threshold, first open period, longest
            open period), in calls and seconds; a threshold of 0 turns it off.
        lazy: do not check the sidecar now (see below), for an application
            that may start before its sidecar.

    Making a client checks that the sidecar answers (a PING, waiting up to
    1 s or ``timeout`` if longer): it raises :class:`Unavailable` if nothing
    listens at the socket (naming its absolute path) or nothing answers,
    :class:`Denied` if the sidecar refuses this process. A wrong path, or an
    application started from another directory than the sidecar, fails at
    once instead of limiting nothing. With ``lazy=True`` it checks nothing,
    and every call raises :class:`Unavailable`, whatever ``on_unavailable``
    says, until the sidecar has answered once.

    Keys are str (sent as UTF-8) or bytes, 1..1024 bytes. Limits are
    :class:`~sluice.Limit` values or spec strings (parsed once and cached).
    Times (``at``) are datetimes or Unix seconds; see :class:`~sluice.Decision`
    for the units of answers. Use it as a context manager, or call
    :meth:`close`.
    """

    _start_check = staticmethod(check_sidecar)
    _sock: Optional[socket.socket] = None  # the connection, once connected
    _lock: threading.Lock  # held around each exchange

    def __repr__(self) -> str:
        return f"Client({self.socket_path!r}, timeout={self.timeout!r}, on_unavailable={self.on_unavailable!r})"

    # ---- decisions -----------------------------------------------------------

    def acquire(self, key: Key, limit: LimitLike, cost: int = 1, *, at: At = None,
                strict: bool = False, shadow: bool = False) -> Decision:
        """Decide a request of ``cost`` tokens and, if allowed, consume them.

        ``cost`` 0 peeks without creating the bucket. ``at`` replays the
        request at that time instead of the sidecar's clock. ``strict``
        restarts a token_bucket's refill clock on a request that empties it
        or is denied. ``shadow`` answers a denial as allowed with
        ``shadow_denied`` set (the sidecar counts it), as a limit the
        sidecar's config marks shadow does for every request; a limit whose
        spec says ``shadow=true`` (``limit.shadow``) makes every acquire of it
        a shadow request without it. A denial is a Decision with ``allowed=False``, not an
        exception. Raises :class:`InvalidLimit`, :class:`InvalidCost`,
        :class:`TableFull`, ... for what the sidecar refuses.
        """
        return self._decide(Opcode.ACQUIRE, key, limit, cost, at, request_flags(strict, shadow))

    def peek(self, key: Key, limit: LimitLike, *, at: At = None) -> Decision:
        """The bucket as it stands, changing and creating nothing.

        ``remaining`` is what is left now (what ``RL.GET`` says), ``allowed``
        whether a cost-1 acquire would be allowed, ``retry_after`` when it
        would be if not.
        """
        return self._decide(Opcode.PEEK, key, limit, 0, at, False)

    def refund(self, key: Key, limit: LimitLike, amount: int = 1, *, at: At = None) -> Decision:
        """Give ``amount`` tokens back (capped at the limit's maximum); the decision after it.

        The on_unavailable policy does not apply: an unreachable sidecar raises
        :class:`Unavailable`.
        """
        return self._one(item_call(Opcode.REFUND, key, limit, amount, at, False))  # type: ignore[no-any-return]

    def reset(self, key: Key, limit: LimitLike) -> bool:
        """Forget the bucket; return whether it existed."""
        return self._one(item_call(Opcode.RESET, key, limit, 0, None, False))  # type: ignore[no-any-return]

    def multi(self, items: Iterable[Union[MultiItem, Sequence[Any]]], *, at: At = None) -> MultiDecision:
        """Acquire up to 16 (key, limit, cost, strict) items all or nothing.

        Allowed only if every item is allowed, and then every item consumes;
        if any is denied nothing changes. Items are :class:`MultiItem` or
        tuples ``(key, limit[, cost[, strict]])``. Each decision of a named
        item carries ``outage`` and ``fails_closed`` as an acquire's (a
        sidecar of protocol version 7; see :class:`MultiDecision`).
        """
        return self._one(multi_call(items, at))  # type: ignore[no-any-return]

    # ---- concurrency limits (protocol version 3) -----------------------------

    def lease(self, key: Key, limit: LimitLike) -> Lease:
        """Take one slot of a concurrency limit: a :class:`Lease`, falsy when every slot is held.

        ``limit`` is a :class:`~sluice.Concurrency` limit (or the name of
        one in the sidecar's config). An allowed lease holds its slot until
        :meth:`release` gives ``lease.id`` back or, failing that, until the
        limit's ``lease`` duration has passed. A denied one (``allowed``
        False, ``id`` 0) holds nothing; ``retry_after`` is when the earliest
        held lease expires at the latest. The on_unavailable policy answers
        as for :meth:`acquire`, with a ``degraded`` lease that holds nothing.
        :meth:`concurrency` does both for a block.
        """
        return self._one(lease_call(key, limit))  # type: ignore[no-any-return]

    def release(self, key: Key, limit: LimitLike, lease: Union[int, Lease]) -> bool:
        """Give a lease's slot back: True if it was held and is free now.

        ``key`` and ``limit`` are those of the :meth:`lease`, ``lease`` the
        :class:`Lease` or its id. False: the sidecar holds no such lease
        (already released, expired, or never granted); a lease of id 0
        (denied, or granted by the on_unavailable policy) returns False
        without asking. The on_unavailable policy does not apply: an
        unreachable sidecar raises :class:`Unavailable`. Only the connection
        that took the lease, or a process of the same user, may release it:
        another user's release raises :class:`Denied` and the slot stays
        held (lease ids are random, so none is released by guessing).
        """
        lid = lease_id(lease)
        if lid == 0:
            return False
        return self._one(release_call(key, limit, lid)).released  # type: ignore[no-any-return]

    def concurrency(self, key: KeyOrFunc, limit: LimitLike) -> ConcurrencyGuard:
        """A context manager (and decorator) holding a lease of a concurrency limit for a block.

        ``with client.concurrency(key, lim) as lease:`` leases, raising
        :class:`RateLimited` if every slot is held (the block does not run),
        and releases on exit, even when the block raises. See
        :class:`sluice.guard.ConcurrencyGuard`.
        """
        return ConcurrencyGuard(self, key, limit)

    # ---- the rest ------------------------------------------------------------

    def scan(self, prefix: Key = "", *, count: int = 100) -> Iterator[ScanEntry]:
        """Iterate the buckets whose key starts with ``prefix``, a page of up to ``count`` at a time.

        Needs a sidecar whose table keeps keys inline (``--slot-size 128`` or
        256), else :class:`Unsupported`. Buckets created or moved during the
        scan may be missed or listed twice.
        """
        cursor = 0
        while True:
            page = self.scan_page(prefix, cursor, count)
            yield from page.entries
            if page.next == 0:
                return
            cursor = page.next

    def scan_page(self, prefix: Key = "", cursor: int = 0, count: int = 100) -> ScanPage:
        """One page of a scan: at most ``count`` entries (maybe none) and the next cursor (0: done)."""
        return self._one(scan_call(prefix, cursor, count))  # type: ignore[no-any-return]

    def stats(self) -> Stats:
        """The sidecar's counters, by name. The names are the server's and may change."""
        return self._one(simple_call(Opcode.STATS))  # type: ignore[no-any-return]

    def ping(self) -> None:
        """Check that the sidecar answers; raise :class:`Unavailable` if not."""
        self._one(simple_call(Opcode.PING))

    def hello(self) -> Hello:
        """The sidecar's protocol version, limits and table geometry."""
        return self._one(simple_call(Opcode.HELLO))  # type: ignore[no-any-return]

    def pipeline(self) -> Pipeline:
        """A batch of operations sent in one write; see :class:`Pipeline`."""
        return Pipeline(self)

    def limit(self, key: KeyOrFunc, limit: LimitLike, cost: int = 1, *, strict: bool = False,
              wait: bool = True) -> Guard:
        """A context manager and decorator that acquires, raising :class:`RateLimited` if denied.

        ``with client.limit("k", lim):`` acquires on entry. As a decorator,
        ``key`` may be a function of the decorated function's arguments.
        With ``wait`` (the default) an allowed pacer decision sleeps its
        ``delay`` first. See :class:`sluice.guard.Guard`.
        """
        return Guard(self, key, limit, cost, strict=strict, wait=wait)

    def close(self) -> None:
        """Close the connection. The client reconnects if used again."""
        with self._lock:
            self._drop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals -----------------------------------------------------------

    def _decide(self, code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int) -> Decision:
        """An ACQUIRE or PEEK: the hot path. One frame out, one in, decoded in one unpack.

        Anything but the usual (no connection yet, a failure, an error result,
        a frame split across reads, an open breaker) goes the general way of
        _exchange and _results.
        """
        brk = self._breaker
        if brk.state:  # not closed
            return self._guarded(decide_call(code, limit), lambda: self._decide_slow(code, key, limit, n, at, flags))
        try:
            with self._lock:
                # named(limit), inlined for a Limit: the hot path
                ver = self._sidecar_version() \
                    if type(limit) is Named or not isinstance(limit, Limit) and named(limit) else 0
                v4 = ver >= 4
                fid, payload = self._decide_request(code, key, limit, n, at, flags, v4, 0, ver >= 7)
                sock = self._sock
                f: Any = None
                if sock is not None:
                    try:
                        sock.sendall(payload)
                        f = sock.recv(_RECV)
                    except (BlockingIOError, socket.timeout) as e:
                        raise self._timed_out(e) from None
                    except OSError:
                        f = self._pending(sock)
                    except BaseException:
                        self._drop()
                        raise
                    d = self._decided(f, fid, code, payload[4], limit, v4)
                    if d is not None:
                        if brk.fails:
                            brk.fails = 0
                        return d  # type: ignore[no-any-return]
                    if f:
                        f = self._complete(sock, f, 1, [])[0]
                    else:  # a stale connection: _exchange sends again on a new one
                        self._drop()
                        f = None
                if f is None:
                    f = self._exchange(payload, 1)[0]
                d = value(self._results(f, fid, (decide_call(code, limit),))[0])
        except Unavailable as e:
            return self._outage(False, e, decide_call(code, limit))  # type: ignore[no-any-return]
        except SluiceError as e:
            brk.done(False, e)
            raise
        brk.done(False, None)
        return d  # type: ignore[no-any-return]

    def _decide_slow(self, code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int) -> Decision:
        with self._lock:
            ver = self._sidecar_version() if named(limit) else 0
            fid, payload = self._decide_request(code, key, limit, n, at, flags, ver >= 4, 0, ver >= 7)
            f = self._exchange(payload, 1)[0]
            return value(self._results(f, fid, (decide_call(code, limit),))[0])  # type: ignore[no-any-return]

    def _sidecar_version(self) -> int:
        """The protocol version of the sidecar, for a named limit's request: the first such
        request on each connection asks it (HELLO, connecting if need be); 0 if the sidecar is
        older. The lock is held."""
        v = self._known_version(self._sock)
        if v is None:
            fid, hello = self._hello_request()
            f = self._exchange(hello, 1)[0]  # connects, if need be
            try:
                v = self._hello_answered(self._sock, f, fid)
            except SluiceError:
                self._drop()
                raise
        return v

    def _guarded(self, call: Call, f: Callable[[], Any]) -> Any:
        """f() if the breaker lets a call through, its outcome recorded; else the policy's answer."""
        ok, probe = self._breaker.allow()
        if not ok:
            return self._unavailable(breaker_open(self.socket_path), call)
        try:
            v = f()
        except Unavailable as e:
            return self._outage(probe, e, call)
        except BaseException as e:
            self._breaker.done(probe, e)
            raise
        self._breaker.done(probe, None)
        return v

    def _one(self, call: Call) -> Any:
        def one() -> Any:
            with self._lock:
                packed = self._batch((call,), self._sidecar_version() if self._needs_version((call,)) else 0)
                f = self._exchange(packed.payload, 1)[0]
                return value(self._results(f, packed.frames[0][0], (call,))[0])
        return self._guarded(call, one)

    def _run(self, calls: Sequence[Call], raise_on_error: bool) -> List[Any]:
        """Send every call in one write, read every answer: values or exceptions, in order."""
        out: List[Any] = []
        if not calls:
            return out
        ok, probe = self._breaker.allow()
        if not ok:
            return self._refused(calls, raise_on_error)
        with self._lock:
            frames: List[Any] = []
            failure: Optional[Unavailable] = None
            packed = Frames(b"", [])
            try:
                packed = self._batch(calls, self._sidecar_version() if self._needs_version(calls) else 0)
                self._exchange(packed.payload, len(packed.frames), frames)
            except Unavailable as e:
                failure = e
            for (fid, group), f in zip(packed.frames, frames):
                try:
                    rs = self._results(f, fid, group)
                except Unavailable as e:  # a frame-level ShuttingDown or Busy
                    failure = e
                    break
                out.extend(rs)
        self._breaker.done(probe, failure)
        return self._finish(out, calls, failure, raise_on_error)

    def _results(self, f: Any, fid: int, calls: Sequence[Call]) -> List[Any]:
        """The answers of a response frame; on a protocol or frame-level error, the connection closed."""
        try:
            return self._answers(f, fid, calls)
        except SluiceError:
            self._drop()
            raise

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                # Kernel timeouts on a blocking socket: unlike settimeout, no poll()
                # before each call, which costs ~3 us a round trip.
                try:
                    sec = int(self.timeout)
                    tv = struct.pack("@ll", sec, int((self.timeout - sec) * 1e6))
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
                except (OSError, struct.error, AttributeError):
                    s.settimeout(self.timeout)
            s.connect(self._path)
        except OSError as e:
            s.close()
            raise self._cannot_connect(e, isinstance(e, (BlockingIOError, socket.timeout))) from e
        self._sock = s
        return s

    @staticmethod
    def _pending(sock: socket.socket) -> bytes:
        """What the sidecar sent before it closed the connection, after a failed send or
        receive: a refusal (Busy at its connection limit, Denied for a peer it does not
        allow) is written before the close, and it, not "broken pipe", is the error."""
        try:
            return sock.recv(_RECV, socket.MSG_DONTWAIT)
        except OSError:
            return b""

    def _drop(self) -> None:
        s, self._sock = self._sock, None
        if s is not None:
            s.close()

    def _forget(self) -> None:
        """No connection and a new lock: when made, and after fork in the child (the connection
        and the lock are the parent's)."""
        self._lock = threading.Lock()
        self._drop()

    def _timed_out(self, e: BaseException) -> Unavailable:
        self._drop()
        return no_answer(self.socket_path, self.timeout, e)

    def _exchange(self, payload: bytes, nframes: int, out: Optional[List[Any]] = None) -> List[Any]:
        """Send payload, read nframes response frames (appended to out as they complete).

        The lock is held. A reused connection that fails before any byte of
        the answer arrives (the sidecar restarted, or closed it as idle) is
        replaced and the payload sent once more; after that, a failure is
        :class:`Unavailable` (or :class:`ProtocolError`), never a retry.
        """
        if out is None:
            out = []
        for attempt in (0, 1):
            sock = self._sock
            retry = sock is not None and attempt == 0
            if sock is None:
                sock = self._connect()
            if len(payload) > _SENDALL_MAX:
                try:
                    self._pump(sock, payload, nframes, out)
                    return out
                except _Stale as e:
                    self._drop()
                    if retry:
                        continue
                    raise self._lost(e) from e
                except (BlockingIOError, socket.timeout) as e:
                    raise self._timed_out(e) from None
                except OSError as e:
                    self._drop()
                    raise self._lost(e) from e
                except BaseException:
                    self._drop()  # interrupted mid-exchange: the stream is out of step
                    raise
            cause: Optional[OSError] = None
            try:
                sock.sendall(payload)
                data = sock.recv(_RECV)
            except (BlockingIOError, socket.timeout) as e:
                raise self._timed_out(e) from None
            except OSError as e:
                data, cause = self._pending(sock), e
            except BaseException:
                self._drop()
                raise
            if data:
                return self._complete(sock, data, nframes, out)
            self._drop()
            if retry:
                continue
            raise self._lost(cause or _Stale("the sidecar closed the connection"))
        raise AssertionError("unreachable")

    def _complete(self, sock: socket.socket, data: bytes, nframes: int, out: List[Any]) -> List[Any]:
        """Read nframes frames into out, data (not empty) being the first bytes of the answer."""
        try:
            if nframes == 1 and len(data) >= 4 and _U32.unpack_from(data)[0] + 4 == len(data):
                out.append(data)  # the usual case: one whole frame in one read
            else:
                self._read(sock, data, nframes, out)
            return out
        except (BlockingIOError, socket.timeout) as e:
            raise self._timed_out(e) from None
        except OSError as e:
            self._drop()
            raise self._lost(e) from e
        except BaseException:
            self._drop()
            raise

    def _read(self, sock: socket.socket, data: bytes, nframes: int, out: List[Any]) -> None:
        """Read frames until nframes are in out, starting with data already received."""
        reader = FrameReader()
        while True:
            out.extend(reader.feed(data))
            if len(out) >= nframes:
                if len(out) > nframes or reader.buffered:
                    raise ProtocolError("the sidecar sent more than was asked")
                return
            data = sock.recv(max(_RECV, reader.need()))
            if not data:
                self._eof(reader, len(out), nframes)

    def _eof(self, reader: FrameReader, got: int, nframes: int) -> None:
        if reader.buffered:
            raise ProtocolError(f"the sidecar closed the connection in the middle of a frame "
                                f"({reader.buffered} bytes of it received)")
        raise Unavailable(f"the sidecar is unavailable: it closed the connection after {got} of {nframes} answers")

    def _pump(self, sock: socket.socket, payload: bytes, nframes: int, out: List[Any]) -> None:
        """Send a large payload while reading answers, so neither side blocks on a full buffer."""
        view, sent, received = memoryview(payload), 0, 0
        reader = FrameReader()
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLOUT)
        wait_ms = None if self.timeout is None else int(self.timeout * 1000) + 1
        flags = getattr(socket, "MSG_DONTWAIT", 0)
        while len(out) < nframes:
            events = poller.poll(wait_ms)
            if not events:
                raise socket.timeout("timed out")
            ev = events[0][1]
            try:
                if ev & select.POLLOUT and sent < len(view):
                    sent += sock.send(view[sent:sent + (256 << 10)], flags)
                    if sent == len(view):
                        poller.modify(sock, select.POLLIN)
                if not ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    continue
                data = sock.recv(max(_RECV, reader.need()), flags)
            except BlockingIOError:
                continue
            except OSError as e:
                if received == 0:  # nothing answered yet: as stale as a failed first send
                    raise _Stale(e.strerror or str(e)) from e
                raise
            if not data:
                if received == 0:
                    raise _Stale("the sidecar closed the connection")
                self._eof(reader, len(out), nframes)
            received += len(data)
            out.extend(reader.feed(data))
        if len(out) > nframes or reader.buffered:
            raise ProtocolError("the sidecar sent more than was asked")


class Pipeline(PipelineBase):
    """A batch of operations for a sync :class:`Client`, sent in one write by :meth:`execute`.

    Every method queues one operation and returns the pipeline, so calls
    chain::

        results = client.pipeline().acquire("a", lim).acquire("b", lim).execute()

    The operations go out in frames of up to 256, all in one write (large
    batches are sent while the answers are read), and ``execute`` returns
    their answers in order. A pipeline can be executed again; ``clear``
    empties it.
    """

    def execute(self, raise_on_error: bool = True) -> List[Any]:
        """Send the queued operations and return their answers, in order.

        With ``raise_on_error`` (the default) the first failed operation's
        exception is raised after every answer is read; without it, failed
        operations have their exception in their place in the list. The
        on_unavailable policy answers acquires, peeks and multis as for
        single calls; other operations get :class:`Unavailable`.
        """
        return self._client._run(list(self._calls), raise_on_error)  # type: ignore[no-any-return]

