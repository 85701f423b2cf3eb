"""Response bytes into answers: frames cut from the byte stream, and each checked against the
request it answers.

Every response frame must answer the request frame it follows: the same id, the same count,
one result per operation with the operation's opcode. Anything else means the byte stream
cannot be trusted: :class:`ProtocolError`, and the client closes the connection. An answer is
a value, or the exception of its error result (not raised).

No I/O: the clients feed the bytes they read.
"""

from __future__ import annotations

import struct
from typing import Any, List, Optional, Sequence

from . import proto
from ._calls import Call
from .errors import ProtocolError, SluiceError, Status, status_error
from .proto import HEADER_LEN, MAX_BATCH, MAX_FRAME_LEN, Opcode
from .results import Decision, make_decision

_new = object.__new__
_setattr = object.__setattr__

# A whole one-decision response frame, and one decision result.
DECISION_FRAME = struct.Struct("<IBBHIBBBqqqqq")  # header, opcode, status, decision
DECISION_FRAME_SIZE = DECISION_FRAME.size  # 55
DECISION_FRAME_LEN = DECISION_FRAME.size - 4
_RESULT_DECISION = struct.Struct("<BBBqqqqq")  # opcode, status, decision
_RESULT_DECISION_SIZE = _RESULT_DECISION.size  # 43


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
                    and 3 <= code <= 5 and frame[off + 2] < proto.LIMITS:  # not a list's (version 7)
                # the common case, a decision: unpacked in one go
                _, _, allowed, rem, lim, ra, rs, dl = unpack(frame, off)
                if allowed > 1:  # shadow-denied (version 2), outage, fails closed (version 4)
                    ok, shadow, outage, closed = proto.parse_decision_byte(allowed, code)
                    d = make_decision(ok, rem, lim, ra, rs, dl, shadow_denied=shadow, outage=outage,
                                      fails_closed=closed)
                    out.append(d)
                    off += _RESULT_DECISION_SIZE
                    continue
                d = _new(Decision)  # make_decision, inlined: this loop runs per result
                _setattr(d, "__dict__", {"allowed": allowed != 0, "remaining": rem, "limit": lim,
                                         "retry_after_ns": ra, "reset_after_ns": rs, "delay_ns": dl,
                                         "degraded": False, "shadow_denied": False, "outage": None,
                                         "fails_closed": False})
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


