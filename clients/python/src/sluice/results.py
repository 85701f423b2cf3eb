"""What the sidecar answers: decisions and the bodies of the other results.

Durations arrive in integer nanoseconds and are kept exactly in the
``*_ns`` fields; the properties of the plain names give float seconds
(``None`` where the wire says -1, "not applicable") and the ``*_timedelta``
properties a :class:`datetime.timedelta` (microsecond resolution).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple, Union

from .limits import Algorithm, Limit

_NS = 1_000_000_000


def _seconds(ns: int) -> Optional[float]:
    return None if ns < 0 else ns / _NS


def _timedelta(ns: int) -> Optional[datetime.timedelta]:
    return None if ns < 0 else datetime.timedelta(microseconds=ns // 1000)


@dataclass(frozen=True)
class Decision:
    """The answer to an acquire, peek or refund, or to one item of a multi (a :class:`Lease` is one too).

    ``bool(decision)`` is ``decision.allowed``.

    Attributes:
        allowed: the request may proceed (for the pacer: after ``delay``).
        remaining: cost-1 requests still allowed now, ``0..limit``.
        limit: the largest ``remaining`` can be (for gcra: burst + 1).
        retry_after_ns: nanoseconds until this request would be allowed; -1
            if it is allowed, or if waiting will never help.
        reset_after_ns: nanoseconds until the bucket is back to its fresh
            state; 0 if it is fresh.
        delay_ns: nanoseconds the caller must wait before acting (pacer); 0
            for the other algorithms.
        degraded: the sidecar could not be asked and the client's
            ``on_unavailable`` policy made this decision ("open": allowed,
            "closed": denied); ``remaining`` and ``limit`` are then 0 and
            say nothing.
        shadow_denied: an allowed acquire that a shadow limit (or the
            ``shadow=True`` option) would have denied: let it through, and
            log it, or answer it without doing the work (a shadow ban).
        outage: None, or the outage policy of a global limit that made this
            decision because Redis did not answer in time: "local" (this
            host's share of the limit), "open" (allowed) or "closed"
            (denied; ``retry_after`` is when the sidecar asks Redis again).
            Needs a sidecar of protocol version 4. With ``degraded``,
            "closed": the sidecar did not answer a request on a global limit
            that fails closed, and the client denied it (see
            ``fails_closed``).
        fails_closed: the limit is a global limit whose outage policy is
            "closed" (protocol version 4), whoever made this decision. The
            client remembers it per limit name: when the sidecar does not
            answer a later request on the name, ``on_unavailable`` denies it
            ("open" does not admit it; "raise" still raises).
        limits: the decision of each limit of a named limit that lists
            several (the sidecar's config: ``login: [SPEC, SPEC]``), in the
            list's order, which a sidecar of protocol version 7 gives to an
            acquire, peek or refund; ``()`` for a limit that is one limit,
            and from an older sidecar. The decision itself is their
            combination (allowed if each allows), with the ``limit`` and
            ``retry_after`` of ``limits[bound]``, the limit that binds, the
            least ``remaining`` and the largest ``reset_after`` and
            ``delay``. The RateLimit headers (:mod:`sluice.headers`) list
            every limit.
        bound: the index in ``limits`` of the limit that binds.
    """

    allowed: bool
    remaining: int
    limit: int
    retry_after_ns: int
    reset_after_ns: int
    delay_ns: int
    degraded: bool = False
    shadow_denied: bool = False
    outage: Optional[str] = None
    fails_closed: bool = False
    limits: Tuple["Decision", ...] = ()
    bound: int = 0

    def __bool__(self) -> bool:
        return self.allowed

    @property
    def retry_after(self) -> Optional[float]:
        """Seconds until this request would be allowed; None if allowed or never."""
        return _seconds(self.retry_after_ns)

    @property
    def reset_after(self) -> Optional[float]:
        """Seconds until the bucket is back to its fresh state (0.0 if fresh)."""
        return _seconds(self.reset_after_ns)

    @property
    def delay(self) -> Optional[float]:
        """Seconds to wait before acting (pacer); 0.0 for the other algorithms."""
        return _seconds(self.delay_ns)

    @property
    def retry_after_timedelta(self) -> Optional[datetime.timedelta]:
        """``retry_after`` as a timedelta (microseconds, truncated)."""
        return _timedelta(self.retry_after_ns)

    @property
    def reset_after_timedelta(self) -> Optional[datetime.timedelta]:
        """``reset_after`` as a timedelta (microseconds, truncated)."""
        return _timedelta(self.reset_after_ns)

    @property
    def delay_timedelta(self) -> Optional[datetime.timedelta]:
        """``delay`` as a timedelta (microseconds, truncated)."""
        return _timedelta(self.delay_ns)


_new = object.__new__
_setattr = object.__setattr__


def make_decision(allowed: bool, remaining: int, limit: int, retry_after_ns: int,
                  reset_after_ns: int, delay_ns: int, degraded: bool = False,
                  shadow_denied: bool = False, outage: Optional[str] = None,
                  fails_closed: bool = False, limits: Tuple[Decision, ...] = (), bound: int = 0) -> Decision:
    """Build a Decision without the frozen dataclass's per-field ``__init__`` (2x faster)."""
    d = _new(Decision)
    _setattr(d, "__dict__", {
        "allowed": allowed, "remaining": remaining, "limit": limit,
        "retry_after_ns": retry_after_ns, "reset_after_ns": reset_after_ns,
        "delay_ns": delay_ns, "degraded": degraded, "shadow_denied": shadow_denied, "outage": outage,
        "fails_closed": fails_closed, "limits": limits, "bound": bound,
    })
    return d


#: The decision of a request the sidecar could not be asked about, by policy.
DEGRADED_OPEN = Decision(True, 0, 0, -1, 0, 0, degraded=True)
DEGRADED_CLOSED = Decision(False, 0, 0, -1, 0, 0, degraded=True)
#: The decision of a request the sidecar could not be asked about, on a limit the sidecar said
#: fails closed, whatever the policy but "raise".
DEGRADED_FAILS_CLOSED = Decision(False, 0, 0, -1, 0, 0, degraded=True, outage="closed", fails_closed=True)


@dataclass(frozen=True)
class Lease(Decision):
    """The answer to a lease of a :class:`~sluice.Concurrency` limit: a Decision and the lease's id.

    ``bool(lease)`` is ``lease.allowed``. ``remaining`` is the slots still
    free, ``limit`` the limit's, ``retry_after`` (denied) when the earliest
    held lease expires at the latest (a release may free a slot sooner).

    Attributes:
        id: the lease's id, to give to ``client.release``; 0 when denied, and
            for a lease the ``on_unavailable`` policy granted (``degraded``):
            there is nothing to release then.
    """

    id: int = 0


def make_lease(d: Decision, lease_id: int) -> Lease:
    """The Lease of a decision and a lease id."""
    v = _new(Lease)
    _setattr(v, "__dict__", dict(d.__dict__, id=lease_id))
    return v


#: The lease of a request the sidecar could not be asked about, by policy: nothing to release.
DEGRADED_OPEN_LEASE = Lease(True, 0, 0, -1, 0, 0, degraded=True)
DEGRADED_CLOSED_LEASE = Lease(False, 0, 0, -1, 0, 0, degraded=True)


@dataclass(frozen=True)
class Released:
    """The answer to a release: whether the lease was held (and its slot is free now), and the
    limit as peek reports it afterwards. ``bool(r)`` is ``r.released``."""

    released: bool  #: False: the sidecar held no such lease (unknown, already released, or expired)
    decision: Decision

    def __bool__(self) -> bool:
        return self.released


@dataclass(frozen=True)
class MultiDecision:
    """The answer to a multi: ``allowed`` iff every item was allowed (and so consumed).

    ``decisions`` holds one Decision per item, in the request's order; if
    any item was denied nothing was consumed. ``bool(m)`` is ``m.allowed``.
    A sidecar of protocol version 7 gives each item's decision ``outage``
    and ``fails_closed`` as an acquire of the item would get them (a multi
    of global limits is decided by the strictest of its items' outage
    policies while Redis does not answer), and the client remembers, per
    item name, whether it fails closed: when the sidecar does not answer a
    multi with such an item, ``on_unavailable`` denies it.
    """

    allowed: bool
    decisions: Tuple[Decision, ...]
    degraded: bool = False

    def __bool__(self) -> bool:
        return self.allowed

    def __len__(self) -> int:
        return len(self.decisions)

    def __getitem__(self, i: int) -> Decision:
        return self.decisions[i]

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)


class MultiItem(NamedTuple):
    """One acquire of a multi. Plain tuples ``(key, limit[, cost[, strict]])`` work too."""

    key: Union[str, bytes]
    limit: Union[Limit, str]
    cost: int = 1
    strict: bool = False


@dataclass(frozen=True)
class Hello:
    """The sidecar's protocol version, limits and table geometry (HELLO)."""

    version: int  #: the protocol version the server speaks
    max_frame: int  #: the largest frame length field it accepts
    max_batch: int  #: the most operations per frame
    max_key: int  #: the longest key, in bytes
    max_multi: int  #: the most items per multi
    slot_count: int  #: slots in the table: the most buckets it can hold
    slot_size: int  #: bytes per slot; 128 or 256 keep keys inline (scan)


@dataclass(frozen=True)
class ScanEntry:
    """One bucket listed by scan: its key, its algorithm, and when it is fresh again."""

    key: bytes
    algorithm: Algorithm
    fresh_at_ns: int  #: Unix ns from which the bucket is back to its fresh state (reclaimable)

    @property
    def fresh_at(self) -> float:
        """``fresh_at_ns`` as Unix seconds."""
        return self.fresh_at_ns / _NS

    @property
    def key_text(self) -> str:
        """The key decoded as UTF-8 (undecodable bytes as surrogate escapes)."""
        return self.key.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class ScanPage:
    """One page of a scan: its entries and the cursor to continue from (0: complete)."""

    next: int
    entries: Tuple[ScanEntry, ...]


class Register(NamedTuple):
    """The answer to a register operation (protocol version 6; REGGET, REGSET, REGCAS, REGDEL),
    which this client decodes but does not send."""

    ok: bool  #: REGGET: it exists; REGSET: it was set; REGCAS: it was swapped; REGDEL: it existed
    value: int  #: the register's value after the operation; 0 if it does not exist
    ttl_ns: int  #: ns until it expires; -1 if it does not exist
    now_ns: int  #: the server's clock, Unix ns, when it decided


#: A STATS answer: counter name to value. The names are the server's and may change.
Stats = Dict[str, int]

#: What a decoded result holds, by opcode: Hello, None (PING), Decision
#: (ACQUIRE, PEEK, REFUND), Lease (LEASE), Released (RELEASE), bool (RESET:
#: existed), MultiDecision, ScanPage, Stats.
Value = Union[Hello, None, Decision, Lease, Released, bool, MultiDecision, ScanPage, Stats, Register, Any]
