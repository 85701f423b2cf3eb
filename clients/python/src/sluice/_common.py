"""What the sync and asyncio clients share: arguments, requests, replies, policy.

A *call* is one operation on its way: its encoded bytes, its opcode, and
whether the ``on_unavailable`` policy may answer it. Calls are packed into
frames (at most MAX_BATCH operations and MAX_FRAME_LEN bytes each), and
every response frame is checked against the request it answers: same id,
same count, one result per operation with the operation's opcode. Anything
else means the byte stream cannot be trusted: :class:`ProtocolError`, and
the caller closes the connection.
"""

from __future__ import annotations

import datetime
import functools
import logging
import operator
import os
import random
import socket
import struct
import threading
import time
from decimal import Decimal
from fractions import Fraction
from numbers import Real
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import proto
from .errors import (
    InvalidCost, InvalidKey, InvalidLimit, ProtocolError, SluiceError, Status, StatusError, TooManyItems,
    Unavailable, status_error,
)
from .limits import Algorithm, Concurrency, Limit, Named, parse_limit
from .proto import HEADER_LEN, MAX_BATCH, MAX_FRAME_LEN, MAX_KEY_LEN, MAX_MULTI, Flags, Opcode
from .results import (
    DEGRADED_CLOSED, DEGRADED_CLOSED_LEASE, DEGRADED_OPEN, DEGRADED_OPEN_LEASE, Decision, Lease, MultiDecision,
    MultiItem, make_decision,
)

log = logging.getLogger("sluice")

#: The sidecar's default socket, relative to the working directory (as sluiced's).
DEFAULT_SOCKET = "var/sluice.sock"

#: The on_unavailable policies.
POLICIES = ("open", "closed", "raise")

Key = Union[str, bytes]
LimitLike = Union[Limit, str]
#: A request time: an aware (or local naive) datetime, or Unix seconds.
At = Union[datetime.datetime, int, float, Decimal, Fraction, None]

_new = object.__new__
_tuple_new = tuple.__new__
_setattr = object.__setattr__
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MAX_I64 = (1 << 63) - 1
_ACQUIRE = int(Opcode.ACQUIRE)
_SHADOW = int(Flags.SHADOW)
_V3_ALGORITHM = int(Algorithm.SLIDING_LOG)  # from it on, an algorithm needs a frame of version 3

# A whole one-operation item frame, and a whole one-decision response frame.
ITEM_FRAME = struct.Struct("<IBBHIBBBqqqqqH")  # header, opcode, flags, alg, p0..p2, n, at, keylen
DECISION_FRAME = struct.Struct("<IBBHIBBBqqqqq")  # header, opcode, status, decision
ITEM_FRAME_LEN = ITEM_FRAME.size - 4  # the length field of an item frame, without the key
DECISION_FRAME_SIZE = DECISION_FRAME.size  # 55
DECISION_FRAME_LEN = DECISION_FRAME.size - 4
_RESULT_DECISION = struct.Struct("<BBBqqqqq")  # opcode, status, decision
_RESULT_DECISION_SIZE = _RESULT_DECISION.size  # 43


#: The size of sun_path: a socket's path is at most one byte shorter (its terminating NUL).
_MAX_SOCKET_PATH = 108


def socket_path(path: Optional[Union[str, "os.PathLike[str]"]]) -> Tuple[str, str]:
    """The socket to use: ``path``, else $SLUICE_SOCKET, else var/sluice.sock; as (its absolute
    path, for people; what to connect to). A relative path is resolved against the working
    directory once, here: the absolute one is connected to, unless it is too long for a socket
    address where the relative one is not. An abstract socket ("\\0...", "@...") stays as given."""
    if path is None:
        path = os.environ.get("SLUICE_SOCKET") or DEFAULT_SOCKET
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p or p[0] in "\0@":
        return p, p
    abs_path = os.path.abspath(p)
    if len(os.fsencode(abs_path)) >= _MAX_SOCKET_PATH > len(os.fsencode(p)):
        return abs_path, p
    return abs_path, abs_path


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"on_unavailable must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


def key_bytes(key: Key) -> bytes:
    """A key as bytes (a str as UTF-8), 1..MAX_KEY_LEN of them, else :class:`InvalidKey`."""
    if type(key) is str:
        k = key.encode()
    elif isinstance(key, (bytes, bytearray, memoryview)):
        k = bytes(key)
    elif isinstance(key, str):
        k = key.encode()
    else:
        raise InvalidKey(f"a key is str or bytes, got {type(key).__name__}")
    if not 0 < len(k) <= MAX_KEY_LEN:
        raise InvalidKey(f"key of {len(k)} bytes, want 1..{MAX_KEY_LEN}")
    return k


def prefix_bytes(prefix: Key) -> bytes:
    p = prefix.encode() if isinstance(prefix, str) else bytes(prefix)
    if len(p) > MAX_KEY_LEN:
        raise InvalidKey(f"scan prefix of {len(p)} bytes, want 0..{MAX_KEY_LEN}")
    return p


@functools.lru_cache(maxsize=512)
def _parsed(spec: str) -> Limit:
    return parse_limit(spec)


def limit_of(limit: LimitLike) -> Limit:
    """A Limit, or a spec parsed (and cached)."""
    if isinstance(limit, Limit):
        return limit
    if isinstance(limit, str):
        return _parsed(limit)
    raise TypeError(f"a limit is a Limit or a spec string, got {type(limit).__name__}")


def at_ns(at: At) -> int:
    """A request time as Unix nanoseconds.

    A datetime converts exactly (a naive one is local time, as
    ``datetime.timestamp`` reads it); a number is Unix seconds.
    """
    if isinstance(at, datetime.datetime):
        if at.tzinfo is None:
            at = at.astimezone()
        delta = at - _EPOCH
        return ((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1000  # within int64
    if isinstance(at, bool) or not isinstance(at, (Real, Decimal)):
        raise TypeError(f"at is a datetime or Unix seconds, got {at!r}")
    ns = at * 1_000_000_000 if isinstance(at, int) else round(Fraction(at) * 1_000_000_000)
    if not -(1 << 63) <= ns <= _MAX_I64:
        raise ValueError(f"at {at!r} is outside int64 Unix nanoseconds")
    return ns


def cost_of(n: Any, what: str = "cost") -> int:
    """An int64 cost or amount (the sidecar rejects negative ones)."""
    if type(n) is int and -(1 << 63) <= n <= _MAX_I64:
        return n
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidCost(f"{what} is an int, got {n!r}")
    raise InvalidCost(f"{what} {n} outside int64")


def decide_frame(fid: int, code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int,
                 deadline: int = 0) -> bytes:
    """The whole request frame of one ACQUIRE or PEEK: the hot path, packed in one go.

    The frame is in the oldest version that holds it (proto.item_version, inlined), so a sidecar
    of an older version answers it too; its answer comes in the same version (byte 4). A named
    limit's request carries ``deadline`` (Unix ns, DEADLINE, version 4) if it is not 0 and
    ``at`` is None.
    """
    k = key.encode() if type(key) is str else key_bytes(key)
    if not 0 < len(k) <= MAX_KEY_LEN:
        key_bytes(k)  # raises InvalidKey
    lim = limit if isinstance(limit, Limit) else limit_of(limit)
    if type(n) is not int or not -(1 << 63) <= n <= _MAX_I64:
        n = cost_of(n)
    f = int(flags)  # request_flags: STRICT, SHADOW (a bool is STRICT)
    if lim.shadow and code == _ACQUIRE:  # the spec's shadow=true: a shadow request
        f |= _SHADOW
    if type(lim) is Named:
        t = 0
        if at is not None:
            f, t = f | 4, at_ns(at)
        elif deadline:
            f, t = f | _DEADLINE, deadline
        return proto.frame(proto.Kind.REQUEST, fid, 1, proto.encode_item(code, f, lim, n, t, k),
                           proto.item_version(code, f, lim))
    a, p0, p1, p2 = lim._wire
    v = 3 if a >= _V3_ALGORITHM else 2 if f & _SHADOW else 1  # proto.item_version, inlined
    if at is None:
        return ITEM_FRAME.pack(ITEM_FRAME_LEN + len(k), v, 1, 1, fid, code, f,
                               a, p0, p1, p2, n, 0, len(k)) + k
    return ITEM_FRAME.pack(ITEM_FRAME_LEN + len(k), v, 1, 1, fid, code, f | 4,
                           a, p0, p1, p2, n, at_ns(at), len(k)) + k


_DEADLINE = 32  # proto.Flags.DEADLINE


def named(limit: LimitLike) -> bool:
    """Whether limit is the name of a limit of the sidecar's config (the kind a global limit is)."""
    return type(limit if isinstance(limit, Limit) else limit_of(limit)) is Named


def deadline_ns(timeout: float) -> int:
    """The deadline of a call that waits ``timeout`` seconds from now, Unix ns (the sidecar's clock too)."""
    return time.time_ns() + int(timeout * 1e9)


def request_flags(strict: bool, shadow: bool) -> int:
    """An acquire's flags: STRICT (1) and SHADOW (16, protocol version 2)."""
    return (1 if strict else 0) | (16 if shadow else 0)


class Call(NamedTuple):
    """One operation on its way: its bytes, its opcode, whether it decides, and the oldest
    protocol version whose frames may carry it (proto.op_version)."""

    body: bytes
    code: int
    decides: bool  #: acquire, peek, multi and lease: the on_unavailable policy may answer it
    n: int = 0  #: MULTI: its items
    version: int = 1  #: the frame holding it is in the highest version of its calls


def hello_frame(fid: int) -> bytes:
    """A HELLO request frame, in version 1: every sidecar answers it."""
    return proto.frame(proto.Kind.REQUEST, fid, 1, bytes((Opcode.HELLO,)), 1)


def hello_version(f: proto.Buffer, fid: int) -> int:
    """The protocol version a sidecar's answer to hello_frame(fid) says it speaks; raises
    ProtocolError if the frame is not that answer, or the error result the sidecar sent."""
    try:
        h, parts = proto.decode_frame(f)
    except SluiceError as e:
        raise ProtocolError(f"malformed reply from the sidecar: {e}") from e
    if h.kind != proto.Kind.RESPONSE or h.id != fid or len(parts) != 1 or not isinstance(parts[0], proto.Result) \
            or parts[0].code != Opcode.HELLO:
        raise ProtocolError("the sidecar's answer to a HELLO is out of step")
    r = parts[0]
    if r.status != Status.OK:
        raise r.error()
    return r.value.version  # type: ignore[no-any-return,union-attr]


def item_call(code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int) -> Call:
    """An ACQUIRE, PEEK, REFUND or RESET (checked as decide_frame checks)."""
    k = key.encode() if type(key) is str else key_bytes(key)
    if not 0 < len(k) <= MAX_KEY_LEN:
        key_bytes(k)  # raises InvalidKey
    lim = limit if isinstance(limit, Limit) else limit_of(limit)
    if type(n) is not int or not -(1 << 63) <= n <= _MAX_I64:
        n = cost_of(n)
    flags = int(flags)  # request_flags: STRICT, SHADOW (a bool is STRICT)
    if lim.shadow and code == _ACQUIRE:  # the spec's shadow=true: a shadow request
        flags |= _SHADOW
    t = 0
    if at is not None:
        flags |= 4
        t = at_ns(at)
    if type(lim) is Named:
        return _tuple_new(Call, (proto.encode_item(code, flags, lim, n, t, k), code, code <= 4, 0,
                                 proto.item_version(code, flags, lim)))
    a, p0, p1, p2 = lim._wire
    v = 3 if a >= _V3_ALGORITHM else 2 if flags & _SHADOW else 1  # proto.item_version, inlined
    return _tuple_new(Call, (proto.ITEM.pack(code, flags, a, p0, p1, p2, n, t, len(k)) + k, code, code <= 4, 0, v))


def _leasable(limit: LimitLike) -> Limit:
    """The limit, if it can be leased: a Concurrency limit, or a named one (the sidecar checks
    that its config defines a concurrency limit under the name)."""
    lim = limit_of(limit)
    if not isinstance(lim, (Concurrency, Named)):
        raise InvalidLimit(f"only a concurrency limit can be leased, not {lim}")
    return lim


def lease_call(key: Key, limit: LimitLike) -> Call:
    """A LEASE (protocol version 3): the on_unavailable policy may answer it, as an acquire."""
    lim = _leasable(limit)
    return Call(proto.encode_lease(lim, key_bytes(key)), Opcode.LEASE, True, 0,
                proto.item_version(Opcode.LEASE, 0, lim))


def lease_id(lease: Union[int, Lease]) -> int:
    """The id of a lease, given as a Lease or its id: 0..2**64-1 (0: a lease that holds nothing)."""
    v = lease.id if isinstance(lease, Lease) else lease
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"a lease is a Lease or its int id, got {lease!r}")
    if not 0 <= v < 1 << 64:
        raise ValueError(f"a lease id is 1..2**64-1, got {v}")
    return int(v)


def release_call(key: Key, limit: LimitLike, lease: int) -> Call:
    """A RELEASE (protocol version 3) of lease ``lease`` (not 0)."""
    lim = _leasable(limit)
    return Call(proto.encode_release(lim, lease, key_bytes(key)), Opcode.RELEASE, False, 0,
                proto.item_version(Opcode.RELEASE, 0, lim))


def multi_call(items: Iterable[Union[MultiItem, Sequence[Any]]], at: At) -> Call:
    wire = []
    for it in items:
        m = it if isinstance(it, MultiItem) else MultiItem(*it)
        wire.append(proto.WireMultiItem(Flags.STRICT if m.strict else 0, limit_of(m.limit),
                                        cost_of(m.cost), key_bytes(m.key)))
    if not 0 < len(wire) <= MAX_MULTI:
        raise TooManyItems(f"a multi has 1..{MAX_MULTI} items, got {len(wire)}")
    body = proto.encode_multi(0 if at is None else Flags.AT, 0 if at is None else at_ns(at), wire)
    return Call(body, Opcode.MULTI, True, len(wire), proto.multi_version(wire))


def scan_call(prefix: Key, cursor: int, count: int) -> Call:
    if not 0 < count <= proto.MAX_SCAN_COUNT:
        raise ValueError(f"scan count must be 1..{proto.MAX_SCAN_COUNT}, got {count}")
    # In a frame of version 1 or 2 a SCAN would leave out the buckets of version 3's algorithms.
    return Call(proto.encode_scan(cursor, count, prefix_bytes(prefix)), Opcode.SCAN, False, 0, proto.SCAN_VERSION)


def simple_call(code: int) -> Call:
    """A HELLO, PING or STATS: in version 1, which has them all."""
    return Call(bytes((code,)), code, False)


_version = operator.itemgetter(Call._fields.index("version"))  # the fastest way to take it from many calls


class Frames(NamedTuple):
    """Calls packed into request frames: the bytes to send, and each frame's id and calls."""

    payload: bytes
    frames: List[Tuple[int, Sequence[Call]]]


def pack(calls: Sequence[Call], next_id: int) -> Frames:
    """Pack calls into frames of at most MAX_BATCH operations and MAX_FRAME_LEN bytes.

    Frame ids count up from ``next_id`` (mod 2**32). Each frame is in the highest version of
    its calls, the oldest that holds them all.
    """
    if len(calls) <= MAX_BATCH:
        body = b"".join([c.body for c in calls])
        if len(body) <= MAX_FRAME_LEN - 8:  # the usual case: one frame
            return Frames(proto.frame(proto.Kind.REQUEST, next_id, len(calls), body, max(map(_version, calls))),
                          [(next_id, calls)])
    frames: List[Tuple[int, Sequence[Call]]] = []
    parts: List[bytes] = []
    start, size = 0, 0
    for i, c in enumerate(calls):
        if i > start and (i - start == MAX_BATCH or size + len(c.body) > MAX_FRAME_LEN - 8):
            frames.append((next_id, calls[start:i]))
            next_id = (next_id + 1) & 0xFFFFFFFF
            start, size = i, 0
        size += len(c.body)
    if start < len(calls):
        frames.append((next_id, calls[start:]))
    for fid, group in frames:
        parts.append(proto.frame(proto.Kind.REQUEST, fid, len(group), b"".join([c.body for c in group]),
                                 max(map(_version, group))))
    return Frames(b"".join(parts), frames)


def frame_error(frame: proto.Buffer) -> Optional[SluiceError]:
    """The error of a frame-level error response (opcode 0, count 1), else None.

    It fails every outstanding request, and the server closes the connection.
    """
    if len(frame) > HEADER_LEN + 1 and frame[HEADER_LEN] == 0 and frame[HEADER_LEN + 1] != 0 \
            and frame[6] == 1 and frame[7] == 0:
        try:
            r, _ = proto.decode_result(frame, HEADER_LEN)
        except SluiceError as e:
            return ProtocolError(f"malformed frame-level error from the sidecar: {e}")
        return status_error(r.status, r.message)
    return None


def results(frame: proto.Buffer, fid: int, calls: Sequence[Call]) -> List[Any]:
    """Decode the response frame answering ``calls`` (sent as frame ``fid``).

    Returns one entry per call, in order: its value, or for an error result
    the exception of its status (not raised). Raises the frame-level error
    if the frame is one, and :class:`ProtocolError` if it is not exactly one
    well-formed result per call with the call's opcode.
    """
    err = frame_error(frame)
    if err is not None:
        raise err
    try:
        h = proto.parse_header(frame)
    except SluiceError as e:
        raise ProtocolError(f"bad frame header from the sidecar: {e}") from e
    if h.kind != proto.Kind.RESPONSE:
        raise ProtocolError("the sidecar sent a request frame")
    if h.id != fid or h.count != len(calls):
        raise ProtocolError(f"response frame id {h.id} with {h.count} results, "
                            f"want id {fid} with {len(calls)}: the stream is out of step")
    end = 4 + h.length
    if end != len(frame):
        raise ProtocolError(f"response frame of {len(frame)} bytes, its header says {end}")
    out: List[Any] = []
    off = HEADER_LEN
    unpack = _RESULT_DECISION.unpack_from
    try:
        for c in calls:
            code = c.code
            if end - off >= _RESULT_DECISION_SIZE and frame[off] == code and frame[off + 1] == 0 \
                    and 3 <= code <= 5:
                # the common case, a decision: unpacked in one go
                _, _, allowed, rem, lim, ra, rs, dl = unpack(frame, off)
                if allowed > 1:  # shadow-denied (version 2), the outage policy (version 4)
                    ok, shadow, outage = proto.parse_decision_byte(allowed, code)
                    d = make_decision(ok, rem, lim, ra, rs, dl, shadow_denied=shadow, outage=outage)
                    out.append(d)
                    off += _RESULT_DECISION_SIZE
                    continue
                d = _new(Decision)  # make_decision, inlined: this loop runs per result
                _setattr(d, "__dict__", {"allowed": allowed != 0, "remaining": rem, "limit": lim,
                                         "retry_after_ns": ra, "reset_after_ns": rs, "delay_ns": dl,
                                         "degraded": False, "shadow_denied": False, "outage": None})
                out.append(d)
                off += _RESULT_DECISION_SIZE
                continue
            r, off = proto.decode_result(frame, off, end)
            if r.status != Status.OK:
                out.append(r.error())
            elif r.code != code:
                raise ProtocolError(f"a {Opcode(code).name} answered by a result of opcode {r.code}")
            else:
                out.append(r.value)
    except ProtocolError:
        raise
    except SluiceError as e:
        raise ProtocolError(f"malformed reply from the sidecar: {e}") from e
    if off != end:
        raise ProtocolError(f"malformed reply from the sidecar: {end - off} bytes after the last result")
    return out


def value(v: Any) -> Any:
    """v, or raised if it is an exception (an error result)."""
    if isinstance(v, SluiceError):
        raise v
    return v


def fast_decision(f: proto.Buffer, fid: int, code: int, version: int) -> Any:
    """The Decision of a one-result response frame in its common shape, or None.

    ``version`` is the request's: the sidecar answers in it. Anything
    unusual (an error result, another id, bad bytes) returns None for the
    general path to decode and report.
    """
    if len(f) != DECISION_FRAME_SIZE:
        return None
    length, ver, kind, count, rid, rcode, status, allowed, rem, lim, ra, rs, dl = DECISION_FRAME.unpack_from(f)
    if rid != fid or rcode != code or status or allowed > 1 or count != 1 or length != DECISION_FRAME_LEN \
            or ver != version or kind != 2:
        return None
    return make_decision(allowed == 1, rem, lim, ra, rs, dl)


def degraded(policy: str, call: Call, exc: Unavailable) -> Any:
    """The answer of the on_unavailable policy to a call the sidecar could not answer."""
    if policy == "raise" or not call.decides:
        raise exc
    if call.code == Opcode.LEASE:  # a lease granted by policy holds nothing to release
        return DEGRADED_OPEN_LEASE if policy == "open" else DEGRADED_CLOSED_LEASE
    d = DEGRADED_OPEN if policy == "open" else DEGRADED_CLOSED
    if call.code == Opcode.MULTI:
        return MultiDecision(d.allowed, (d,) * call.n, degraded=True)
    return d


class FrameReader:
    """Splits the bytes of a connection into whole response frames.

    Headers are checked as they arrive (before a body is waited for, so a
    huge length is refused at once); a bad one raises :class:`ProtocolError`.
    Frames are ``bytes`` or ``bytearray``, valid for good.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buf)

    def need(self) -> int:
        """How many more bytes complete the frame being read (at least 1)."""
        buf = self._buf
        if len(buf) < HEADER_LEN:
            return HEADER_LEN - len(buf)
        return 4 + int(proto.HEADER.unpack_from(buf)[0]) - len(buf)

    def feed(self, data: proto.Buffer) -> List[proto.Buffer]:
        """Add bytes; return the frames they complete, in order."""
        if self._buf:
            self._buf += data
            buf: proto.Buffer = self._buf
        else:
            buf = data
        frames = []
        pos, n = 0, len(buf)
        while n - pos >= HEADER_LEN:
            length, ver, kind, count, _ = proto.HEADER.unpack_from(buf, pos)
            if not proto.MIN_VERSION <= ver <= proto.VERSION or kind != 2 or not 8 <= length <= MAX_FRAME_LEN \
                    or not 0 < count <= MAX_BATCH:
                try:
                    proto.parse_header(buf, pos)
                except SluiceError as e:
                    raise ProtocolError(f"bad frame header from the sidecar: {e}") from e
                raise ProtocolError("the sidecar sent a request frame")
            end = pos + 4 + length
            if end > n:
                break
            frames.append(buf[pos:end])
            pos = end
        if buf is self._buf:
            del self._buf[:pos]
        elif pos < n:
            self._buf = bytearray(buf[pos:])
        return frames


def finish(out: List[Any], calls: Sequence[Any], failure: Optional[Exception],
           unavailable: Callable[[Any, Any], Any], raise_on_error: bool) -> List[Any]:
    """Complete a batch's results: the calls a failure left unanswered get
    what the failure policy says (``unavailable(failure, call)``, or the
    Unavailable it raises), then the first error is raised if asked."""
    if failure is not None:
        for call in calls[len(out):]:
            try:
                out.append(unavailable(failure, call))
            except Unavailable as e:
                out.append(e)
    if raise_on_error:
        for v in out:
            if isinstance(v, SluiceError):
                raise v
    return out


#: The default seconds a call waits to connect and for its answer. The
#: sidecar is on the same host: a round trip takes tens of microseconds,
#: and the slowest answers of a host loaded to saturation stay within a few
#: milliseconds (README, "Failure policy"), so an answer that has not come
#: after 50 ms is not coming soon.
DEFAULT_TIMEOUT = 0.05

#: The default on_unavailable policy, the same as the Go client's.
DEFAULT_POLICY = "open"

#: The circuit breaker's defaults: consecutive calls without an answer in
#: time that open it, and its first and longest open periods, seconds.
BREAKER_THRESHOLD = 3
BREAKER_MIN_OPEN = 0.25
BREAKER_MAX_OPEN = 10.0

#: The least seconds between two log lines about decisions the
#: on_unavailable policy made.
DEGRADED_LOG_INTERVAL = 10.0

CLOSED, OPEN, PROBING = 0, 1, 2


class Breaker:
    """Stops a client from asking a sidecar that does not answer.

    After ``threshold`` consecutive calls without an answer in time
    (:class:`Unavailable` with ``timed_out`` set), it opens: calls fail at
    once, and the on_unavailable policy answers them, for an open period
    that doubles after each failed probe from ``min_open`` up to
    ``max_open`` seconds, each drawn at random from its upper half (so that
    the processes of a host do not probe in step). Then one call, the
    probe, goes to the sidecar: an answer closes the breaker, no answer in
    time opens it again. Fast failures (no socket, a refused or broken
    connection) count neither way: they cost nothing to find out.

    Each opening and closing is logged once. Thread-safe: its state changes
    under a lock; a closed breaker costs a call one attribute read.
    """

    __slots__ = ("threshold", "min_open", "max_open", "path", "state", "fails", "open_until", "opens", "_lock")

    def __init__(self, path: str, threshold: int = BREAKER_THRESHOLD, min_open: float = BREAKER_MIN_OPEN,
                 max_open: float = BREAKER_MAX_OPEN) -> None:
        self.threshold = threshold if threshold > 0 else 1 << 62
        self.min_open = max(min_open, 0.001)
        self.max_open = max(max_open, self.min_open)
        self.path = path
        self.state = CLOSED
        self.fails = 0
        self.open_until = 0.0
        self.opens = 0
        self._lock = threading.Lock()

    def allow(self) -> Tuple[bool, bool]:
        """Whether a call may go to the sidecar, and whether it is the probe."""
        if self.state == CLOSED:
            return True, False
        with self._lock:
            if self.state != OPEN or time.monotonic() < self.open_until:
                return False, False
            self.state = PROBING
            return True, True

    def done(self, probe: bool, exc: Optional[BaseException]) -> None:
        """Record the outcome of a call ``allow`` let through: None if the sidecar answered.

        A probe that gets an answer closes the breaker; the client logs that the sidecar
        answers again (Availability), once."""
        timed_out = isinstance(exc, Unavailable) and exc.timed_out
        if probe:
            with self._lock:
                if exc is None or isinstance(exc, SluiceError) and not isinstance(exc, Unavailable):
                    self.fails, self.opens, self.state = 0, 0, CLOSED
                elif timed_out:
                    self._open()
                else:
                    self.open_until, self.state = 0.0, OPEN  # the next call probes instead
            return
        if exc is None or isinstance(exc, SluiceError) and not isinstance(exc, Unavailable):
            if self.fails:
                self.fails = 0
        elif timed_out:
            with self._lock:
                self.fails += 1
                if self.fails >= self.threshold and self.state == CLOSED:
                    self.opens = 0
                    d = self._open()
                    log.warning("the Sluice sidecar at %s is not answering (%d calls timed out), so calls fail "
                                "at once and on_unavailable decides until a probe gets an answer; "
                                "the first probe in %.0f ms", self.path, self.fails, d * 1000)

    def _open(self) -> float:
        d = min(self.min_open * (2 ** min(self.opens, 60)), self.max_open)
        d = d / 2 + random.random() * d / 2
        self.opens += 1
        self.open_until = time.monotonic() + d
        self.state = OPEN
        return d

    def retry_in(self) -> float:
        """Seconds until the next probe; 0 when closed."""
        if self.state == CLOSED:
            return 0.0
        return max(0.0, self.open_until - time.monotonic())


#: The error of a call the open breaker did not let through.
def breaker_open(path: str) -> Unavailable:
    return Unavailable(f"the sidecar at {path} did not answer the last calls, so the client is not asking it for now")


class Availability:
    """How one client sees the sidecar.

    The ``on_unavailable`` policy decides only for a sidecar that has answered this client
    before (an outage of a sidecar that was there): until the first answer (a client made with
    ``lazy=True``), every call raises :class:`Unavailable`, whatever the policy, since a
    sidecar that has never answered is as likely a wrong path as one still starting. Each
    change between answering and unavailable is logged once: the first unavailable call after
    an answer (WARNING), the first answer after that (INFO); a connection that is accepted but
    not answered (a stopped sidecar) is not an answer. It counts and logs (at most every
    DEGRADED_LOG_INTERVAL seconds) the calls its failure policy answered, and holds the
    circuit breaker.
    """

    socket_path: str
    on_unavailable: str
    _breaker: Breaker
    #: The sidecar's last answer is newer than its last failure, and there was one: the hot
    #: path's one check (``if not self._up``) before it calls _answered.
    _up = False
    _answered_once = False  # the sidecar has answered this client at least once
    _down = False  # the last call found it unavailable (after an answer), and said so
    #: Decisions the on_unavailable policy made ("open" or "closed") since the client was created.
    degraded_decisions = 0
    _degraded_logged = 0  # degraded_decisions at the last log line
    _degraded_log_at = -DEGRADED_LOG_INTERVAL  # time.monotonic() of the last log line

    def healthy(self) -> bool:
        """Whether the client asks the sidecar: False while its circuit breaker is open."""
        return self._breaker.state == CLOSED

    def _unavailable(self, e: Unavailable, call: Any) -> Any:
        """The on_unavailable policy's answer to a call the sidecar could not be asked about,
        or e raised: for a call the policy does not decide, and before the first answer."""
        if not self._answered_once:
            raise never_answered(e) if call.decides else e
        self._up = False
        if not self._down:
            self._down = True
            log.warning("the Sluice sidecar at %s is unavailable (%s); on_unavailable=%s decides until it answers",
                        self.socket_path, e, self.on_unavailable)
        return self._by_policy(e, call)

    def _by_policy(self, e: SluiceError, call: Any) -> Any:
        """The on_unavailable policy's answer to a call the sidecar could not decide (e raised
        for "raise", and for a call that decides nothing), counted and logged."""
        d = degraded(self.on_unavailable, call, e)
        self.degraded_decisions += 1
        now = time.monotonic()
        if now - self._degraded_log_at >= DEGRADED_LOG_INTERVAL:
            self._degraded_log_at = now
            n, self._degraded_logged = self.degraded_decisions - self._degraded_logged, self.degraded_decisions
            log.warning("%d decisions made by on_unavailable=%s, not by the Sluice sidecar at %s (%d in all): %s",
                        n, self.on_unavailable, self.socket_path, self.degraded_decisions, e)
        return d

    def _answered(self) -> None:
        """The sidecar answered a call (a result, even an error result)."""
        self._answered_once = True
        self._up = True
        if self._down:
            self._down = False
            log.info("the Sluice sidecar at %s answers again", self.socket_path)

    def _cannot_connect(self, e: BaseException, timed_out: bool) -> Unavailable:
        return cannot_connect(self.socket_path, e, timed_out)


def cannot_connect(where: str, e: BaseException, timed_out: bool) -> Unavailable:
    """The error of a failed connect to the socket at ``where``: "nothing listens at" it if the
    socket file is missing or nobody listens on it."""
    if timed_out:
        err = Unavailable(f"the sidecar is unavailable: cannot connect to {where}: timed out")
    elif isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        err = Unavailable(f"the sidecar is unavailable: nothing listens at {where}: {e.strerror or e}")
    else:
        err = Unavailable(f"the sidecar is unavailable: cannot connect to {where}: "
                          f"{getattr(e, 'strerror', None) or e}")
    err.timed_out = timed_out
    return err


def never_answered(e: Unavailable) -> Unavailable:
    """The error of a call to a sidecar that has never answered the client (see Availability)."""
    cls = type(e) if isinstance(e, StatusError) else Unavailable
    err = cls(f"{e} (it has never answered this client, so on_unavailable does not apply)")
    err.timed_out = e.timed_out
    err.__cause__ = e
    return err


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
            err = Unavailable(f"the sidecar is unavailable: no answer from {where} within {wait}s")
            err.timed_out = True
            raise err from e
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
