"""The native wire format, version 7: frames, operations and results as bytes.

A port of the Go package proto; its package documentation (proto/doc.go)
is the specification, and the golden frames in proto/testdata/golden are
the test vectors this module decodes and re-encodes byte for byte. It does
no I/O.

Encoders return ``bytes`` and trust their caller: they write what they are
given, so tests can build malformed frames, and raise ``struct.error`` only
for a value a field cannot hold. Decoders take ``bytes`` (or a bytearray or
memoryview) and an offset, return what they decoded and the offset after
it, check every length before using it, and raise the exception of the
status a server would answer for the same bytes (:class:`Malformed`,
:class:`BadVersion`, :class:`FrameTooLarge`, :class:`BatchTooLarge`,
:class:`UnknownOpcode`, :class:`InvalidLimit`, :class:`InvalidKey`,
:class:`TooManyItems`); they never raise anything else on bad bytes.

It reads and writes versions 1 to 7: in a frame of version 1 or 2, LEASE
and RELEASE are unknown opcodes and the algorithms of version 3
(sliding_log, window_counters, concurrency) unknown algorithms, a frame
of version 1 has no named limits and no shadow requests, and only version 4
and later have the client's deadline (DEADLINE) and the mark of a decision
an outage policy made (``Decision.outage``), and only version 5 the quota
algorithm, whose limit field carries its time zone after its parameters
(a u8 length, 0 for UTC, and the zone's name), and that mark on a LEASE's
and a RELEASE's decision. Version 6 adds the register operations (REGGET,
REGSET, REGCAS, REGDEL), which this module decodes and encodes (the clients
do not send them), and version 7 the flag ALL of an ACQUIRE, PEEK or REFUND
on a named limit that lists several: its answer's decision has bit 5 set
and is followed by each limit's decision (``Decision.limits``) and the
index of the one that binds (``Decision.bound``). A server answers
each request frame in its version, so a client that writes each frame in
the oldest version that holds it (:func:`item_version`,
:func:`multi_version`, :func:`op_version`) keeps working against a server
of an older version for everything that version has.

Frame::

    offset size field
    0      4    length   u32: bytes after this field, 8 + body; 8..MAX_FRAME_LEN
    4      1    version  1 to 7
    5      1    kind     1 request, 2 response
    6      2    count    u16: operations or results in the body, 1..MAX_BATCH
    8      4    id       u32: chosen by the client, echoed by the server
    12     ...  body

All integers are little-endian. Durations and times are int64 nanoseconds.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

from .errors import (
    BadVersion, BatchTooLarge, FrameTooLarge, InvalidKey, InvalidLimit, Malformed, Status,
    StatusError, TooManyItems, UnknownOpcode, error_class,
)
from .limits import MAX_NAME_LEN, Algorithm, Limit, Named
from .results import (
    Decision, Hello, Lease, MultiDecision, Register, Released, ScanEntry, ScanPage, Stats, Value, make_decision,
    make_lease,
)

Buffer = Union[bytes, bytearray, memoryview]

VERSION = 7  #: the newest version this side reads and writes
LIST_VERSION = 7  #: the version of the flag ALL: each limit's decision of a named list
MAX_ZONE_LEN = 64  #: the longest time zone name of a quota's limit field (version 5)
#: the version a SCAN is written in: the newest that changed what it lists (version 4 changed nothing)
SCAN_VERSION = 3
MIN_VERSION = 1  #: the oldest version this side reads and writes (version 1 has no named limits, 2 no leases)
HEADER_LEN = 12  #: bytes of the frame header, the length field included
MAX_FRAME_LEN = 1 << 20  #: the largest length field: bytes after it
MAX_BATCH = 256  #: the most operations (or results) in one frame
MAX_KEY_LEN = 1024  #: the longest key or scan prefix, in bytes
MAX_MULTI = 16  #: the most items in one MULTI
MAX_MESSAGE_LEN = 1024  #: the longest error message of a result, in bytes
MAX_SCAN_COUNT = 1000  #: the largest count of a SCAN

_MIN_LENGTH = HEADER_LEN - 4


class Kind(enum.IntEnum):
    """Request or response: the header byte at offset 5."""

    REQUEST = 1
    RESPONSE = 2


class Opcode(enum.IntEnum):
    """The first byte of every operation and of its result."""

    HELLO = 1
    PING = 2
    ACQUIRE = 3
    PEEK = 4
    REFUND = 5
    RESET = 6
    MULTI = 7
    SCAN = 8
    STATS = 9
    LEASE = 10  #: version 3: take a slot of a concurrency limit, for a lease id
    RELEASE = 11  #: version 3: give a lease's slot back
    REGGET = 12  #: version 6: a register's value, its expiry and the server's clock
    REGSET = 13  #: version 6: set a register that does not exist
    REGCAS = 14  #: version 6: compare a register's value and swap it
    REGDEL = 15  #: version 6: delete a register


class Flags(enum.IntFlag):
    """Bits of an operation's flags byte."""

    STRICT = 1  #: restart a token_bucket's refill clock on a request that empties it or is denied
    SMYTE = 2  #: smyte/ratelimit compatibility: a denial drains the bucket
    AT = 4  #: the operation carries its own time
    NAMED = 8  #: the limit is named (version 2): the limit field holds its name
    SHADOW = 16  #: version 2, acquire: answer a denial as allowed and shadow-denied
    DEADLINE = 32  #: version 4: ``at`` is the client's deadline, Unix ns (not with AT)
    ALL = 64  #: version 7: a named list's answer carries each limit's decision


_NAMED = 8  # Flags.NAMED as a plain int: IntFlag's ~ keeps only defined bits
_SHADOW = 16
_DEADLINE = 32
_ALL = 64
_ITEM_FLAGS = 127
_LEASE_FLAGS = 8  # LEASE and RELEASE: NAMED only
_MULTI_FLAGS = 4
_MULTI_ITEM_FLAGS = 11

# Layouts, each from the opcode (or header) byte on.
HEADER = struct.Struct("<IBBHI")  # length, version, kind, count, id
ITEM = struct.Struct("<BBBqqqqqH")  # opcode, flags, alg, p0, p1, p2, n, at, keylen: 45
MULTI = struct.Struct("<BBqB")  # opcode, flags, at, n: 11
MULTI_ITEM = struct.Struct("<BBqqqqH")  # flags, alg, p0, p1, p2, cost, keylen: 36
SCAN = struct.Struct("<BQHH")  # opcode, cursor, count, prefixlen: 13
ERROR = struct.Struct("<BBH")  # opcode, status, msglen
DECISION = struct.Struct("<Bqqqqq")  # allowed, remaining, limit, retry_after, reset_after, delay: 41
LEASE_RESULT = struct.Struct("<BqqqqqQ")  # the decision, lease: 49
RELEASE_RESULT = struct.Struct("<BBqqqqq")  # released, the decision: 42
HELLO = struct.Struct("<BIHHBQH")  # version, max_frame, max_batch, max_key, max_multi, slots, slot_size: 20
SCAN_RESULT = struct.Struct("<QH")  # next, n
SCAN_ENTRY = struct.Struct("<BqH")  # algorithm, fresh_at, keylen: 11
_LIMIT = struct.Struct("<Bqqq")  # algorithm, p0, p1, p2: 25
_ITEM_TAIL = struct.Struct("<qqH")  # n, at, keylen: after the limit field
_MULTI_ITEM_TAIL = struct.Struct("<qH")  # cost, keylen: after the limit field
REGISTER = struct.Struct("<BBqqqH")  # opcode, flags, old, value, ttl, keylen: 29
REGISTER_RESULT = struct.Struct("<Bqqq")  # ok, value, ttl, now: 25
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class Header:
    """A decoded frame header."""

    length: int  #: bytes after the length field: 8 + body length
    version: int
    kind: int
    count: int  #: operations or results in the body
    id: int


class WireMultiItem(NamedTuple):
    """One item of a MULTI as the wire carries it."""

    flags: int
    limit: Limit
    cost: int
    key: bytes


@dataclass
class Op:
    """A decoded request operation. Which fields apply depends on ``code``.

    HELLO, PING, STATS: none. ACQUIRE, PEEK, REFUND, RESET: flags, limit, n,
    at, key. LEASE: flags (NAMED only), limit, n (1), key. RELEASE: flags
    (NAMED only), limit, lease, key (n is 0: the wire's n holds the lease).
    MULTI: flags (AT only), at, items. SCAN: cursor, count, prefix.
    REGGET, REGSET, REGCAS, REGDEL (version 6): old, n (the value), ttl, key.
    """

    code: int
    flags: int = 0
    limit: Optional[Limit] = None
    n: int = 0
    at: int = 0
    key: bytes = b""
    items: Tuple[WireMultiItem, ...] = ()
    cursor: int = 0
    count: int = 0
    prefix: bytes = b""
    lease: int = 0  #: RELEASE: the lease id, 1..2**64-1
    old: int = 0  #: REGCAS: the value the register must hold
    ttl: int = 0  #: REGSET, REGCAS: ns the register lives after it is written


@dataclass
class Result:
    """A decoded result: its opcode, status, and message or value.

    ``value`` holds, by opcode: Hello (HELLO), None (PING), Decision
    (ACQUIRE, PEEK, REFUND), Lease (LEASE), Released (RELEASE), bool
    (RESET: the bucket existed),
    MultiDecision (MULTI), ScanPage (SCAN), dict of counters (STATS).
    """

    code: int
    status: int = 0
    message: str = ""
    value: Value = field(default=None)

    def error(self) -> Optional[StatusError]:
        """The exception of a non-OK status, with the server's message; None if OK."""
        if self.status == Status.OK:
            return None
        return error_class(self.status)(self.message, op=self.code)


def _name(code: int) -> str:
    try:
        return Opcode(code).name
    except ValueError:
        return f"opcode({code})"


def _truncated(what: str, need: int, have: int) -> Malformed:
    return Malformed(f"malformed: {what}: truncated: need {need} bytes, have {have}")


# ---- frames ----------------------------------------------------------------


def frame(kind: int, id: int, count: int, body: bytes, version: int = VERSION) -> bytes:
    """Wrap ``count`` encoded operations or results in a frame of ``version``."""
    return HEADER.pack(_MIN_LENGTH + len(body), version, kind, count, id) + body


def parse_header(b: Buffer, off: int = 0) -> Header:
    """Decode and check the header at ``b[off:]``, in proto's order.

    Checks the version (:class:`BadVersion`), the kind (:class:`Malformed`),
    the length against 8 (:class:`Malformed`) and MAX_FRAME_LEN
    (:class:`FrameTooLarge`), the count against 1 (:class:`Malformed`) and
    MAX_BATCH (:class:`BatchTooLarge`). Fewer than 12 bytes: Malformed.
    """
    if len(b) - off < HEADER_LEN:
        raise Malformed(f"short header: {max(len(b) - off, 0)} of {HEADER_LEN} bytes")
    h = Header(*HEADER.unpack_from(b, off))
    if not MIN_VERSION <= h.version <= VERSION:
        raise BadVersion(f"unsupported protocol version: version {h.version}, "
                         f"this side speaks {MIN_VERSION} to {VERSION}")
    if h.kind != Kind.REQUEST and h.kind != Kind.RESPONSE:
        raise Malformed(f"malformed: frame kind {h.kind}")
    if h.length < _MIN_LENGTH:
        raise Malformed(f"malformed: frame length {h.length}, below {_MIN_LENGTH}")
    if h.length > MAX_FRAME_LEN:
        raise FrameTooLarge(f"frame too large: length {h.length}, limit {MAX_FRAME_LEN}")
    if h.count == 0:
        raise Malformed("malformed: frame count 0")
    if h.count > MAX_BATCH:
        raise BatchTooLarge(f"batch too large: count {h.count}, limit {MAX_BATCH}")
    return h


def split_frame(buf: Buffer, off: int = 0) -> Tuple[Optional[Header], int]:
    """Find the frame starting at ``buf[off:]``.

    Returns ``(header, end)`` when the whole frame is present (it is
    ``buf[off:end]``), ``(None, need)`` when more bytes are needed, ``need``
    being the frame's whole size once the header is present (checked before
    any body byte is needed, so a huge length is refused before it is read)
    and 12 before. Raises as :func:`parse_header`.
    """
    if len(buf) - off < HEADER_LEN:
        return None, HEADER_LEN
    h = parse_header(buf, off)
    end = off + 4 + h.length
    if len(buf) < end:
        return None, 4 + h.length
    return h, end


def decode_frame(b: Buffer) -> Tuple[Header, List[Union[Op, Result]]]:
    """Decode one whole frame: its header and every operation or result.

    ``b`` must hold exactly the frame. Raises for a bad header, a bad
    operation or result, bytes missing, or bytes after the last one.
    """
    h, end = split_frame(b)
    if h is None:
        raise Malformed(f"malformed: incomplete frame: {len(b)} of {end} bytes")
    if end != len(b):
        raise Malformed(f"malformed: {len(b) - end} bytes after the frame")
    out: List[Union[Op, Result]] = []
    off = HEADER_LEN
    for _ in range(h.count):
        v: Union[Op, Result]
        if h.kind == Kind.REQUEST:
            v, off = decode_op(b, off, end, h.version)
        else:
            v, off = decode_result(b, off, end)
        out.append(v)
    if off != end:
        raise Malformed(f"malformed: {end - off} bytes after the last operation")
    return h, out


def encode_frame(kind: int, id: int, parts: Sequence[Union[Op, Result]], version: int = VERSION) -> bytes:
    """Encode a frame of operations (a request) or results (a response)."""
    body = b"".join(encode_op(p) if isinstance(p, Op) else encode_result(p) for p in parts)
    return frame(kind, id, len(parts), body, version)


# ---- operations ------------------------------------------------------------


def encode_simple(code: int) -> bytes:
    """Encode an operation without a body: HELLO, PING or STATS."""
    return bytes((code,))


def _limit_field(flags: int, limit: Limit) -> Tuple[int, bytes]:
    """The flags and the limit field of an item: a named limit's name (u8 length and bytes, with
    NAMED), any other limit's algorithm and parameters."""
    if isinstance(limit, Named):
        name = limit.name.encode("ascii")
        return int(flags) | _NAMED, bytes((len(name),)) + name
    if limit.algorithm.version > VERSION:
        raise InvalidLimit(f"invalid limit: {limit.algorithm} limits need protocol version {limit.algorithm.version}, "
                           "which this client does not speak yet: define the limit in the sidecar's config and "
                           "use its name")
    a, p0, p1, p2 = limit._wire
    if a == Algorithm.QUOTA:  # version 5: the time zone after the parameters
        tz = limit._tz.encode("ascii")  # type: ignore[attr-defined]
        return int(flags) & ~_NAMED, _LIMIT.pack(a, p0, p1, p2) + bytes((len(tz),)) + tz
    return int(flags) & ~_NAMED, _LIMIT.pack(a, p0, p1, p2)


def encode_item(code: int, flags: int, limit: Limit, n: int, at: int, key: bytes) -> bytes:
    """Encode an operation of the item layout, ACQUIRE, PEEK, REFUND or RESET (or LEASE and
    RELEASE, which encode_lease and encode_release write more simply): flags, limit, n (cost or
    amount), at, key."""
    flags, field = _limit_field(flags, limit)
    return bytes((code, flags)) + field + _ITEM_TAIL.pack(n, at, len(key)) + key


def encode_lease(limit: Limit, key: bytes) -> bytes:
    """Encode a LEASE (version 3): take one slot of the concurrency ``limit`` for ``key``; n is 1."""
    return encode_item(Opcode.LEASE, 0, limit, 1, 0, key)


def encode_release(limit: Limit, lease: int, key: bytes) -> bytes:
    """Encode a RELEASE (version 3) of ``lease`` (1..2**64-1, the id its LEASE returned); n
    holds the id's 64 bits."""
    return encode_item(Opcode.RELEASE, 0, limit, _i64(lease), 0, key)


def _i64(u: int) -> int:
    """A u64 as the i64 of the same 64 bits."""
    return u - (1 << 64) if u >= 1 << 63 else u


def encode_multi(flags: int, at: int, items: Sequence[WireMultiItem]) -> bytes:
    """Encode a MULTI: flags (AT or 0), at, then each item."""
    parts = [MULTI.pack(Opcode.MULTI, flags, at, len(items))]
    for it in items:
        flags, field = _limit_field(it.flags, it.limit)
        parts.append(bytes((flags,)) + field + _MULTI_ITEM_TAIL.pack(it.cost, len(it.key)))
        parts.append(it.key)
    return b"".join(parts)


def encode_scan(cursor: int, count: int, prefix: bytes) -> bytes:
    """Encode a SCAN: up to ``count`` buckets whose key starts with ``prefix``, from ``cursor``."""
    return SCAN.pack(Opcode.SCAN, cursor, count, len(prefix)) + prefix


def encode_register(code: int, old: int, value: int, ttl: int, key: bytes) -> bytes:
    """Encode a register operation (version 6): REGGET, REGSET, REGCAS or REGDEL."""
    return REGISTER.pack(code, 0, old, value, ttl, len(key)) + key


def encode_op(op: Op) -> bytes:
    """Encode any decoded operation back to its bytes."""
    c = op.code
    if Opcode.REGGET <= c <= Opcode.REGDEL:
        return encode_register(c, op.old, op.n, op.ttl, op.key)
    if Opcode.ACQUIRE <= c <= Opcode.RESET or c == Opcode.LEASE:
        assert op.limit is not None
        return encode_item(c, op.flags, op.limit, op.n, op.at, op.key)
    if c == Opcode.RELEASE:
        assert op.limit is not None
        return encode_item(c, op.flags, op.limit, _i64(op.lease), op.at, op.key)
    if c == Opcode.MULTI:
        return encode_multi(op.flags, op.at, op.items)
    if c == Opcode.SCAN:
        return encode_scan(op.cursor, op.count, op.prefix)
    return encode_simple(c)


# ---- versions --------------------------------------------------------------
#
# The oldest version a request needs. A server answers a frame in its
# version, so a frame written in the oldest version that holds its
# operations is answered by a server of that version too: only what a
# newer version added needs a newer server.


def item_version(code: int, flags: int, limit: Limit) -> int:
    """The oldest version whose frames may carry the item operation ``encode_item(code, flags,
    limit, ...)`` writes: 7 with ALL, 5 for a quota, 4 with DEADLINE, 3 for LEASE, RELEASE and a limit of the algorithms from sliding_log on,
    2 for a named limit or a shadow request (SHADOW in ``flags``, or an ACQUIRE of a limit whose
    spec says shadow=true), else 1."""
    if flags & _ALL:
        return LIST_VERSION
    if limit._wire[0] == Algorithm.QUOTA:
        return 5
    if flags & _DEADLINE:
        return 4
    if code == Opcode.LEASE or code == Opcode.RELEASE or limit._wire[0] >= Algorithm.SLIDING_LOG:
        return 3  # a named limit's _wire is all 0: the sidecar's config holds its algorithm
    if isinstance(limit, Named) or flags & _SHADOW or limit.shadow and code == Opcode.ACQUIRE:
        return 2
    return 1


def multi_version(items: Sequence[WireMultiItem]) -> int:
    """The oldest version whose frames may carry the MULTI ``encode_multi(flags, at, items)``
    writes: its items' highest, a MULTI item being an acquire that never carries SHADOW."""
    v = 1
    for it in items:
        lim = it.limit
        if lim._wire[0] == Algorithm.QUOTA:
            return 5
        if lim._wire[0] >= Algorithm.SLIDING_LOG:
            v = 3
        elif isinstance(lim, Named):
            v = max(v, 2)
    return v


def op_version(op: Op) -> int:
    """The oldest version whose frames may carry ``encode_op(op)``: :func:`item_version` of an
    item operation, :func:`multi_version` of a MULTI, 6 for a register operation, 1 for HELLO,
    PING and STATS, and
    SCAN_VERSION for a SCAN (a SCAN in a frame of version 1 or 2 leaves out the buckets of the
    algorithms of version 3)."""
    c = op.code
    if Opcode.ACQUIRE <= c <= Opcode.RESET or c == Opcode.LEASE or c == Opcode.RELEASE:
        assert op.limit is not None
        return item_version(c, op.flags, op.limit)
    if c == Opcode.MULTI:
        return multi_version(op.items)
    if c == Opcode.SCAN:
        return SCAN_VERSION
    if Opcode.REGGET <= c <= Opcode.REGDEL:
        return 6
    return MIN_VERSION


def _key(b: Buffer, off: int, end: int, min_len: int, code: int, what: str) -> Tuple[bytes, int]:
    """A u16 length and that many bytes (min_len..MAX_KEY_LEN) at b[off:], 2 bytes present."""
    (n,) = _U16.unpack_from(b, off)
    if n < min_len or n > MAX_KEY_LEN:
        raise InvalidKey(f"invalid key: {_name(code)} {what} of {n} bytes, want {min_len}..{MAX_KEY_LEN}")
    off += 2
    if end - off < n:
        raise _truncated(f"{_name(code)} {what}", n, end - off)
    return bytes(b[off:off + n]), off + n


def _limit(alg: int, p0: int, p1: int, p2: int, version: int = VERSION, tz: str = "") -> Limit:
    if not 1 <= alg <= (9 if version >= 5 else 8 if version >= 3 else 5):
        raise InvalidLimit(f"invalid limit: unknown algorithm {alg}")
    return Limit.from_wire(alg, p0, p1, p2, tz)


def _decode_limit_field(b: Buffer, off: int, end: int, flags: int, code: int, version: int) -> Tuple[Limit, int]:
    """The limit field at b[off:]: a name with NAMED, else an algorithm and its parameters."""
    if flags & _NAMED:
        if end - off < 1:
            raise _truncated(f"{_name(code)} limit name", 1, 0)
        n = b[off]
        if not 1 <= n <= MAX_NAME_LEN:
            raise InvalidLimit(f"invalid limit: {_name(code)} limit name of {n} bytes, want 1..{MAX_NAME_LEN}")
        if end - off - 1 < n:
            raise _truncated(f"{_name(code)} limit name", n, end - off - 1)
        try:
            return Named(bytes(b[off + 1:off + 1 + n]).decode("ascii")), off + 1 + n
        except (UnicodeDecodeError, InvalidLimit) as e:
            raise InvalidLimit(f"invalid limit: {_name(code)} limit name: {e}") from None
    if end - off < _LIMIT.size:
        raise _truncated(f"{_name(code)} limit", _LIMIT.size, end - off)
    alg, p0, p1, p2 = _LIMIT.unpack_from(b, off)
    off += _LIMIT.size
    if alg != Algorithm.QUOTA or version < 5:
        return _limit(alg, p0, p1, p2, version), off
    if end - off < 1:
        raise _truncated(f"{_name(code)} limit's time zone", 1, 0)
    n = b[off]
    if n > MAX_ZONE_LEN:
        raise InvalidLimit(f"invalid limit: {_name(code)} time zone of {n} bytes, want at most {MAX_ZONE_LEN}")
    if end - off - 1 < n:
        raise _truncated(f"{_name(code)} limit's time zone", n, end - off - 1)
    try:
        tz = bytes(b[off + 1:off + 1 + n]).decode("ascii")
    except UnicodeDecodeError:
        raise InvalidLimit(f"invalid limit: {_name(code)} time zone: not ASCII") from None
    return _limit(alg, p0, p1, p2, version, tz), off + 1 + n


def decode_op(b: Buffer, off: int = 0, end: Optional[int] = None, version: int = VERSION) -> Tuple[Op, int]:
    """Decode the operation at ``b[off:end]``; return it and the offset after it.

    Checks lengths, limits, flag bits, the opcode and the algorithm (those
    of the frame's ``version``), the counts, a LEASE's n (1) and a
    RELEASE's lease (not 0), as proto's DecodeOpVersion, and nothing the
    server judges (costs, parameters).
    """
    if end is None:
        end = len(b)
    if off >= end:
        raise _truncated("operation", 1, 0)
    code = b[off]
    named = _NAMED if version >= 2 else 0
    leases = version >= 3
    if Opcode.ACQUIRE <= code <= Opcode.RESET or leases and code in (Opcode.LEASE, Opcode.RELEASE):
        if end - off < 2:
            raise _truncated(_name(code), ITEM.size - 1, end - off - 1)
        flags = b[off + 1]
        if code >= Opcode.LEASE:
            bad = flags & ~_LEASE_FLAGS  # a lease is on the server's clock: no AT
        else:
            ok = 7 | (named and _NAMED | _SHADOW) | (_DEADLINE if version >= 4 else 0) | (_ALL if version >= 7 else 0)
            bad = flags & ~ok
        if bad:
            raise Malformed(f"malformed: {_name(code)}: reserved flag bits 0x{bad:02x}")
        if flags & 4 and flags & _DEADLINE:
            raise Malformed(f"malformed: {_name(code)}: flags AT and DEADLINE together (both use the at field)")
        if not flags & _NAMED and end - off < ITEM.size:
            raise _truncated(_name(code), ITEM.size - 1, end - off - 1)
        limit, off = _decode_limit_field(b, off + 2, end, flags, code, version)
        if end - off < _ITEM_TAIL.size:
            raise _truncated(_name(code), ITEM.size - 1, end - off)
        n, at, _ = _ITEM_TAIL.unpack_from(b, off)
        lease = 0
        if code == Opcode.LEASE and n != 1:
            raise Malformed(f"malformed: LEASE with n {n}, want 1")
        if code == Opcode.RELEASE:
            if n == 0:
                raise Malformed("malformed: RELEASE of lease 0")
            lease, n = n & 0xFFFFFFFFFFFFFFFF, 0
        key, off = _key(b, off + _ITEM_TAIL.size - 2, end, 1, code, "key")
        return Op(Opcode(code), flags=flags, limit=limit, n=n, at=at, key=key, lease=lease), off
    if code == Opcode.MULTI:
        return _decode_multi(b, off, end, named, version)
    if code == Opcode.SCAN:
        if end - off < SCAN.size:
            raise _truncated("SCAN", SCAN.size - 1, end - off - 1)
        _, cursor, count, _ = SCAN.unpack_from(b, off)
        if count == 0 or count > MAX_SCAN_COUNT:
            raise Malformed(f"malformed: SCAN count {count}, want 1..{MAX_SCAN_COUNT}")
        prefix, off = _key(b, off + SCAN.size - 2, end, 0, code, "prefix")
        return Op(Opcode.SCAN, cursor=cursor, count=count, prefix=prefix), off
    if code in (Opcode.HELLO, Opcode.PING, Opcode.STATS):
        return Op(Opcode(code)), off + 1
    if version >= 6 and Opcode.REGGET <= code <= Opcode.REGDEL:
        return _decode_register(b, off, end)
    raise UnknownOpcode(f"unknown opcode: {code}")


def _decode_register(b: Buffer, off: int, end: int) -> Tuple[Op, int]:
    code = b[off]
    if end - off < REGISTER.size:
        raise _truncated(_name(code), REGISTER.size - 1, end - off - 1)
    _, flags, old, value, ttl, _ = REGISTER.unpack_from(b, off)
    if flags:
        raise Malformed(f"malformed: {_name(code)}: reserved flag bits 0x{flags:02x}")
    if code != Opcode.REGCAS and old:
        raise Malformed(f"malformed: {_name(code)} with old {old}, want 0")
    if code in (Opcode.REGGET, Opcode.REGDEL) and (value or ttl):
        raise Malformed(f"malformed: {_name(code)} with value {value} and ttl {ttl}, want 0")
    key, off = _key(b, off + REGISTER.size - 2, end, 1, code, "key")
    return Op(Opcode(code), n=value, key=key, old=old, ttl=ttl), off


def _decode_multi(b: Buffer, off: int, end: int, named: int, version: int) -> Tuple[Op, int]:
    if end - off < MULTI.size:
        raise _truncated("MULTI", MULTI.size - 1, end - off - 1)
    _, flags, at, n = MULTI.unpack_from(b, off)
    if flags & ~_MULTI_FLAGS:
        raise Malformed(f"malformed: MULTI: reserved flag bits 0x{flags & ~_MULTI_FLAGS:02x}")
    if n == 0:
        raise Malformed("malformed: MULTI with no items")
    if n > MAX_MULTI:
        raise TooManyItems(f"too many items in multi: {n} items, limit {MAX_MULTI}")
    off += MULTI.size
    items = []
    for i in range(n):
        if end - off < 1:
            raise _truncated(f"MULTI item {i}", MULTI_ITEM.size, end - off)
        iflags = b[off]
        allowed = (_MULTI_ITEM_FLAGS & ~_NAMED) | named
        if iflags & ~allowed:
            raise Malformed(f"malformed: MULTI item {i}: reserved flag bits 0x{iflags & ~allowed:02x}")
        if not iflags & _NAMED and end - off < MULTI_ITEM.size:
            raise _truncated(f"MULTI item {i}", MULTI_ITEM.size, end - off)
        limit, off = _decode_limit_field(b, off + 1, end, iflags, Opcode.MULTI, version)
        if end - off < _MULTI_ITEM_TAIL.size:
            raise _truncated(f"MULTI item {i}", MULTI_ITEM.size, end - off)
        cost, _ = _MULTI_ITEM_TAIL.unpack_from(b, off)
        key, off = _key(b, off + _MULTI_ITEM_TAIL.size - 2, end, 1, Opcode.MULTI, "item key")
        items.append(WireMultiItem(iflags, limit, cost, key))
    return Op(Opcode.MULTI, flags=flags, at=at, items=tuple(items)), off


# ---- results ---------------------------------------------------------------


def encode_error(code: int, status: int, message: str) -> bytes:
    """Encode an error result for opcode ``code`` (0 for a frame-level error).

    The message is cut to MAX_MESSAGE_LEN bytes at a UTF-8 boundary; a status
    of OK or outside the enum is written as INTERNAL, as in Go.
    """
    if status == Status.OK or not 0 < status <= Status.DENIED:
        status = Status.INTERNAL
    msg = message.encode("utf-8")[:MAX_MESSAGE_LEN].decode("utf-8", "ignore").encode("utf-8")
    return ERROR.pack(code, status, len(msg)) + msg


def encode_decision(code: int, d: Decision) -> bytes:
    """Encode the OK result of an ACQUIRE, PEEK or REFUND carrying ``d``."""
    return bytes((code, 0)) + _pack_decision(d)


def encode_lease_result(lease: Lease) -> bytes:
    """Encode the OK result of a LEASE: the decision and the lease's id (0 when denied)."""
    return bytes((Opcode.LEASE, 0)) + _pack_decision(lease) + _U64.pack(lease.id)


def encode_release_result(r: Released) -> bytes:
    """Encode the OK result of a RELEASE: released, then the decision as PEEK reports it afterwards."""
    return bytes((Opcode.RELEASE, 0, 1 if r.released else 0)) + _pack_decision(r.decision)


def _pack_decision(d: Decision) -> bytes:
    b = DECISION.pack(decision_byte(d), d.remaining, d.limit, d.retry_after_ns, d.reset_after_ns, d.delay_ns)
    if d.limits:  # version 7: each limit's decision of a list follows
        b += bytes((len(d.limits), d.bound)) + b"".join(_pack_decision(x) for x in d.limits)
    return b


#: The outage policies a decision's first byte names in bits 2-3 (version 4; of a LEASE's and a
#: RELEASE's decision, version 5), by their code.
OUTAGES = (None, "local", "open", "closed")


#: Bit 4 of a decision's first byte (version 4): the limit fails closed.
FAILS_CLOSED = 16
#: Bit 5 of an ACQUIRE's, PEEK's or REFUND's decision's first byte (version 7): the decisions of
#: a list's limits follow.
LIMITS = 32


def decision_byte(d: Decision) -> int:
    """A decision's first byte: allowed, shadow-denied (bit 1), the outage policy (bits 2-3),
    fails closed (bit 4) and the limits of a list (bit 5)."""
    return (3 if d.shadow_denied else 1 if d.allowed else 0) | (OUTAGES.index(d.outage) << 2 if d.outage else 0) \
        | (FAILS_CLOSED if d.fails_closed else 0) | (LIMITS if d.limits else 0)


def parse_decision_byte(c: int, code: int) -> Tuple[bool, bool, Optional[str], bool]:
    """The allowed, shadow-denied, outage and fails-closed of a decision's first byte of an
    ACQUIRE, PEEK or REFUND; raises Malformed for bits no version sets. Bit 5 (the limits of a
    list follow) is the caller's to read."""
    shadow = c & 2 != 0
    if c & ~0x3F or shadow and (not c & 1 or code != Opcode.ACQUIRE):
        raise Malformed(f"malformed: {_name(code)} decision's first byte 0x{c:02x}")
    return c & 1 == 1, shadow, OUTAGES[c >> 2 & 3], c & FAILS_CLOSED != 0


def encode_result(r: Result) -> bytes:
    """Encode any result: an error if ``r.status`` is not OK, else the opcode's body."""
    c, v = r.code, r.value
    if r.status != Status.OK:
        return encode_error(c, r.status, r.message)
    head = bytes((c, 0))
    if c == Opcode.HELLO:
        assert isinstance(v, Hello)
        return head + HELLO.pack(v.version, v.max_frame, v.max_batch, v.max_key, v.max_multi,
                                 v.slot_count, v.slot_size)
    if c == Opcode.PING:
        return head
    if Opcode.ACQUIRE <= c <= Opcode.REFUND:
        assert isinstance(v, Decision)
        return head + _pack_decision(v)
    if c == Opcode.RESET:
        return head + (b"\x01" if v else b"\x00")
    if c == Opcode.LEASE:
        assert isinstance(v, Lease)
        return encode_lease_result(v)
    if c == Opcode.RELEASE:
        assert isinstance(v, Released)
        return encode_release_result(v)
    if c == Opcode.MULTI:
        assert isinstance(v, MultiDecision)
        return head + bytes((1 if v.allowed else 0, len(v.decisions))) + b"".join(
            _pack_decision(d) for d in v.decisions)
    if c == Opcode.SCAN:
        assert isinstance(v, ScanPage)
        parts = [head, SCAN_RESULT.pack(v.next, len(v.entries))]
        for e in v.entries:
            parts += [SCAN_ENTRY.pack(e.algorithm, e.fresh_at_ns, len(e.key)), e.key]
        return b"".join(parts)
    if Opcode.REGGET <= c <= Opcode.REGDEL:
        assert isinstance(v, Register)
        return head + REGISTER_RESULT.pack(1 if v.ok else 0, v.value, v.ttl_ns, v.now_ns)
    if c == Opcode.STATS:
        assert isinstance(v, dict)
        parts = [head, _U16.pack(len(v))]
        for name, value in v.items():
            raw = name.encode("utf-8", "surrogateescape")
            parts += [bytes((len(raw),)), raw, _U64.pack(value)]
        return b"".join(parts)
    raise ValueError(f"cannot encode an OK result of opcode {c}")


def _bool(c: int, what: str) -> bool:
    if c > 1:
        raise Malformed(f"malformed: {what} byte {c}, want 0 or 1")
    return c == 1


def _decision(b: Buffer, off: int, end: int, code: int) -> Tuple[Decision, int]:
    if end - off < DECISION.size:
        raise _truncated(f"{_name(code)} decision", DECISION.size, end - off)
    allowed, rem, lim, retry, reset, delay = DECISION.unpack_from(b, off)
    if Opcode.ACQUIRE <= code <= Opcode.REFUND:  # shadow-denied (version 2), outage, fails closed (version 4)
        ok, shadow, outage, closed = parse_decision_byte(allowed, code)
        off += DECISION.size
        limits: Tuple[Decision, ...] = ()
        bound = 0
        if allowed & LIMITS:  # version 7: each limit's decision of a list
            limits, bound, off = _decode_limits(b, off, end, code)
        return make_decision(ok, rem, lim, retry, reset, delay, shadow_denied=shadow, outage=outage,
                             fails_closed=closed, limits=limits, bound=bound), off
    if code == Opcode.LEASE or code == Opcode.RELEASE:  # outage (version 5)
        if allowed & ~0x0D:
            raise Malformed(f"malformed: {_name(code)} decision's first byte 0x{allowed:02x}")
        return make_decision(allowed & 1 == 1, rem, lim, retry, reset, delay, outage=OUTAGES[allowed >> 2 & 3]), \
            off + DECISION.size
    return make_decision(_bool(allowed, "decision allowed"), rem, lim, retry, reset, delay), off + DECISION.size


def _decode_limits(b: Buffer, off: int, end: int, code: int) -> Tuple[Tuple[Decision, ...], int, int]:
    """The decisions of a list's limits after a decision whose bit 5 is set, the index of the
    one that binds, and the offset after them."""
    if end - off < 2:
        raise _truncated(f"{_name(code)} limits", 2, end - off)
    n, bound = b[off], b[off + 1]
    if n == 0 or n > MAX_MULTI or bound >= n:
        raise Malformed(f"malformed: {_name(code)} result with {n} limits bound by limit {bound}, "
                        f"want 1..{MAX_MULTI} limits and a bound below their count")
    off += 2
    ds = []
    for _ in range(n):
        d, off = _decision(b, off, end, Opcode.MULTI)  # a boolean first byte, as a MULTI's
        ds.append(d)
    return tuple(ds), bound, off


def decode_result(b: Buffer, off: int = 0, end: Optional[int] = None) -> Tuple[Result, int]:
    """Decode the result at ``b[off:end]``; return it and the offset after it.

    Checks lengths, limits, booleans, the status (a known one) and the
    opcode of an OK result, as proto's DecodeResult. An error result's
    opcode is not checked: its body is the same for every opcode.
    """
    if end is None:
        end = len(b)
    if end - off < 2:
        raise _truncated("result", 2, end - off)
    code, status = b[off], b[off + 1]
    off += 2
    if status != Status.OK:
        if status > Status.DENIED:
            raise Malformed(f"malformed: {_name(code)} result: unknown status {status}")
        if end - off < 2:
            raise _truncated(f"{_name(code)} error", 2, end - off)
        (n,) = _U16.unpack_from(b, off)
        if n > MAX_MESSAGE_LEN:
            raise Malformed(f"malformed: {_name(code)} error message of {n} bytes, limit {MAX_MESSAGE_LEN}")
        off += 2
        if end - off < n:
            raise _truncated(f"{_name(code)} error message", n, end - off)
        msg = bytes(b[off:off + n]).decode("utf-8", "replace")
        return Result(code, status, msg), off + n
    value: Value
    if Opcode.ACQUIRE <= code <= Opcode.REFUND:
        value, off = _decision(b, off, end, code)
    elif code == Opcode.PING:
        value = None
    elif code == Opcode.RESET:
        if end - off < 1:
            raise _truncated("RESET result", 1, 0)
        value = _bool(b[off], "RESET existed")
        off += 1
    elif code == Opcode.LEASE:
        if end - off < LEASE_RESULT.size:
            raise _truncated("LEASE result", LEASE_RESULT.size, end - off)
        d, off = _decision(b, off, end, code)
        value = make_lease(d, _U64.unpack_from(b, off)[0])
        off += 8
    elif code == Opcode.RELEASE:
        if end - off < RELEASE_RESULT.size:
            raise _truncated("RELEASE result", RELEASE_RESULT.size, end - off)
        released = _bool(b[off], "RELEASE released")
        d, off = _decision(b, off + 1, end, code)
        value = Released(released, d)
    elif code == Opcode.HELLO:
        if end - off < HELLO.size:
            raise _truncated("HELLO result", HELLO.size, end - off)
        value = Hello(*HELLO.unpack_from(b, off))
        off += HELLO.size
    elif code == Opcode.MULTI:
        value, off = _decode_multi_result(b, off, end)
    elif code == Opcode.SCAN:
        value, off = _decode_scan_result(b, off, end)
    elif code == Opcode.STATS:
        value, off = _decode_stats_result(b, off, end)
    elif Opcode.REGGET <= code <= Opcode.REGDEL:
        if end - off < REGISTER_RESULT.size:
            raise _truncated(f"{_name(code)} result", REGISTER_RESULT.size, end - off)
        ok, val, ttl, now = REGISTER_RESULT.unpack_from(b, off)
        if ttl < -1:
            raise Malformed(f"malformed: {_name(code)} result with ttl {ttl}")
        value = Register(_bool(ok, "register result ok"), val, ttl, now)
        off += REGISTER_RESULT.size
    else:
        raise UnknownOpcode(f"unknown opcode: OK result with opcode {code}")
    return Result(code, 0, "", value), off


def _decode_multi_result(b: Buffer, off: int, end: int) -> Tuple[MultiDecision, int]:
    if end - off < 2:
        raise _truncated("MULTI result", 2, end - off)
    allowed = _bool(b[off], "MULTI allowed")
    n = b[off + 1]
    if n == 0 or n > MAX_MULTI:
        raise Malformed(f"malformed: MULTI result with {n} decisions, want 1..{MAX_MULTI}")
    off += 2
    ds = []
    for _ in range(n):
        if end - off < DECISION.size:
            raise _truncated("MULTI decision", DECISION.size, end - off)
        c = b[off]  # version 7: the outage policy (bits 2-3) and fails closed (bit 4), as an ACQUIRE's
        if c & ~0x1D:
            raise Malformed(f"malformed: MULTI decision's first byte 0x{c:02x}")
        _, rem, lim, retry, reset, delay = DECISION.unpack_from(b, off)
        ds.append(make_decision(c & 1 == 1, rem, lim, retry, reset, delay, outage=OUTAGES[c >> 2 & 3],
                                fails_closed=c & FAILS_CLOSED != 0))
        off += DECISION.size
    return MultiDecision(allowed, tuple(ds)), off


def _decode_scan_result(b: Buffer, off: int, end: int) -> Tuple[ScanPage, int]:
    if end - off < SCAN_RESULT.size:
        raise _truncated("SCAN result", SCAN_RESULT.size, end - off)
    nxt, n = SCAN_RESULT.unpack_from(b, off)
    if n > MAX_SCAN_COUNT:
        raise Malformed(f"malformed: SCAN result with {n} entries, limit {MAX_SCAN_COUNT}")
    off += SCAN_RESULT.size
    entries = []
    for _ in range(n):
        if end - off < SCAN_ENTRY.size:
            raise _truncated("SCAN entry", SCAN_ENTRY.size, end - off)
        alg, fresh_at, _ = SCAN_ENTRY.unpack_from(b, off)
        if not 1 <= alg <= 8:
            raise InvalidLimit(f"invalid limit: SCAN entry: unknown algorithm {alg}")
        key, off = _key(b, off + SCAN_ENTRY.size - 2, end, 1, Opcode.SCAN, "entry key")
        entries.append(ScanEntry(key, Algorithm(alg), fresh_at))
    return ScanPage(nxt, tuple(entries)), off


def _decode_stats_result(b: Buffer, off: int, end: int) -> Tuple[Stats, int]:
    if end - off < 2:
        raise _truncated("STATS result", 2, end - off)
    (n,) = _U16.unpack_from(b, off)
    off += 2
    stats: Stats = {}
    for _ in range(n):
        if end - off < 9:
            raise _truncated("STATS counter", 9, end - off)
        ln = b[off]
        if ln == 0:
            raise Malformed("malformed: STATS counter with an empty name")
        if end - off < 9 + ln:
            raise _truncated("STATS counter", 9 + ln, end - off)
        name = bytes(b[off + 1:off + 1 + ln]).decode("utf-8", "surrogateescape")
        (stats[name],) = _U64.unpack_from(b, off + 1 + ln)
        off += 9 + ln
    return stats, off

