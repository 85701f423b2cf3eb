"""Limits: an algorithm and its parameters, as small immutable values.

One class per algorithm, each a frozen dataclass::

    TokenBucket(max, refill_time, refill_amount=None)  # refill_amount defaults to max
    GCRA(burst, count, period)
    FixedWindow(limit, window)
    SlidingWindow(limit, window)
    Pacer(rate, period, max_delay)
    SlidingLog(limit, window)                                   # protocol version 3
    WindowCounters(limit, window, counters=60, count_denied=False)  # protocol version 3
    Concurrency(limit, lease)                                   # protocol version 3: lease/release
    Quota(limit, period, tz="UTC", anchor=0, week_start="monday")  # protocol version 5

Every one also takes a keyword-only ``shadow=True`` (the spec's
``shadow=true``): an acquire of such a limit is a shadow request, as
``acquire(..., shadow=True)``; the other operations ignore it.
``dataclasses.replace(limit, shadow=True)`` gives a shadowed copy.

Durations may be a :class:`datetime.timedelta`, a number of seconds (int,
float, Decimal, Fraction) or a duration string ("1h30m", "250ms", "1d"); they
are stored as exact integer nanoseconds in the ``*_ns`` fields (a timedelta
through its integer fields, a float through its exact binary value, rounded
to the nearest nanosecond), and read back as float seconds through the
property of the plain name (``limit.window`` is seconds,
``limit.window_ns`` nanoseconds).

``Limit.parse(spec)`` reads the textual form shared with the Go side
(proto/doc.go, "Limit spec") and ``str(limit)`` writes its canonical form;
both follow proto's ``ParseLimit`` and ``Limit.String`` rule for rule, and
parse errors carry the same messages. Like ``ParseLimit``, the classes check
syntax and ranges only (integers, int64, not negative); the sidecar decides
whether the values make a usable limit and answers :class:`InvalidLimit`
if not.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from numbers import Real
from typing import Any, ClassVar, Dict, NamedTuple, Optional, Tuple, Type, Union

from ._gotime import MAX_INT64, format_duration, parse_duration, quote
from .errors import InvalidLimit

#: What a duration may be given as: a timedelta, seconds, or a Go duration string.
DurationLike = Union[datetime.timedelta, int, float, Decimal, Real, str]

_NS_PER_S = 1_000_000_000


class Algorithm(enum.IntEnum):
    """A limiter algorithm: the first byte of a limit on the wire."""

    TOKEN_BUCKET = 1
    GCRA = 2
    FIXED_WINDOW = 3
    SLIDING_WINDOW = 4
    PACER = 5
    SLIDING_LOG = 6  #: protocol version 3
    WINDOW_COUNTERS = 7  #: protocol version 3
    CONCURRENCY = 8  #: protocol version 3
    QUOTA = 9  #: protocol version 5

    @property
    def version(self) -> int:
        """The protocol version that introduced the algorithm: a frame of an older one cannot carry it."""
        if self == Algorithm.QUOTA:
            return 5
        return 3 if self >= Algorithm.SLIDING_LOG else 1

    @property
    def spec_name(self) -> str:
        """The algorithm's name in limit specs: ``"token_bucket"``."""
        return self.name.lower()

    def __str__(self) -> str:
        return self.spec_name


def duration_ns(value: DurationLike, name: str = "duration") -> int:
    """Convert a duration to integer nanoseconds, exactly.

    A timedelta converts through its integer days, seconds and microseconds;
    an int is whole seconds; a float, Decimal or Fraction is seconds, rounded
    to the nearest nanosecond from its exact value; a str is a duration
    ("1h30m", "1d") or a bare integer of nanoseconds, as in a limit spec. Raises
    :class:`InvalidLimit` for a negative value, one past int64 nanoseconds,
    or anything else.
    """
    if isinstance(value, datetime.timedelta):
        ns = ((value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds) * 1000
    elif isinstance(value, bool):
        raise InvalidLimit(f"{name}: want a duration, got {value!r}")
    elif isinstance(value, int):
        ns = value * _NS_PER_S
    elif isinstance(value, str):
        v = _parse_value(value, True)
        if isinstance(v, str):
            raise InvalidLimit(f"{name}: {v}")
        ns = v
    elif isinstance(value, (Real, Decimal)):
        try:
            ns = round(Fraction(value) * _NS_PER_S)  # type: ignore[arg-type]
        except (ValueError, OverflowError, TypeError):
            raise InvalidLimit(f"{name}: want a duration, got {value!r}") from None
    else:
        raise InvalidLimit(f"{name}: want a timedelta, seconds or a Go duration, got {value!r}")
    if ns < 0:
        raise InvalidLimit(f"{name}: negative duration {value!r}")
    if ns > MAX_INT64:
        raise InvalidLimit(f"{name}: {value!r} is longer than int64 nanoseconds")
    return ns


def _count(value: Any, name: str) -> int:
    """Check an integer parameter: an int (not a bool), 0..MaxInt64."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLimit(f"{name}: want an integer, got {value!r}")
    if value < 0:
        raise InvalidLimit(f"{name}: negative value {value}")
    if value > MAX_INT64:
        raise InvalidLimit(f"{name}: integer out of range {value}")
    return int(value)


def _bool(value: Any, name: str) -> bool:
    """Check a flag parameter: a bool."""
    if not isinstance(value, bool):
        raise InvalidLimit(f"{name}: want a bool, got {value!r}")
    return value


_object_setattr = object.__setattr__

#: A window_counters limit's p2 packs counters (bits 0-7) and count_denied (bit 8); its other
#: bits must be 0 (proto.CountersMask, proto.CountDeniedBit).
COUNTERS_MASK = 0xFF
COUNT_DENIED_BIT = 1 << 8
#: window_counters' counters when a spec or the constructor leaves them out.
DEFAULT_COUNTERS = 60

# How a spec parameter is written and where the wire keeps it (proto's paramKind).
_INT, _DURATION, _COUNTERS, _BOOL = "int", "duration", "counters", "bool"
_CALENDAR, _ANCHOR, _WEEKDAY, _ZONE = "calendar", "anchor", "weekday", "zone"

#: A quota's p1 is its period: the unit in bits 0-7, how many units in bits 8-63; its p2 the
#: anchor in bits 0-7 and the week's first day (days after Monday) in bits 8-15
#: (proto.QuotaUnitMask, QuotaEveryShift, QuotaAnchorMask, QuotaWeekStartShift, QuotaBits).
QUOTA_UNITS = ("", "day", "week", "month", "year")
QUOTA_EVERY_SHIFT = 8
QUOTA_WEEK_START_SHIFT = 8
QUOTA_BITS = 0xFFFF
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: The longest time zone name a quota may carry, in bytes (proto.MaxZoneLen).
MAX_ZONE_LEN = 64


class _Param(NamedTuple):
    """One parameter of a limit spec: its name, the wire parameter (0..2) holding it, how, and
    whether a spec may leave it out."""

    name: str
    p: int
    kind: str
    optional: bool = False


class Limit:
    """An algorithm and its three wire parameters; the base of the limit classes.

    Instances are immutable, hashable and compare by value. ``str(limit)``
    is the canonical spec; ``Limit.parse`` reads any spec back.
    """

    algorithm: ClassVar[Algorithm]
    #: The fields holding p0, p1, p2 on the wire; "" for a parameter the algorithm does not use.
    _fields: ClassVar[Tuple[str, str, str]]
    #: The spec names of the parameters, "" for an unused one.
    _params: ClassVar[Tuple[str, str, str]]
    _durations: ClassVar[Tuple[bool, bool, bool]]
    #: The spec's parameters in canonical (wire) order; built from _params and _durations
    #: unless a class packs several into one wire parameter (window_counters).
    _spec: ClassVar[Tuple[_Param, ...]] = ()

    #: (algorithm, p0, p1, p2), set once by every constructor: what the wire carries.
    _wire: Tuple[int, int, int, int]
    #: The spec's ``shadow=true``, which any algorithm's spec may carry: an acquire of the limit
    #: is a shadow request (a denial answered as allowed and ``shadow_denied``), as
    #: ``acquire(..., shadow=True)``. It is not part of the wire limit, and the other operations
    #: ignore it. A :class:`Named` limit has none (the sidecar's config may mark it shadow).
    shadow: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_spec" not in cls.__dict__ and "_params" in cls.__dict__:
            refill_amount = cls.__dict__.get("algorithm") == Algorithm.TOKEN_BUCKET  # defaults to max
            cls._spec = tuple(_Param(n, i, _DURATION if d else _INT, refill_amount and i == 2)
                              for i, (n, d) in enumerate(zip(cls._params, cls._durations)) if n)

    def __init__(self) -> None:
        raise TypeError("Limit is abstract: use TokenBucket, GCRA, FixedWindow, SlidingWindow, "
                        "Pacer, SlidingLog, WindowCounters, Concurrency or Limit.parse")

    def _set(self, *values: int, shadow: bool = False) -> None:
        for field, v in zip(self._fields, values):
            if field:
                _object_setattr(self, field, v)
        p = tuple(values) + (0,) * (3 - len(values))
        _object_setattr(self, "_wire", (int(self.algorithm),) + p)
        _object_setattr(self, "shadow", shadow)

    @property
    def params(self) -> Tuple[int, int, int]:
        """p0, p1, p2 as on the wire: durations in nanoseconds, 0 for an unused parameter."""
        return self._wire[1:]

    @staticmethod
    def parse(spec: str) -> Limit:
        """Parse a limit spec, "ALGORITHM:name=value,...", as proto's ParseLimit.

        Raises :class:`InvalidLimit` with the message ParseLimit gives, e.g.
        ``invalid limit: limit "gcra:burst=x,count=1,period=1s": burst: invalid integer "x"``.
        """
        return parse_limit(spec)

    @staticmethod
    def from_wire(algorithm: int, p0: int, p1: int, p2: int, tz: str = "") -> Limit:
        """Build the limit a wire limit holds, without checking the values.

        Raises :class:`InvalidLimit` for an algorithm outside 1..9, or a
        non-zero parameter the algorithm does not use, or bits of a
        window_counters p2 outside counters and count_denied, or of a quota's
        outside anchor and week_start (which the sidecar would reject as
        well). ``tz`` is a quota's time zone ("" for UTC).
        """
        cls = _CLASSES.get(algorithm)
        if cls is None:
            raise InvalidLimit(f"invalid limit: unknown algorithm {algorithm}")
        if cls is Quota:
            unit = p1 & 0xFF
            if not 1 <= unit < len(QUOTA_UNITS) or p1 >> QUOTA_EVERY_SHIFT < 1 or p2 & ~QUOTA_BITS or \
                    p2 >> QUOTA_WEEK_START_SHIFT >= len(WEEKDAYS):
                raise InvalidLimit(f"invalid limit: quota period {p1} or anchor and week_start {p2} out of range")
            obj = object.__new__(cls)
            obj._set(p0, p1, p2, tz=tz)
            return obj
        if cls is WindowCounters:
            if p2 & ~(COUNTERS_MASK | COUNT_DENIED_BIT):
                raise InvalidLimit(f"invalid limit: window_counters p2 {p2} sets bits other than counters "
                                   "(0-7) and count_denied (8)")
        elif not cls._fields[2] and p2 != 0:
            raise InvalidLimit(f"invalid limit: {cls.algorithm.spec_name} does not use p2, got {p2}")
        obj = object.__new__(cls)
        obj._set(p0, p1, p2)
        return obj

    def _spec_values(self) -> Tuple[Tuple[_Param, Any], ...]:
        """Each spec parameter shown in the canonical form, with its value: an int (durations
        in ns), or True for count_denied, which is shown only when true."""
        out = []
        for sp in self._spec:
            v = self._wire[1 + sp.p]
            if sp.kind == _COUNTERS:
                v &= COUNTERS_MASK
            elif sp.kind == _BOOL:
                if not v & COUNT_DENIED_BIT:
                    continue
                v = True
            out.append((sp, v))
        return tuple(out)

    def __str__(self) -> str:
        parts = []
        for sp, v in self._spec_values():
            if sp.kind == _DURATION:
                parts.append(f"{sp.name}={format_duration(v)}")
            elif sp.kind == _BOOL:
                parts.append(f"{sp.name}=true")
            else:
                parts.append(f"{sp.name}={v}")
        if self.shadow:
            parts.append("shadow=true")
        return f"{self.algorithm.spec_name}:{','.join(parts)}"

    def __repr__(self) -> str:
        # Durations as Go duration strings, which the constructors accept: the
        # repr rebuilds the same limit to the nanosecond.
        args = []
        for sp, v in self._spec_values():
            args.append(f"{sp.name}={format_duration(v)!r}" if sp.kind == _DURATION else f"{sp.name}={v!r}")
        if self.shadow:
            args.append("shadow=True")
        return f"{type(self).__name__}({', '.join(args)})"


def _seconds(ns: int) -> float:
    return ns / _NS_PER_S


@dataclass(frozen=True, init=False, repr=False)
class TokenBucket(Limit):
    """token_bucket: a bucket of ``max`` tokens that gains ``refill_amount`` every ``refill_time``.

    As smyte/ratelimit: a new bucket is full; refill is discrete (whole
    ``refill_time`` steps); a request is allowed iff the bucket holds at
    least its cost. ``refill_amount`` defaults to ``max``. The bucket's
    identity includes all three parameters.
    """

    max: int
    refill_time_ns: int
    refill_amount: int
    shadow: bool = False

    algorithm = Algorithm.TOKEN_BUCKET
    _fields = ("max", "refill_time_ns", "refill_amount")
    _params = ("max", "refill_time", "refill_amount")
    _durations = (False, True, False)

    def __init__(self, max: int, refill_time: Optional[DurationLike] = None,
                 refill_amount: Optional[int] = None, *, refill_time_ns: Optional[int] = None,
                 shadow: bool = False) -> None:
        m = _count(max, "max")
        ns = _ns_arg(refill_time, refill_time_ns, "refill_time")
        amount = m if refill_amount is None else _count(refill_amount, "refill_amount")
        self._set(m, ns, amount, shadow=_bool(shadow, "shadow"))

    @property
    def refill_time(self) -> float:
        """Seconds between refills."""
        return _seconds(self.refill_time_ns)


@dataclass(frozen=True, init=False, repr=False)
class GCRA(Limit):
    """gcra: ``count`` requests per ``period``, with bursts of ``burst + 1``.

    redis-cell's generic cell rate algorithm. The parameters are not part of
    the bucket's identity: a tenant's limit may change without a reset.
    """

    burst: int
    count: int
    period_ns: int
    shadow: bool = False

    algorithm = Algorithm.GCRA
    _fields = ("burst", "count", "period_ns")
    _params = ("burst", "count", "period")
    _durations = (False, False, True)

    def __init__(self, burst: int, count: int, period: Optional[DurationLike] = None, *,
                 period_ns: Optional[int] = None, shadow: bool = False) -> None:
        self._set(_count(burst, "burst"), _count(count, "count"), _ns_arg(period, period_ns, "period"),
                  shadow=_bool(shadow, "shadow"))

    @property
    def period(self) -> float:
        """Seconds in which ``count`` requests are allowed."""
        return _seconds(self.period_ns)


@dataclass(frozen=True, init=False, repr=False)
class _Window(Limit):
    """The parameters both window algorithms share."""

    limit: int
    window_ns: int
    shadow: bool = False

    _fields = ("limit", "window_ns", "")
    _params = ("limit", "window", "")
    _durations = (False, True, False)

    def __init__(self, limit: int, window: Optional[DurationLike] = None, *,
                 window_ns: Optional[int] = None, shadow: bool = False) -> None:
        self._set(_count(limit, "limit"), _ns_arg(window, window_ns, "window"), 0, shadow=_bool(shadow, "shadow"))

    @property
    def window(self) -> float:
        """The window's length in seconds."""
        return _seconds(self.window_ns)


@dataclass(frozen=True, init=False, repr=False)
class FixedWindow(_Window):
    """fixed_window: ``limit`` tokens per ``window``, windows aligned to the Unix epoch."""

    algorithm = Algorithm.FIXED_WINDOW


@dataclass(frozen=True, init=False, repr=False)
class SlidingWindow(_Window):
    """sliding_window: ``limit`` tokens over any ``window``, the two-window weighted counter."""

    algorithm = Algorithm.SLIDING_WINDOW


@dataclass(frozen=True, init=False, repr=False)
class Pacer(Limit):
    """pacer: ``rate`` events per ``period``, evenly spaced; a request may wait up to ``max_delay``.

    The leaky bucket as a queue: each request gets the next free slot and
    its decision's ``delay`` says how long to wait before acting.
    """

    rate: int
    period_ns: int
    max_delay_ns: int
    shadow: bool = False

    algorithm = Algorithm.PACER
    _fields = ("rate", "period_ns", "max_delay_ns")
    _params = ("rate", "period", "max_delay")
    _durations = (False, True, True)

    def __init__(self, rate: int, period: Optional[DurationLike] = None,
                 max_delay: Optional[DurationLike] = None, *, period_ns: Optional[int] = None,
                 max_delay_ns: Optional[int] = None, shadow: bool = False) -> None:
        self._set(_count(rate, "rate"), _ns_arg(period, period_ns, "period"),
                  _ns_arg(max_delay, max_delay_ns, "max_delay"), shadow=_bool(shadow, "shadow"))

    @property
    def period(self) -> float:
        """Seconds in which ``rate`` events are spaced."""
        return _seconds(self.period_ns)

    @property
    def max_delay(self) -> float:
        """The longest wait, in seconds, a request may be given."""
        return _seconds(self.max_delay_ns)


@dataclass(frozen=True, init=False, repr=False)
class SlidingLog(_Window):
    """sliding_log: ``limit`` tokens over any ``window``, exactly, from a log of the requests' times
    (protocol version 3)."""

    algorithm = Algorithm.SLIDING_LOG


@dataclass(frozen=True, init=False, repr=False)
class WindowCounters(Limit):
    """window_counters: ``limit`` tokens over any ``window``, counted in ``counters`` sub-windows
    (protocol version 3).

    ``counters`` defaults to 60 (the sidecar accepts 1 to 64); with
    ``count_denied`` a denied request counts too. The wire packs both into
    its third parameter: ``counters | count_denied << 8``.
    """

    limit: int
    window_ns: int
    counters: int
    count_denied: bool
    shadow: bool = False

    algorithm = Algorithm.WINDOW_COUNTERS
    _fields = ("limit", "window_ns", "")
    _params = ("limit", "window", "")
    _durations = (False, True, False)
    _spec = (_Param("limit", 0, _INT), _Param("window", 1, _DURATION),
             _Param("counters", 2, _COUNTERS, True), _Param("count_denied", 2, _BOOL, True))

    def __init__(self, limit: int, window: Optional[DurationLike] = None, counters: int = DEFAULT_COUNTERS,
                 count_denied: bool = False, *, window_ns: Optional[int] = None, shadow: bool = False) -> None:
        n = _count(counters, "counters")
        if n > COUNTERS_MASK:
            raise InvalidLimit(f"counters: {n} out of range, want 0..255")
        denied = COUNT_DENIED_BIT if _bool(count_denied, "count_denied") else 0
        self._set(_count(limit, "limit"), _ns_arg(window, window_ns, "window"), n | denied,
                  shadow=_bool(shadow, "shadow"))

    def _set(self, *values: int, shadow: bool = False) -> None:
        limit, window_ns, p2 = values
        _object_setattr(self, "limit", limit)
        _object_setattr(self, "window_ns", window_ns)
        _object_setattr(self, "counters", p2 & COUNTERS_MASK)
        _object_setattr(self, "count_denied", bool(p2 & COUNT_DENIED_BIT))
        _object_setattr(self, "_wire", (int(self.algorithm), limit, window_ns, p2))
        _object_setattr(self, "shadow", shadow)

    @property
    def window(self) -> float:
        """The window's length in seconds."""
        return _seconds(self.window_ns)


@dataclass(frozen=True, init=False, repr=False)
class Concurrency(Limit):
    """concurrency: at most ``limit`` leases held at once (protocol version 3).

    Taken with ``client.lease`` (or ``client.concurrency``) and given back
    with ``client.release``; a lease never released (its holder crashed)
    expires ``lease`` after it was taken. ``peek`` and ``reset`` work on it;
    ``acquire``, ``refund`` and ``multi`` do not (:class:`InvalidLimit`).
    """

    limit: int
    lease_ns: int
    shadow: bool = False

    algorithm = Algorithm.CONCURRENCY
    _fields = ("limit", "lease_ns", "")
    _params = ("limit", "lease", "")
    _durations = (False, True, False)

    def __init__(self, limit: int, lease: Optional[DurationLike] = None, *, lease_ns: Optional[int] = None,
                 shadow: bool = False) -> None:
        self._set(_count(limit, "limit"), _ns_arg(lease, lease_ns, "lease"), 0, shadow=_bool(shadow, "shadow"))

    @property
    def lease(self) -> float:
        """Seconds after which a lease not released expires."""
        return _seconds(self.lease_ns)


def _parse_period(s: str) -> Union[int, str]:
    """A quota's period, an optional multiple and a unit ("day", "2week"), as its p1, or what is
    wrong with it (Go's parseCalendar)."""
    i = 0
    while i < len(s) and s[i] in "0123456789":
        i += 1
    every = 1
    if i:
        every = int(s[:i])
        if every > MAX_INT64 >> QUOTA_EVERY_SHIFT:
            return f"multiple out of range {quote(s)}"
    if s[i:] in QUOTA_UNITS[1:]:
        return QUOTA_UNITS.index(s[i:]) | every << QUOTA_EVERY_SHIFT
    return f"invalid period {quote(s)}, want day, week, month or year, or a multiple such as 2week"


def _check_zone(s: str) -> str:
    """What is wrong with ``s`` as a time zone's name, "" if nothing (Go's checkZone)."""
    if not 1 <= len(s) <= MAX_ZONE_LEN:
        return f"time zone name of {len(s.encode())} bytes, want 1 to {MAX_ZONE_LEN}"
    if not all(c.isascii() and (c.isalnum() or c in "/_-+.") for c in s):
        return f"invalid time zone name {quote(s)}"
    return ""


@dataclass(frozen=True, init=False, repr=False)
class Quota(Limit):
    """quota: ``limit`` tokens per period of a calendar in a time zone (protocol version 5).

    ``period`` is ``"day"``, ``"week"``, ``"month"`` or ``"year"``, or a multiple (``"2week"``,
    ``"3month"``); ``tz`` an IANA zone name (``"Europe/Paris"``; default UTC); ``anchor`` the
    day of the month months and years start on (1-31; a shorter month starts on its last day;
    0 means 1); ``week_start`` the first day of a week (``"monday"``, the default, to
    ``"sunday"``). A period starts at the first instant of its local day, so a day lasts 23 or
    25 hours across a DST change. A quota goes to the sidecar in a frame of protocol version
    5 (its limit field carries the zone's name), which a sidecar of an older version refuses
    (BadVersion).
    """

    limit: int
    period: str
    tz: str
    anchor: int
    week_start: str
    shadow: bool = False

    algorithm = Algorithm.QUOTA
    _fields = ("limit", "", "")
    _params = ("limit", "period", "")
    _durations = (False, False, False)
    _spec = (_Param("limit", 0, _INT), _Param("period", 1, _CALENDAR), _Param("tz", -1, _ZONE, True),
             _Param("anchor", 2, _ANCHOR, True), _Param("week_start", 2, _WEEKDAY, True))

    def __init__(self, limit: int, period: str, tz: str = "UTC", anchor: int = 0, week_start: str = "monday",
                 *, shadow: bool = False) -> None:
        p1 = _parse_period(period) if isinstance(period, str) else "want a str"
        if isinstance(p1, str):
            raise InvalidLimit(f"period: {p1}")
        if not isinstance(tz, str) or _check_zone(tz):
            raise InvalidLimit(f"tz: {_check_zone(tz) if isinstance(tz, str) else 'want a str'}")
        a = _count(anchor, "anchor")
        if a > 0xFF:
            raise InvalidLimit(f"anchor: {a} out of range, want 0..255")
        if week_start not in WEEKDAYS:
            raise InvalidLimit(f"week_start: invalid day {week_start!r}, want monday, tuesday, ... or sunday")
        self._set(_count(limit, "limit"), p1, a | WEEKDAYS.index(week_start) << QUOTA_WEEK_START_SHIFT,
                  shadow=_bool(shadow, "shadow"), tz="" if tz == "UTC" else tz)

    def _set(self, *values: int, shadow: bool = False, tz: str = "") -> None:
        limit, p1, p2 = values
        unit, every = p1 & 0xFF, p1 >> QUOTA_EVERY_SHIFT
        name = QUOTA_UNITS[unit] if 1 <= unit < len(QUOTA_UNITS) else f"unit{unit}"
        _object_setattr(self, "limit", limit)
        _object_setattr(self, "period", name if every == 1 else f"{every}{name}")
        _object_setattr(self, "tz", tz or "UTC")
        _object_setattr(self, "anchor", p2 & 0xFF)
        ws = p2 >> QUOTA_WEEK_START_SHIFT & 0xFF
        _object_setattr(self, "week_start", WEEKDAYS[ws] if ws < len(WEEKDAYS) else str(ws))
        _object_setattr(self, "_wire", (int(self.algorithm), limit, p1, p2))
        _object_setattr(self, "_tz", tz)
        _object_setattr(self, "shadow", shadow)

    def _spec_values(self) -> Tuple[Tuple[_Param, Any], ...]:
        out = []
        for sp in self._spec:
            if sp.kind == _ZONE:
                if self._tz:
                    out.append((sp, self._tz))
                continue
            v = self._wire[1 + sp.p]
            if sp.kind == _CALENDAR:
                v = self.period
            elif sp.kind == _ANCHOR:
                if not v & 0xFF:
                    continue
                v &= 0xFF
            elif sp.kind == _WEEKDAY:
                if not v >> QUOTA_WEEK_START_SHIFT & 0xFF:
                    continue
                v = self.week_start
            out.append((sp, v))
        return tuple(out)

    def __repr__(self) -> str:
        args = [f"{sp.name}={v!r}" for sp, v in self._spec_values()]
        if self.shadow:
            args.append("shadow=True")
        return f"Quota({', '.join(args)})"


#: The longest name of a named limit, in bytes (proto.MaxNameLen).
MAX_NAME_LEN = 64


def valid_name(name: str) -> bool:
    """Whether ``name`` can name a limit: 1 to 64 ASCII letters, digits, '_', '-' and '.', starting
    with a letter (proto.ValidName)."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LEN or not name.isascii():
        return False
    return name[0].isalpha() and all(c.isalnum() or c in "_-." for c in name)


@dataclass(frozen=True, init=False, repr=False)
class Named(Limit):
    """A limit the sidecar's config file defines, by its name (protocol version 2).

    ``Named("login")``, or the spec ``"login"`` (a spec without ``:``): the
    sidecar decides with the limit its configuration gives that name, and
    refuses a name it does not know (:class:`InvalidLimit`). A name has no
    parameters, so no ``shadow`` (always False): the config's ``shadow: true``
    (or its spec's ``shadow=true``) makes the sidecar answer every request to
    the name as a shadow request.
    """

    name: str

    _fields = ("", "", "")
    _params = ("", "", "")
    _durations = (False, False, False)

    def __init__(self, name: str) -> None:
        if not valid_name(name):
            raise InvalidLimit(f"invalid limit: {name!r} is not a limit's name: want 1 to {MAX_NAME_LEN} "
                               "letters, digits, '_', '-' and '.', starting with a letter")
        _object_setattr(self, "name", name)
        _object_setattr(self, "_wire", (0, 0, 0, 0))

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Named({self.name!r})"


def _ns_arg(value: Optional[DurationLike], ns: Optional[int], name: str) -> int:
    """A duration given as a value or as ``<name>_ns`` (what dataclasses.replace passes)."""
    if ns is not None:
        if value is not None:
            raise TypeError(f"give {name} or {name}_ns, not both")
        return _count(ns, name + "_ns")
    if value is None:
        raise TypeError(f"missing {name}")
    return duration_ns(value, name)


_CLASSES: Dict[int, Type[Limit]] = {
    c.algorithm: c for c in (TokenBucket, GCRA, FixedWindow, SlidingWindow, Pacer, SlidingLog, WindowCounters,
                             Concurrency, Quota)
}
_BY_NAME: Dict[str, Type[Limit]] = {c.algorithm.spec_name: c for c in _CLASSES.values()}


def _is_integer(s: str) -> bool:
    """An optional sign and one or more ASCII digits (Go's isInteger)."""
    if s[:1] in ("+", "-"):
        s = s[1:]
    return s != "" and all(c in "0123456789" for c in s)


def _parse_value(s: str, duration: Union[bool, str]) -> Union[int, str]:
    """A parameter value, as the bits it puts in its wire parameter, or what is wrong with it
    (Go's parseValue). ``duration`` is a kind (_INT, _DURATION, _COUNTERS, _BOOL), or a bool:
    a duration or an integer."""
    kind = duration if isinstance(duration, str) else _DURATION if duration else _INT
    if kind == _CALENDAR:
        return _parse_period(s)
    if kind == _WEEKDAY:
        if s in WEEKDAYS:
            return WEEKDAYS.index(s) << QUOTA_WEEK_START_SHIFT
        return f"invalid day {quote(s)}, want monday, tuesday, ... or sunday"
    if kind == _BOOL:
        if s == "true":
            return COUNT_DENIED_BIT
        if s == "false":
            return 0
        return f"invalid boolean {quote(s)}, want true or false"
    if _is_integer(s):
        v = int(s)
        if not -(1 << 63) <= v <= MAX_INT64:
            return f"integer out of range {quote(s)}"
    elif kind == _DURATION:
        d = parse_duration(s)
        if d is None:
            return f"invalid duration {quote(s)}"
        v = d
    else:
        return f"invalid integer {quote(s)}"
    if v < 0:
        return f"negative value {s}"
    if kind in (_COUNTERS, _ANCHOR) and v > COUNTERS_MASK:
        return f"value {s} out of range, want 0..255"
    return v


def parse_limit(spec: str) -> Limit:
    """Parse a limit spec as proto's ParseLimit; see :meth:`Limit.parse`."""

    def fail(msg: str) -> InvalidLimit:
        return InvalidLimit(f"invalid limit: limit {quote(spec)}: {msg}")

    if not isinstance(spec, str):
        raise InvalidLimit(f"a limit spec is a str, got {spec!r}")
    name, colon, params = spec.partition(":")
    cls = _BY_NAME.get(name)
    if cls is None and not colon:
        # No parameters: the name of a limit in the sidecar's config file.
        if not valid_name(spec):
            raise fail("not a limit spec (ALGORITHM:name=value,...) nor a limit's name")
        return Named(spec)
    if cls is None:
        raise fail(f"unknown algorithm {quote(name)}")
    spec_params = cls._spec
    names = [sp.name for sp in spec_params]
    values = [0, 0, 0]
    tz = ""  # a quota's; not a wire parameter
    seen = [False] * len(spec_params)
    shadow: Optional[bool] = None  # every algorithm's; not one of _spec, not on the wire
    if colon:
        for p in params.split(","):
            key, eq, value = p.partition("=")
            if not eq:
                raise fail("empty parameter" if p == "" else f'{p}: missing "=value"')
            if key == "shadow":
                if shadow is not None:
                    raise fail(f"duplicate parameter {quote(key)}")
                if value not in ("true", "false"):
                    raise fail(f"shadow: invalid boolean {quote(value)}, want true or false")
                shadow = value == "true"
                continue
            i = names.index(key) if key in names else -1
            if i < 0:
                raise fail(f"unknown parameter {quote(key)} for {name} (want {', '.join(names)})")
            if seen[i]:
                raise fail(f"duplicate parameter {quote(key)}")
            seen[i] = True
            sp = spec_params[i]
            if sp.kind == _ZONE:
                msg = _check_zone(value)
                if msg:
                    raise fail(f"tz: {msg}")
                tz = "" if value == "UTC" else value
                continue
            v = _parse_value(value, sp.kind)
            if isinstance(v, str):
                raise fail(f"{key}: {v}")
            values[sp.p] |= v  # only window_counters' p2 holds two parameters, in distinct bits
    for i, sp in enumerate(spec_params):
        if seen[i]:
            continue
        if not sp.optional:
            raise fail(f"missing parameter {quote(sp.name)}")
        if cls is TokenBucket:
            values[2] = values[0]  # refill_amount defaults to max
        elif sp.kind == _COUNTERS:
            values[2] |= DEFAULT_COUNTERS
    obj = object.__new__(cls)
    if cls is Quota:
        obj._set(*values, shadow=bool(shadow), tz=tz)
    else:
        obj._set(*values, shadow=bool(shadow))
    return obj
