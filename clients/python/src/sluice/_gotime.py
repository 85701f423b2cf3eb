"""Go's duration syntax and string quoting, so limit specs read and print as in Go.

The limit spec (proto/doc.go, "Limit spec") writes durations as Go's
``time.Duration.String`` does and reads them as proto's ``ParseDuration``
does (``time.ParseDuration`` with one more unit, d for 24 hours); its error
messages quote values as ``strconv.Quote`` does. These are faithful ports of
the three, on integer nanoseconds.
"""

from __future__ import annotations

from typing import Optional

MAX_INT64 = (1 << 63) - 1
MIN_INT64 = -(1 << 63)

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # U+00B5 micro sign
    "\u03bcs": 1_000,  # U+03BC Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
    "d": 86400 * 1_000_000_000,  # the spec's one unit more than Go's: a day of 24 hours
}

_DIGITS = "0123456789"


def parse_duration(s: str) -> Optional[int]:
    """Parse a duration ("1h30m", "1.5s", "-10us", "1d12h") to nanoseconds, as proto.ParseDuration.

    Returns ``None`` where proto.ParseDuration returns an error, including
    a result outside int64. The fraction of a unit is computed in float64,
    exactly as Go does, so both sides agree to the nanosecond.
    """
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        return None
    d = 0
    while s:
        if not (s[0] == "." or s[0] in _DIGITS):
            return None
        # [0-9]*
        i, v = 0, 0
        while i < len(s) and s[i] in _DIGITS:
            if v > (1 << 63) // 10:
                return None
            v = v * 10 + ord(s[i]) - 48
            if v > 1 << 63:
                return None
            i += 1
        pre = i > 0
        s = s[i:]
        # (\.[0-9]*)?
        post, f, scale = False, 0, 1.0
        if s and s[0] == ".":
            s = s[1:]
            i, overflow = 0, False
            while i < len(s) and s[i] in _DIGITS:
                if not overflow:
                    if f > MAX_INT64 // 10:
                        overflow = True
                    else:
                        y = f * 10 + ord(s[i]) - 48
                        if y > 1 << 63:
                            overflow = True
                        else:
                            f = y
                            scale *= 10
                i += 1
            post = i > 0
            s = s[i:]
        if not pre and not post:
            return None
        # unit: everything up to the next number
        i = 0
        while i < len(s) and not (s[i] == "." or s[i] in _DIGITS):
            i += 1
        unit = _UNITS.get(s[:i])
        if unit is None:
            return None
        s = s[i:]
        if v > (1 << 63) // unit:
            return None
        v *= unit
        if f > 0:
            v += int(float(f) * (float(unit) / scale))
            if v > 1 << 63:
                return None
        d += v
        if d > 1 << 63:
            return None
    if neg:
        return -d
    if d > MAX_INT64:
        return None
    return d


def _frac(v: int, prec: int) -> str:
    """v / 10**prec with the fraction's trailing zeros (and a bare point) dropped."""
    whole, frac = divmod(v, 10**prec)
    digits = f"{frac:0{prec}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_duration(ns: int) -> str:
    """Format nanoseconds as Go's ``time.Duration.String``: "1h0m0s", "1.5s", "10µs", "0s"."""
    u = -ns if ns < 0 else ns
    if u == 0:
        return "0s"
    if u < 1_000:
        out = f"{u}ns"
    elif u < 1_000_000:
        out = _frac(u, 3) + "\u00b5s"
    elif u < 1_000_000_000:
        out = _frac(u, 6) + "ms"
    else:
        secs, sub = divmod(u, 1_000_000_000)
        digits = f"{sub:09d}".rstrip("0")
        out = f"{secs % 60}" + (f".{digits}" if digits else "") + "s"
        mins = secs // 60
        if mins:
            out = f"{mins % 60}m" + out
            if mins >= 60:
                out = f"{mins // 60}h" + out
    return "-" + out if ns < 0 else out


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def quote(s: str) -> str:
    """Quote s as Go's ``strconv.Quote``: double quotes, Go escapes, printable runes kept."""
    out = ['"']
    for c in s:
        e = _ESCAPES.get(c)
        if e is not None:
            out.append(e)
        elif c.isprintable():  # Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols, ' '
            out.append(c)
        elif ord(c) < 0x80:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    out.append('"')
    return "".join(out)
