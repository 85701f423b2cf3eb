"""Operations as calls: their arguments checked, and the request frames that carry them.

A *call* is one operation on its way: its encoded bytes, its opcode, whether the
``on_unavailable`` policy may answer it, the oldest protocol version whose frames may carry it
(:func:`proto.item_version <sluice.proto.item_version>`), and the name of its limit. Calls are
packed into frames of at most MAX_BATCH operations and MAX_FRAME_LEN bytes, each in the highest
version of its calls. An acquire or peek on its own, the hot path, skips the call and is packed
into its whole frame in one go (:func:`decide_frame`). A pipeline is a list of calls.

No I/O: :mod:`sluice._protocol_core` numbers the frames, and the clients send them.
"""

from __future__ import annotations

import datetime
import functools
import operator
import struct
import time
from decimal import Decimal
from fractions import Fraction
from numbers import Real
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

from . import proto
from .errors import InvalidCost, InvalidKey, InvalidLimit, TooManyItems
from .limits import Algorithm, Concurrency, Limit, Named, parse_limit
from .proto import MAX_BATCH, MAX_FRAME_LEN, MAX_KEY_LEN, MAX_MULTI, Flags, Opcode
from .results import Lease, MultiItem

__all__ = ["PipelineBase"]

Key = Union[str, bytes]
LimitLike = Union[Limit, str]
#: A request time: an aware (or local naive) datetime, or Unix seconds.
At = Union[datetime.datetime, int, float, Decimal, Fraction, None]

_tuple_new = tuple.__new__
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MAX_I64 = (1 << 63) - 1
_ACQUIRE = int(Opcode.ACQUIRE)
_SHADOW = int(Flags.SHADOW)
_V3_ALGORITHM = int(Algorithm.SLIDING_LOG)  # from it on, an algorithm needs a frame of version 3
_QUOTA = int(Algorithm.QUOTA)  # a limit field with a time zone: version 5, proto's encoder

# A whole one-operation item frame, and a whole one-decision response frame.
ITEM_FRAME = struct.Struct("<IBBHIBBBqqqqqH")  # header, opcode, flags, alg, p0..p2, n, at, keylen
ITEM_FRAME_LEN = ITEM_FRAME.size - 4  # the length field of an item frame, without the key


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


def checked(code: int, key: Key, limit: LimitLike, n: Any, flags: int) -> Tuple[bytes, Limit, int, int]:
    """The key's bytes, the limit, the cost and the flags of an ACQUIRE, PEEK, REFUND or RESET,
    checked: InvalidKey, InvalidLimit and InvalidCost raise here, before any I/O. The flags are
    request_flags' (STRICT, SHADOW; a bool is STRICT), SHADOW added to an acquire of a spec that
    says shadow=true."""
    k = key.encode() if type(key) is str else key_bytes(key)
    if not 0 < len(k) <= MAX_KEY_LEN:
        key_bytes(k)  # raises InvalidKey
    lim = limit if isinstance(limit, Limit) else limit_of(limit)
    if type(n) is not int or not -(1 << 63) <= n <= _MAX_I64:
        n = cost_of(n)
    f = int(flags)
    if lim.shadow and code == _ACQUIRE:
        f |= _SHADOW
    return k, lim, n, f


def decide_frame(fid: int, code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int,
                 deadline: int = 0, v4: bool = False, v7: bool = False) -> bytes:
    """The whole request frame of one ACQUIRE or PEEK: the hot path, packed in one go.

    The frame is in the oldest version that holds it (proto.item_version, inlined), so a sidecar
    of an older version answers it too; its answer comes in the same version (byte 4). A named
    limit's request carries ``deadline`` (Unix ns, DEADLINE, version 4) if it is not 0 and
    ``at`` is None, and goes in version 4 with ``v4`` (its answer then says whether the limit
    fails closed), and in version 7 with ALL with ``v7`` (the answer of a list then says each
    limit's decision).
    """
    k, lim, n, f = checked(code, key, limit, n, flags)
    a, p0, p1, p2 = lim._wire
    if type(lim) is Named or a == _QUOTA:
        t = 0
        if at is not None:
            f, t = f | 4, at_ns(at)
        elif deadline and a == 0:
            f, t = f | _DEADLINE, deadline
        if v7 and a == 0:
            f |= _ALL
        v = proto.item_version(code, f, lim)
        return proto.frame(proto.Kind.REQUEST, fid, 1, proto.encode_item(code, f, lim, n, t, k), max(v, 4) if v4 else v)
    v = 3 if a >= _V3_ALGORITHM else 2 if f & _SHADOW else 1  # proto.item_version, inlined
    if at is None:
        return ITEM_FRAME.pack(ITEM_FRAME_LEN + len(k), v, 1, 1, fid, code, f,
                               a, p0, p1, p2, n, 0, len(k)) + k
    return ITEM_FRAME.pack(ITEM_FRAME_LEN + len(k), v, 1, 1, fid, code, f | 4,
                           a, p0, p1, p2, n, at_ns(at), len(k)) + k


_DEADLINE = 32  # proto.Flags.DEADLINE
_ALL = 64  # proto.Flags.ALL
_DECIDED = (int(Opcode.ACQUIRE), int(Opcode.PEEK), int(Opcode.REFUND))  # the operations ALL applies to


def named(limit: LimitLike) -> bool:
    """Whether limit is the name of a limit of the sidecar's config (the kind a global limit is)."""
    return type(limit if isinstance(limit, Limit) else limit_of(limit)) is Named


def name_of(limit: LimitLike) -> Optional[str]:
    """The name of a named limit, None for a spec's."""
    lim = limit if isinstance(limit, Limit) else limit_of(limit)
    return lim.name if type(lim) is Named else None  # type: ignore[attr-defined,no-any-return]


def deadline_ns(timeout: float) -> int:
    """The deadline of a call that waits ``timeout`` seconds from now, Unix ns (the sidecar's clock too)."""
    return time.time_ns() + int(timeout * 1e9)


def request_flags(strict: bool, shadow: bool) -> int:
    """An acquire's flags: STRICT (1) and SHADOW (16, protocol version 2)."""
    return (1 if strict else 0) | (16 if shadow else 0)


class Call(NamedTuple):
    """One operation on its way: its bytes, its opcode, whether it decides, the oldest
    protocol version whose frames may carry it (proto.op_version), and the name of its limit."""

    body: bytes
    code: int
    decides: bool  #: acquire, peek, multi and lease: the on_unavailable policy may answer it
    n: int = 0  #: MULTI: its items
    version: int = 1  #: the frame holding it is in the highest version of its calls
    #: an operation on a named limit: the name; a MULTI with named items: its first item's
    name: Optional[str] = None
    names: Tuple[Optional[str], ...] = ()  #: a MULTI with named items: each item's name, or None


_name = operator.itemgetter(5)  # Call.name


def any_named(calls: Sequence[Call]) -> bool:
    """Whether a call is on a named limit."""
    return any(map(_name, calls))


_LEASE_OPS = (int(Opcode.LEASE), int(Opcode.RELEASE))


def named_versions(calls: Sequence[Call], version: int) -> List[Call]:
    """calls, for a sidecar of protocol ``version`` (4 or later): those on named limits in
    version 4 at least (their answers then say whether the limit fails closed), their LEASE and
    RELEASE in version 5 if the sidecar speaks it (their answers then say which outage policy
    made them), and their ACQUIRE, PEEK and REFUND in version 7 with ALL if the sidecar speaks
    it (the answer of a list then says each limit's decision); and their MULTI in version 7 if
    the sidecar speaks it (its answer then marks each item's decision as an ACQUIRE's)."""
    lease_v = 5 if version >= 5 else 4
    out = []
    for cl in calls:
        if cl.code == Opcode.MULTI:  # version 7: its decisions carry the marks
            if cl.name is not None and version >= proto.LIST_VERSION:
                cl = cl._replace(version=max(cl.version, proto.LIST_VERSION))
        elif cl.name is not None:
            want = lease_v if cl.code in _LEASE_OPS else 4
            if version >= proto.LIST_VERSION and cl.code in _DECIDED:
                want = proto.LIST_VERSION
                b = cl.body  # an item: the opcode, then the flags
                cl = cl._replace(body=b[:1] + bytes((b[1] | _ALL,)) + b[2:])
            if cl.version < want:
                cl = cl._replace(version=want)
        out.append(cl)
    return out


def hello_frame(fid: int) -> bytes:
    """A HELLO request frame, in version 1: every sidecar answers it."""
    return proto.frame(proto.Kind.REQUEST, fid, 1, bytes((Opcode.HELLO,)), 1)


def item_call(code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int) -> Call:
    """An ACQUIRE, PEEK, REFUND or RESET (checked as decide_frame checks)."""
    k, lim, n, flags = checked(code, key, limit, n, flags)
    t = 0
    if at is not None:
        flags |= 4
        t = at_ns(at)
    if type(lim) is Named:
        return _tuple_new(Call, (proto.encode_item(code, flags, lim, n, t, k), code, code <= 4, 0,
                                 proto.item_version(code, flags, lim), lim.name, ()))  # type: ignore[attr-defined]
    a, p0, p1, p2 = lim._wire
    if a == _QUOTA:
        return _tuple_new(Call, (proto.encode_item(code, flags, lim, n, t, k), code, code <= 4, 0, 5, None, ()))
    v = 3 if a >= _V3_ALGORITHM else 2 if flags & _SHADOW else 1  # proto.item_version, inlined
    return _tuple_new(Call, (proto.ITEM.pack(code, flags, a, p0, p1, p2, n, t, len(k)) + k, code, code <= 4, 0, v,
                             None, ()))


def leasable(limit: LimitLike) -> Limit:
    """The limit, if it can be leased: a Concurrency limit, or a named one (the sidecar checks
    that its config defines a concurrency limit under the name)."""
    lim = limit_of(limit)
    if not isinstance(lim, (Concurrency, Named)):
        raise InvalidLimit(f"only a concurrency limit can be leased, not {lim}")
    return lim


def lease_call(key: Key, limit: LimitLike) -> Call:
    """A LEASE (protocol version 3): the on_unavailable policy may answer it, as an acquire."""
    lim = leasable(limit)
    return Call(proto.encode_lease(lim, key_bytes(key)), Opcode.LEASE, True, 0,
                proto.item_version(Opcode.LEASE, 0, lim), name_of(lim))


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
    lim = leasable(limit)
    return Call(proto.encode_release(lim, lease, key_bytes(key)), Opcode.RELEASE, False, 0,
                proto.item_version(Opcode.RELEASE, 0, lim), name_of(lim))


def multi_call(items: Iterable[Union[MultiItem, Sequence[Any]]], at: At) -> Call:
    wire = []
    for it in items:
        m = it if isinstance(it, MultiItem) else MultiItem(*it)
        wire.append(proto.WireMultiItem(Flags.STRICT if m.strict else 0, limit_of(m.limit),
                                        cost_of(m.cost), key_bytes(m.key)))
    if not 0 < len(wire) <= MAX_MULTI:
        raise TooManyItems(f"a multi has 1..{MAX_MULTI} items, got {len(wire)}")
    body = proto.encode_multi(0 if at is None else Flags.AT, 0 if at is None else at_ns(at), wire)
    names = tuple(name_of(it.limit) for it in wire)
    first = next((n for n in names if n is not None), None)
    return Call(body, Opcode.MULTI, True, len(wire), proto.multi_version(wire), first,
                names if first is not None else ())


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


P = TypeVar("P", bound="PipelineBase")


class PipelineBase:
    """The queueing half of :class:`Pipeline` and :class:`~sluice.aio.AsyncPipeline`."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._calls: List[Call] = []

    def __len__(self) -> int:
        return len(self._calls)

    def clear(self) -> None:
        """Forget the queued operations."""
        self._calls.clear()

    def _add(self: P, call: Call) -> P:
        self._calls.append(call)
        return self

    def acquire(self: P, key: Key, limit: LimitLike, cost: int = 1, *, at: At = None,
                strict: bool = False) -> P:
        """Queue an acquire; its answer is a Decision."""
        self._calls.append(item_call(Opcode.ACQUIRE, key, limit, cost, at, strict))
        return self

    def peek(self: P, key: Key, limit: LimitLike, *, at: At = None) -> P:
        """Queue a peek; its answer is a Decision."""
        return self._add(item_call(Opcode.PEEK, key, limit, 0, at, False))

    def refund(self: P, key: Key, limit: LimitLike, amount: int = 1, *, at: At = None) -> P:
        """Queue a refund; its answer is a Decision."""
        return self._add(item_call(Opcode.REFUND, key, limit, amount, at, False))

    def reset(self: P, key: Key, limit: LimitLike) -> P:
        """Queue a reset; its answer is whether the bucket existed."""
        return self._add(item_call(Opcode.RESET, key, limit, 0, None, False))

    def multi(self: P, items: Iterable[Union[MultiItem, Sequence[Any]]], *, at: At = None) -> P:
        """Queue a multi; its answer is a MultiDecision."""
        return self._add(multi_call(items, at))

    def scan_page(self: P, prefix: Key = "", cursor: int = 0, count: int = 100) -> P:
        """Queue one page of a scan; its answer is a ScanPage."""
        return self._add(scan_call(prefix, cursor, count))

    def stats(self: P) -> P:
        """Queue a stats; its answer is a dict of counters."""
        return self._add(simple_call(Opcode.STATS))

    def ping(self: P) -> P:
        """Queue a ping; its answer is None."""
        return self._add(simple_call(Opcode.PING))

    def hello(self: P) -> P:
        """Queue a hello; its answer is a Hello."""
        return self._add(simple_call(Opcode.HELLO))
