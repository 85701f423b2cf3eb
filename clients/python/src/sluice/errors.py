"""Sluice's exceptions: one class per wire status, plus the client's own.

Every exception the package raises derives from :class:`SluiceError`.

- A result whose status is not OK raises the class of its status
  (:class:`TableFull` for status 9, and so on); ``exc.status`` is the
  :class:`Status` and ``str(exc)`` includes the sidecar's message. The codec
  (:mod:`sluice.proto`) raises the same classes for bytes that break the
  format, as the Go codec returns the same sentinels.
- :class:`Unavailable` means the sidecar could not be asked: no socket, the
  connection broke, or no answer within the timeout. :class:`ShuttingDown`
  and :class:`Busy` derive from it, so one ``except Unavailable`` and the
  client's ``on_unavailable`` policy cover every case where the sidecar is
  not there to decide. :class:`Denied` (this process is not allowed) does
  not: it is a mistake to fix, raised whatever the policy says.
- :class:`ProtocolError` means the sidecar's reply could not be decoded (a
  bug, or not a Sluice server on the socket); the client closes the
  connection.
- :class:`RateLimited` is raised by the conveniences (``client.limit``),
  never by ``acquire``, which returns denials as a :class:`~sluice.Decision`.

Client-side mistakes are also ``ValueError``: :class:`InvalidLimit`,
:class:`InvalidKey`, :class:`InvalidCost` and :class:`TooManyItems`.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

if TYPE_CHECKING:  # pragma: no cover
    from .results import Decision


class Status(enum.IntEnum):
    """The outcome of one operation, the second byte of every result.

    A closed set: a value above :attr:`DENIED` is malformed in version 1.
    """

    OK = 0  #: success; the result body is the opcode's
    MALFORMED = 1  #: bad frame or operation bytes
    BAD_VERSION = 2  #: the frame's version is not one the server speaks
    FRAME_TOO_LARGE = 3  #: the length field is above MAX_FRAME_LEN
    BATCH_TOO_LARGE = 4  #: the count field is above MAX_BATCH
    UNKNOWN_OPCODE = 5  #: an opcode version 1 does not define
    INVALID_LIMIT = 6  #: unknown algorithm, or parameters the algorithm rejects
    INVALID_KEY = 7  #: a key of 0 or more than MAX_KEY_LEN bytes
    INVALID_COST = 8  #: a negative cost or refund amount
    TABLE_FULL = 9  #: no free slot for a new bucket
    TOO_MANY_ITEMS = 10  #: a MULTI of more than MAX_MULTI items
    CONTENDED = 11  #: a MULTI could not lock its slots; retry
    UNSUPPORTED = 12  #: not possible on this server (SCAN without inline keys)
    SHUTTING_DOWN = 13  #: the server is stopping
    INTERNAL = 14  #: a server bug or I/O failure
    BUSY = 15  #: the connection limit is reached
    DENIED = 16  #: the peer's uid or gid is not allowed


class SluiceError(Exception):
    """The base of every Sluice exception.

    ``status`` is the wire status the error stands for, ``None`` for the
    client's own errors (:class:`Unavailable`, :class:`ProtocolError`,
    :class:`RateLimited`).
    """

    status: Optional[Status] = None


class StatusError(SluiceError):
    """An error that has a wire status: a result's, or the codec's."""

    status: Status = Status.INTERNAL

    def __init__(self, message: str = "", *, op: int = 0) -> None:
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)
        #: The opcode of the operation the error answers; 0 for a frame-level
        #: error or an error the codec found.
        self.op = op


class Malformed(StatusError):
    """Bytes that do not follow the format (status 1)."""

    status = Status.MALFORMED


class BadVersion(StatusError):
    """A frame of a protocol version the other side does not speak (status 2)."""

    status = Status.BAD_VERSION


class FrameTooLarge(StatusError):
    """A frame whose length field is above MAX_FRAME_LEN (status 3)."""

    status = Status.FRAME_TOO_LARGE


class BatchTooLarge(StatusError):
    """A frame whose count field is above MAX_BATCH (status 4)."""

    status = Status.BATCH_TOO_LARGE


class UnknownOpcode(StatusError):
    """An opcode protocol version 1 does not define (status 5)."""

    status = Status.UNKNOWN_OPCODE


class InvalidLimit(StatusError, ValueError):
    """An unknown algorithm, a bad limit spec, or parameters the sidecar rejects (status 6)."""

    status = Status.INVALID_LIMIT


class InvalidKey(StatusError, ValueError):
    """A key of 0 or more than MAX_KEY_LEN bytes, or a scan prefix above it (status 7)."""

    status = Status.INVALID_KEY


class InvalidCost(StatusError, ValueError):
    """A negative cost or refund amount, or one outside int64 (status 8)."""

    status = Status.INVALID_COST


class TableFull(StatusError):
    """No free slot for a new bucket; existing buckets still work (status 9)."""

    status = Status.TABLE_FULL


class TooManyItems(StatusError, ValueError):
    """A MULTI of more than MAX_MULTI items (status 10)."""

    status = Status.TOO_MANY_ITEMS


class Contended(StatusError):
    """The buckets could not be locked; retry (status 11): a MULTI's kept moving,
    or another process (a direct client) kept one locked past the sidecar's
    lock wait, which the message names."""

    status = Status.CONTENDED


class Unsupported(StatusError):
    """Not possible on this server, e.g. SCAN on a table without inline keys (status 12)."""

    status = Status.UNSUPPORTED


class Internal(StatusError):
    """A server bug or I/O failure (status 14)."""

    status = Status.INTERNAL


class Unavailable(SluiceError):
    """The sidecar could not be asked: no socket, a broken connection, or a timeout.

    The client's ``on_unavailable`` policy decides whether decisions raise
    this or return a degraded :class:`~sluice.Decision`. ``timed_out`` is
    set when no answer came in time (the failures the circuit breaker
    counts).
    """

    timed_out = False


class ShuttingDown(StatusError, Unavailable):
    """The sidecar is stopping; reconnect later (status 13)."""

    status = Status.SHUTTING_DOWN


class Busy(StatusError, Unavailable):
    """The sidecar's connection limit is reached (status 15)."""

    status = Status.BUSY


class Denied(StatusError):
    """The peer's uid or gid is not allowed on the socket (status 16), or
    a release of a lease that another user's connection holds.

    Not an :class:`Unavailable`, as in the Go client: the sidecar is there
    and refuses this process (``--allow-uid``, ``--allow-gid``), a mistake
    to fix rather than an outage, so it is raised whatever
    ``on_unavailable`` says, never answered by the policy.
    """

    status = Status.DENIED


class ProtocolError(SluiceError):
    """The sidecar's reply could not be decoded; the connection is closed.

    ``__cause__`` holds the codec's error where there is one.
    """


class RateLimited(SluiceError):
    """Raised by ``client.limit(...)`` when the sidecar denies the request.

    ``retry_after`` is in seconds (``None`` when waiting will not help, e.g.
    a cost above the limit's maximum); ``decision`` is the full answer.
    """

    def __init__(self, key: Any, decision: Decision) -> None:
        self.key = key
        self.decision = decision
        self.retry_after: Optional[float] = decision.retry_after
        wait = "" if self.retry_after is None else f"; retry after {self.retry_after:.3f}s"
        super().__init__(f"rate limited: {key!r}{wait}")

    def __reduce__(self) -> Any:
        return (type(self), (self.key, self.decision))


_BY_STATUS: Dict[Status, Type[StatusError]] = {
    cls.status: cls
    for cls in (
        Malformed, BadVersion, FrameTooLarge, BatchTooLarge, UnknownOpcode, InvalidLimit,
        InvalidKey, InvalidCost, TableFull, TooManyItems, Contended, Unsupported,
        ShuttingDown, Internal, Busy, Denied,
    )
}


def error_class(status: int) -> Type[StatusError]:
    """Return the exception class of a status other than OK.

    A value outside the enum maps to :class:`Malformed`, as in the Go codec.
    """
    try:
        return _BY_STATUS[Status(status)]
    except (ValueError, KeyError):
        return Malformed


#: What each status means, for people (the same words as the Go client's).
STATUS_TEXT: Dict[Status, str] = {
    Status.MALFORMED: "the sidecar could not decode the request",
    Status.BAD_VERSION: "the sidecar speaks another protocol version",
    Status.FRAME_TOO_LARGE: "the request is too large",
    Status.BATCH_TOO_LARGE: "too many operations in one request",
    Status.UNKNOWN_OPCODE: "the sidecar does not know this operation",
    Status.INVALID_LIMIT: "invalid limit",
    Status.INVALID_KEY: "invalid key",
    Status.INVALID_COST: "invalid cost",
    Status.TABLE_FULL: "the sidecar's table is full",
    Status.TOO_MANY_ITEMS: "too many items in one multi",
    Status.CONTENDED: "could not lock the buckets, retry",
    Status.UNSUPPORTED: "not supported by this sidecar",
    Status.SHUTTING_DOWN: "the sidecar is shutting down",
    Status.INTERNAL: "the sidecar failed",
    Status.BUSY: "the sidecar refused the connection, it is at its connection limit",
    Status.DENIED: "the sidecar refused the connection, this user or group is not allowed",
}


def status_error(status: int, message: str = "", op: int = 0) -> StatusError:
    """Return the exception for an error result: its status's class, its
    text what the status means followed by the server's message."""
    cls = error_class(status)
    text = STATUS_TEXT.get(cls.status, cls.__name__)
    return cls(f"{text}: {message}" if message else text, op=op)
