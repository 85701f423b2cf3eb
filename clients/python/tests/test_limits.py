"""Limits: constructors, durations, and the spec parser and formatter.

The ParseLimit tables are those of proto/limit_test.go, messages included:
both sides must read and print specs identically.
"""

from __future__ import annotations

import dataclasses
import datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from sluice import (
    GCRA, Concurrency, FixedWindow, InvalidLimit, Limit, Pacer, SlidingLog, SlidingWindow, TokenBucket,
    WindowCounters, duration_ns,
)
from sluice._gotime import format_duration, parse_duration, quote
from sluice import proto
from sluice.limits import Algorithm, Named, Quota

MAX = (1 << 63) - 1


@pytest.mark.parametrize("spec,want,canonical", [
    ("token_bucket:max=10,refill_time=1h,refill_amount=1", TokenBucket(10, 3600, 1),
     "token_bucket:max=10,refill_time=1h0m0s,refill_amount=1"),
    ("token_bucket:refill_time=1s,max=5", TokenBucket(5, 1, 5), "token_bucket:max=5,refill_time=1s,refill_amount=5"),
    ("gcra:burst=4,count=1,period=1s", GCRA(4, 1, 1), "gcra:burst=4,count=1,period=1s"),
    ("gcra:period=1500000000,count=+3,burst=0", GCRA(0, 3, 1.5), "gcra:burst=0,count=3,period=1.5s"),
    ("fixed_window:limit=100,window=1m", FixedWindow(100, 60), "fixed_window:limit=100,window=1m0s"),
    ("sliding_window:window=250ms,limit=7", SlidingWindow(7, 0.25), "sliding_window:limit=7,window=250ms"),
    ("pacer:rate=4,period=1s,max_delay=2s", Pacer(4, 1, 2), "pacer:rate=4,period=1s,max_delay=2s"),
    ("pacer:rate=0,period=0,max_delay=1ns", Pacer(0, 0, max_delay_ns=1), "pacer:rate=0,period=0s,max_delay=1ns"),
    ("pacer:rate=9223372036854775807,period=2562047h47m16.854775807s,max_delay=10us",
     Pacer(MAX, period_ns=MAX, max_delay_ns=10_000),
     "pacer:rate=9223372036854775807,period=2562047h47m16.854775807s,max_delay=10\u00b5s"),
    ("sliding_log:limit=100,window=1m", SlidingLog(100, 60), "sliding_log:limit=100,window=1m0s"),
    ("window_counters:limit=100,window=1h", WindowCounters(100, 3600), "window_counters:limit=100,window=1h0m0s,counters=60"),
    ("window_counters:count_denied=true,window=1h,counters=+12,limit=100", WindowCounters(100, 3600, 12, True),
     "window_counters:limit=100,window=1h0m0s,counters=12,count_denied=true"),
    ("window_counters:limit=1,window=1s,count_denied=false", WindowCounters(1, 1),
     "window_counters:limit=1,window=1s,counters=60"),
    ("window_counters:limit=1,window=1s,counters=0,count_denied=true", WindowCounters(1, 1, 0, True),
     "window_counters:limit=1,window=1s,counters=0,count_denied=true"),
    ("window_counters:limit=1,window=1s,counters=255", WindowCounters(1, 1, 255),
     "window_counters:limit=1,window=1s,counters=255"),
    ("concurrency:lease=30s,limit=10", Concurrency(10, 30), "concurrency:limit=10,lease=30s"),
    ("concurrency:limit=0,lease=0", Concurrency(0, 0), "concurrency:limit=0,lease=0s"),
])
def test_parse_limit(spec: str, want: Limit, canonical: str) -> None:
    got = Limit.parse(spec)
    assert got == want and type(got) is type(want)
    assert str(got) == canonical
    assert Limit.parse(str(got)) == got
    assert eval(repr(got), {type(got).__name__: type(got)}) == got  # the repr rebuilds the limit


@pytest.mark.parametrize("spec,want", [
    ("gcra:burst=x,count=1,period=1s", 'invalid limit: limit "gcra:burst=x,count=1,period=1s": burst: invalid integer "x"'),
    ("", "invalid limit: limit \"\": not a limit spec (ALGORITHM:name=value,...) nor a limit's name"),
    ("leaky:rate=1", 'invalid limit: limit "leaky:rate=1": unknown algorithm "leaky"'),
    ("GCRA:burst=1,count=1,period=1s", 'invalid limit: limit "GCRA:burst=1,count=1,period=1s": unknown algorithm "GCRA"'),
    ("gcra", 'invalid limit: limit "gcra": missing parameter "burst"'),
    ("gcra:", 'invalid limit: limit "gcra:": empty parameter'),
    ("gcra:burst=1,,count=1", 'invalid limit: limit "gcra:burst=1,,count=1": empty parameter'),
    ("gcra:burst=1,count=1", 'invalid limit: limit "gcra:burst=1,count=1": missing parameter "period"'),
    ("gcra:burst=1,count=1,period=1s,", 'invalid limit: limit "gcra:burst=1,count=1,period=1s,": empty parameter'),
    ("gcra:burst=1,count=1,period=1s,rate=2",
     'invalid limit: limit "gcra:burst=1,count=1,period=1s,rate=2": unknown parameter "rate" for gcra (want burst, count, period)'),
    ("gcra:burst=1,burst=2,count=1,period=1s",
     'invalid limit: limit "gcra:burst=1,burst=2,count=1,period=1s": duplicate parameter "burst"'),
    ("gcra:burst,count=1,period=1s", 'invalid limit: limit "gcra:burst,count=1,period=1s": burst: missing "=value"'),
    ("gcra:burst=-1,count=1,period=1s", 'invalid limit: limit "gcra:burst=-1,count=1,period=1s": burst: negative value -1'),
    ("gcra:burst=1,count=1,period=-1s", 'invalid limit: limit "gcra:burst=1,count=1,period=-1s": period: negative value -1s'),
    ("gcra:burst=1,count=1,period=1 s", 'invalid limit: limit "gcra:burst=1,count=1,period=1 s": period: invalid duration "1 s"'),
    ("gcra:burst=1,count=1s,period=1s", 'invalid limit: limit "gcra:burst=1,count=1s,period=1s": count: invalid integer "1s"'),
    ("gcra:burst=99999999999999999999,count=1,period=1s",
     'invalid limit: limit "gcra:burst=99999999999999999999,count=1,period=1s": burst: integer out of range "99999999999999999999"'),
    ("gcra:burst=1,count=1,period=99999999999999999999",
     'invalid limit: limit "gcra:burst=1,count=1,period=99999999999999999999": period: integer out of range "99999999999999999999"'),
    ("gcra:burst=1,count=1,period=3000000h",
     'invalid limit: limit "gcra:burst=1,count=1,period=3000000h": period: invalid duration "3000000h"'),
    ("fixed_window:limit=1,window=1s,p2=0",
     'invalid limit: limit "fixed_window:limit=1,window=1s,p2=0": unknown parameter "p2" for fixed_window (want limit, window)'),
    ("token_bucket:max=1, refill_time=1s",
     'invalid limit: limit "token_bucket:max=1, refill_time=1s": unknown parameter " refill_time" for token_bucket '
     '(want max, refill_time, refill_amount)'),
    ("window_counters:limit=1,window=1s,counters=256",
     'invalid limit: limit "window_counters:limit=1,window=1s,counters=256": counters: value 256 out of range, want 0..255'),
    ("window_counters:limit=1,window=1s,count_denied=1",
     'invalid limit: limit "window_counters:limit=1,window=1s,count_denied=1": count_denied: invalid boolean "1", '
     'want true or false'),
    ("window_counters:limit=1,window=1s,p2=1",
     'invalid limit: limit "window_counters:limit=1,window=1s,p2=1": unknown parameter "p2" for window_counters '
     '(want limit, window, counters, count_denied)'),
    ("concurrency:limit=1,window=1s",
     'invalid limit: limit "concurrency:limit=1,window=1s": unknown parameter "window" for concurrency (want limit, lease)'),
])
def test_parse_limit_errors(spec: str, want: str) -> None:
    with pytest.raises(InvalidLimit) as info:
        Limit.parse(spec)
    assert str(info.value) == want
    assert info.value.status == 6 and isinstance(info.value, ValueError)


def test_unparseable_limits_still_format() -> None:
    # Values only the wire can carry (the sidecar rejects them) print readably.
    assert str(Limit.from_wire(2, -1, 1, -1_000_000_000)) == "gcra:burst=-1,count=1,period=-1s"
    with pytest.raises(InvalidLimit):
        Limit.parse("gcra:burst=-1,count=1,period=-1s")
    with pytest.raises(InvalidLimit, match="unknown algorithm 10"):
        Limit.from_wire(10, 1, 2, 3)
    with pytest.raises(InvalidLimit, match="quota period"):
        Limit.from_wire(9, 1, 5 | 1 << 8, 0)
    with pytest.raises(InvalidLimit, match="does not use p2"):
        Limit.from_wire(3, 1, 2, 3)
    for alg in (6, 8):
        with pytest.raises(InvalidLimit, match="does not use p2"):
            Limit.from_wire(alg, 1, 2, 3)
    with pytest.raises(InvalidLimit, match="bits other than"):
        Limit.from_wire(7, 1, 2, 1 << 9)


def test_algorithms() -> None:
    assert [a.spec_name for a in Algorithm] == ["token_bucket", "gcra", "fixed_window", "sliding_window", "pacer",
                                                "sliding_log", "window_counters", "concurrency", "quota"]
    assert [a.version for a in Algorithm] == [1, 1, 1, 1, 1, 3, 3, 3, 5]
    for cls in (TokenBucket, GCRA, FixedWindow, SlidingWindow, Pacer, SlidingLog, WindowCounters, Concurrency):
        assert str(cls.algorithm) in str(Limit.parse(str(cls.algorithm) + ":" + ",".join(
            f"{p.name}={'true' if p.kind == 'bool' else 1}" for p in cls._spec)))


def test_version_3_limits() -> None:
    wc = WindowCounters(limit=100, window="1h", counters=12, count_denied=True)
    assert (wc.limit, wc.window, wc.counters, wc.count_denied) == (100, 3600.0, 12, True)
    assert wc.params == (100, 3_600_000_000_000, 12 | 256)
    assert WindowCounters(100, 3600).params[2] == 60
    assert dataclasses.replace(wc, counters=5) == WindowCounters(100, 3600, 5, True)
    assert [f.name for f in dataclasses.fields(wc)] == ["limit", "window_ns", "counters", "count_denied",
                                                      "shadow"]
    assert Limit.from_wire(7, 100, 3_600_000_000_000, 268) == wc
    c = Concurrency(limit=10, lease=datetime.timedelta(seconds=30))
    assert (c.limit, c.lease, c.lease_ns, c.params) == (10, 30.0, 30_000_000_000, (10, 30_000_000_000, 0))
    assert SlidingLog(5, 1) != SlidingWindow(5, 1) and SlidingLog(5, 1).params == (5, 1_000_000_000, 0)
    for lim in (wc, c, SlidingLog(5, "250ms"), WindowCounters(1, 1, 0)):
        assert eval(repr(lim), {type(lim).__name__: type(lim)}) == lim
        assert Limit.parse(str(lim)) == lim
    for bad in (lambda: WindowCounters(1, 1, 256), lambda: WindowCounters(1, 1, -1),
                lambda: WindowCounters(1, 1, 60, 1), lambda: Concurrency(-1, 1), lambda: Concurrency(1, -1)):  # type: ignore[arg-type]
        with pytest.raises(InvalidLimit):
            bad()


@pytest.mark.parametrize("value,ns", [
    (datetime.timedelta(hours=1), 3_600_000_000_000),
    (datetime.timedelta(days=1, microseconds=3), 86_400_000_003_000),
    (datetime.timedelta(days=106751, seconds=85636, microseconds=854775), 9_223_372_036_854_775_000),
    (1, 1_000_000_000),
    (0, 0),
    (0.1, 100_000_000),
    (1.5, 1_500_000_000),
    (1e-9, 1),
    (Decimal("0.000000001"), 1),
    (Decimal("2.5"), 2_500_000_000),
    (Fraction(1, 3), 333_333_333),
    ("1h30m", 5_400_000_000_000),
    ("250ms", 250_000_000),
    ("1500", 1500),  # a bare integer is nanoseconds, as in a spec
])
def test_duration_ns(value: object, ns: int) -> None:
    assert duration_ns(value) == ns  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, datetime.timedelta(seconds=-1), "-1s", float("nan"), float("inf"),
                                   True, None, "1 s", 9_223_372_037, [1]])
def test_duration_ns_refuses(value: object) -> None:
    with pytest.raises(InvalidLimit):
        duration_ns(value)  # type: ignore[arg-type]


def test_constructors() -> None:
    tb = TokenBucket(max=10, refill_time=datetime.timedelta(hours=1))
    assert (tb.max, tb.refill_time_ns, tb.refill_amount, tb.refill_time) == (10, 3_600_000_000_000, 10, 3600.0)
    assert tb == TokenBucket(10, "1h") == TokenBucket(10, 3600, 10) == Limit.parse("token_bucket:max=10,refill_time=1h")
    assert len({tb, TokenBucket(10, 3600.0), TokenBucket(10, 3600, 1)}) == 2
    assert tb.params == (10, 3_600_000_000_000, 10)
    assert dataclasses.replace(tb, max=20) == TokenBucket(20, 3600, 10)
    assert [f.name for f in dataclasses.fields(tb)] == ["max", "refill_time_ns", "refill_amount", "shadow"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tb.max = 3  # type: ignore[misc]
    g = GCRA(burst=4, count=1, period=1)
    assert (g.burst, g.count, g.period) == (4, 1, 1.0)
    assert FixedWindow(100, 60).window == 60.0 and SlidingWindow(100, 60).window_ns == 60_000_000_000
    p = Pacer(rate=4, period=1, max_delay=0.5)
    assert (p.period, p.max_delay) == (1.0, 0.5)
    assert FixedWindow(1, 1) != SlidingWindow(1, 1)
    for bad in (lambda: TokenBucket(-1, 1), lambda: TokenBucket(1.5, 1), lambda: TokenBucket(True, 1),  # type: ignore[arg-type]
                lambda: GCRA(1, 1 << 63, 1), lambda: TokenBucket(10, 1, -2), lambda: FixedWindow(1, -1)):
        with pytest.raises(InvalidLimit):
            bad()
    with pytest.raises(TypeError):
        FixedWindow(1)
    with pytest.raises(TypeError):
        FixedWindow(1, 1, window_ns=1)


SHADOWS = [
    (TokenBucket(10, 3600, 1, shadow=True), "token_bucket:max=10,refill_time=1h0m0s,refill_amount=1,shadow=true"),
    (GCRA(4, 1, 1, shadow=True), "gcra:burst=4,count=1,period=1s,shadow=true"),
    (FixedWindow(5, 60, shadow=True), "fixed_window:limit=5,window=1m0s,shadow=true"),
    (SlidingWindow(7, window_ns=250_000_000, shadow=True), "sliding_window:limit=7,window=250ms,shadow=true"),
    (Pacer(4, 1, 2, shadow=True), "pacer:rate=4,period=1s,max_delay=2s,shadow=true"),
    (SlidingLog(100, 60, shadow=True), "sliding_log:limit=100,window=1m0s,shadow=true"),
    (WindowCounters(10, 60, 8, True, shadow=True),
     "window_counters:limit=10,window=1m0s,counters=8,count_denied=true,shadow=true"),
    (Concurrency(4, 30, shadow=True), "concurrency:limit=4,lease=30s,shadow=true"),
]


@pytest.mark.parametrize("lim,spec", SHADOWS, ids=[s for _, s in SHADOWS])
def test_shadow_limits(lim: Limit, spec: str) -> None:
    assert lim.shadow is True and str(lim) == spec
    assert Limit.parse(spec) == lim and hash(Limit.parse(spec)) == hash(lim)
    assert repr(lim).endswith(", shadow=True)")
    assert eval(repr(lim), {type(lim).__name__: type(lim)}) == lim
    # Not on the wire: the same parameters, another limit; replace() adds or drops it.
    plain = Limit.from_wire(int(lim.algorithm), *lim.params)
    assert plain.shadow is False and plain.params == lim.params
    assert plain != lim and len({plain, lim}) == 2
    assert str(plain) + ",shadow=true" == spec and "shadow" not in repr(plain)
    assert dataclasses.replace(plain, shadow=True) == lim and dataclasses.replace(lim, shadow=False) == plain
    # shadow=false is the default, anywhere in the spec; shadow=true anywhere is the same limit.
    name, _, params = spec.partition(":")
    rest = params[:-len(",shadow=true")]
    assert Limit.parse(f"{name}:shadow=false,{rest}") == plain == Limit.parse(f"{name}:{rest},shadow=false")
    assert Limit.parse(f"{name}:shadow=true,{rest}") == lim


def test_shadow_is_checked() -> None:
    assert TokenBucket(1, 1).shadow is False and Limit.parse("login").shadow is False
    for bad in (lambda: GCRA(1, 1, 1, shadow=1), lambda: FixedWindow(1, 1, shadow="true"),  # type: ignore[arg-type]
                lambda: WindowCounters(1, 1, shadow=None)):  # type: ignore[arg-type]
        with pytest.raises(InvalidLimit, match="shadow: want a bool"):
            bad()
    with pytest.raises(TypeError):
        Named("login", shadow=True)  # type: ignore[call-arg]
    for spec, msg in [
        ("gcra:burst=1,count=1,period=1s,shadow=yes", 'shadow: invalid boolean "yes", want true or false'),
        ("gcra:shadow=True,burst=1,count=1,period=1s", 'shadow: invalid boolean "True", want true or false'),
        ("gcra:burst=1,count=1,period=1s,shadow=", 'shadow: invalid boolean "", want true or false'),
        ("gcra:burst=1,shadow=false,count=1,shadow=false,period=1s", 'duplicate parameter "shadow"'),
        ("gcra:burst=1,count=1,period=1s,shadow", 'shadow: missing "=value"'),
        ("gcra:shadow=true", 'missing parameter "burst"'),
        ("gcra:burst=1,count=1,period=1s,shadow=true,", "empty parameter"),
        ("gcra:burst=1,count=1,period=1s,Shadow=true", 'unknown parameter "Shadow" for gcra (want burst, count, period)'),
        ("login,shadow=true", "not a limit spec (ALGORITHM:name=value,...) nor a limit's name"),
    ]:
        with pytest.raises(InvalidLimit) as info:
            Limit.parse(spec)
        assert str(info.value) == f"invalid limit: limit {quote(spec)}: {msg}"


@pytest.mark.parametrize("s,ns", [
    ("0", 0), ("5s", 5_000_000_000), ("30s", 30_000_000_000), ("1478s", 1_478_000_000_000),
    ("-5s", -5_000_000_000), ("+5s", 5_000_000_000), ("-0", 0), ("+0", 0),
    ("5.0s", 5_000_000_000), ("5.6s", 5_600_000_000), ("5.s", 5_000_000_000), (".5s", 500_000_000),
    ("1.0s", 1_000_000_000), ("1.00s", 1_000_000_000), ("1.004s", 1_004_000_000), ("1.0040s", 1_004_000_000),
    ("100.00100s", 100_001_000_000), ("10ns", 10), ("11us", 11_000), ("12\u00b5s", 12_000), ("12\u03bcs", 12_000),
    ("13ms", 13_000_000), ("14s", 14_000_000_000), ("15m", 900_000_000_000), ("16h", 57_600_000_000_000),
    ("3h30m", 12_600_000_000_000), ("10.5s4m", 250_500_000_000), ("-2m3.4s", -123_400_000_000),
    ("1h2m3s4ms5us6ns", 3_723_004_005_006), ("39h9m14.425s", 140_954_425_000_000),
    ("52763797000ns", 52_763_797_000), ("0.3333333333333333333h", 1_200_000_000_000),
    ("9007199254740993ns", 9_007_199_254_740_993), ("9223372036854775807ns", MAX),
    ("9223372036854775.807us", MAX), ("9223372036s854ms775us807ns", MAX),
    ("-9223372036854775808ns", -(1 << 63)), ("-9223372036854775.808us", -(1 << 63)),
    ("0.100000000000000000000h", 360_000_000_000),
    ("0.830103483285477580700h", 2_988_372_539_827),
    # The spec's one unit more than Go's (proto.ParseDuration): a day of 24 hours.
    ("1d", 86_400_000_000_000), ("1d12h", 129_600_000_000_000), ("0.5d", 43_200_000_000_000),
    ("-1d", -86_400_000_000_000), ("106751d", 106_751 * 86_400_000_000_000),
])
def test_parse_duration_as_go(s: str, ns: int) -> None:
    # Cases from Go's time package tests, and proto's TestParseDuration_days.
    assert parse_duration(s) == ns


@pytest.mark.parametrize("s", ["", "3", "-", "s", ".", "-.", ".s", "+.s", "1D", "1 d", "1dd", "106752d", "\x85\x85", "\xffff",
                               "hello \xffff world", "9223372036854775808ns", "9223372036854775.808us",
                               "9223372036854ms775us808ns", "-9223372036854775809ns", "3000000h"])
def test_parse_duration_errors_as_go(s: str) -> None:
    assert parse_duration(s) is None


@pytest.mark.parametrize("ns,s", [
    (0, "0s"), (1, "1ns"), (1100, "1.1\u00b5s"), (2_200_000, "2.2ms"), (3_300_000_000, "3.3s"),
    (4 * 60_000_000_000 + 5_000_000_000, "4m5s"), (4 * 60_000_000_000 + 5_001_000_000, "4m5.001s"),
    (5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000, "5h6m7.001s"),
    (8 * 60_000_000_000 + 1, "8m0.000000001s"), (MAX, "2562047h47m16.854775807s"),
    (-(1 << 63), "-2562047h47m16.854775808s"), (-1_500_000_000, "-1.5s"), (3_600_000_000_000, "1h0m0s"),
])
def test_format_duration_as_go(ns: int, s: str) -> None:
    assert format_duration(ns) == s
    assert parse_duration(s) == ns


def test_quote_as_go() -> None:
    assert quote('a"b\\c\n\t\x00\x7f\u00a0é\U0001f600') == '"a\\"b\\\\c\\n\\t\\x00\\x7f\\u00a0é\U0001f600"'


def test_quota() -> None:
    q = Quota(1000, "month", tz="Europe/Paris", anchor=15)
    assert str(q) == "quota:limit=1000,period=month,tz=Europe/Paris,anchor=15"
    assert Limit.parse(str(q)) == q and q.params == (1000, 3 | 1 << 8, 15)
    assert (q.limit, q.period, q.tz, q.anchor, q.week_start) == (1000, "month", "Europe/Paris", 15, "monday")
    w = Quota(7, "2week", week_start="sunday")
    assert str(w) == "quota:limit=7,period=2week,week_start=sunday" and w.tz == "UTC"
    assert repr(w) == "Quota(limit=7, period='2week', week_start='sunday')"
    for bad in (dict(period="fortnight"), dict(period="day", tz="Europe/Par!s"), dict(period="day", anchor=256),
                dict(period="week", week_start="mon")):
        with pytest.raises(InvalidLimit):
            Quota(1, **bad)
    # Version 5 carries a quota with its time zone; decoding gives the same limit back.
    for lim in (q, w):
        b = proto.frame(proto.Kind.REQUEST, 1, 1, proto.encode_item(proto.Opcode.ACQUIRE, 0, lim, 1, 0, b"k"), 5)
        _, ops = proto.decode_frame(b)
        assert ops[0].limit == lim and str(ops[0].limit) == str(lim)
    assert proto.item_version(proto.Opcode.ACQUIRE, 0, q) == 5
