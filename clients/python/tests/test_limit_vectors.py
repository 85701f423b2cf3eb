"""The limit table's shared vectors (proto/testdata/limits.txt, written by Go).

proto/limit_vectors_test.go describes the lines: every algorithm Go knows,
canonical specs and their wire forms, other specs that parse (defaults,
order, units), canonical specs with shadow=true (any algorithm's; not on
the wire), and invalid specs with their errors. The Python client must
know every algorithm Go lists, under the same name and number, parse every
spec to the same wire form, format every wire form back to the same
canonical spec, and refuse every invalid spec with the same message: its
copy of the algorithms' names, parameters, order, defaults, duration
formatting and errors cannot drift from proto's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Tuple

import pytest
from conftest import REPO

from sluice import InvalidLimit
from sluice._gotime import quote
from sluice.limits import Algorithm, Limit

VECTORS = os.path.join(REPO, "proto", "testdata", "limits.txt")

Wire = Tuple[int, int, int, int]


def read() -> Dict[str, List[Tuple[str, ...]]]:
    """The vectors by kind: algorithm (number, name), ok, parse and shadow (spec, wire), invalid (spec, message)."""
    out: Dict[str, List[Tuple[str, ...]]] = {"algorithm": [], "ok": [], "parse": [], "shadow": [], "invalid": []}
    with open(VECTORS) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            kind, _, rest = line.partition(" ")
            if kind not in out:
                raise AssertionError(f"limits.txt:{n}: a vector of unknown kind {kind!r}: update this test")
            if kind == "invalid":
                spec, _, msg = rest.partition(" ")
                out[kind].append((spec, msg))
            else:
                out[kind].append(tuple(rest.split()))
    return out


VECTORS_BY_KIND = read()


def wire(fields: Tuple[str, ...]) -> Wire:
    a, p0, p1, p2 = (int(v) for v in fields[:4])
    return a, p0, p1, p2


def zone(fields: Tuple[str, ...]) -> str:
    """A vector's time zone after its wire form (a quota's, when not UTC); "" if none."""
    return fields[5] if len(fields) > 5 else ""


def test_python_knows_every_go_algorithm() -> None:
    go = {int(num): name for num, name in VECTORS_BY_KIND["algorithm"]}
    assert go, "limits.txt lists no algorithm"
    for num, name in go.items():
        try:
            a = Algorithm(num)
        except ValueError:
            pytest.fail(f"proto defines algorithm {num} ({name}), which the Python client does not know")
        assert a.spec_name == name, f"algorithm {num}: Go calls it {name!r}, Python {a.spec_name!r}"
    assert {int(a) for a in Algorithm} == set(go), "the Python client knows an algorithm proto does not"


def test_vectors_cover_every_algorithm() -> None:
    assert {wire(f[1:])[0] for f in VECTORS_BY_KIND["ok"]} == {int(a) for a in Algorithm}


@pytest.mark.parametrize("fields", VECTORS_BY_KIND["ok"], ids=[f[0] for f in VECTORS_BY_KIND["ok"]])
def test_canonical_spec(fields: Tuple[str, ...]) -> None:
    spec, w = fields[0], wire(fields[1:])
    parsed = Limit.parse(spec)
    assert (int(parsed.algorithm),) + parsed.params == w
    assert str(parsed) == spec
    assert str(Limit.from_wire(*w, zone(fields))) == spec
    assert getattr(parsed, "_tz", "") == zone(fields)


@pytest.mark.parametrize("fields", VECTORS_BY_KIND["parse"], ids=[f[0] for f in VECTORS_BY_KIND["parse"]])
def test_other_spec(fields: Tuple[str, ...]) -> None:
    spec, w = fields[0], wire(fields[1:])
    parsed = Limit.parse(spec)
    assert (int(parsed.algorithm),) + parsed.params == w
    assert getattr(parsed, "_tz", "") == zone(fields)
    assert str(parsed) != spec and Limit.parse(str(parsed)) == parsed


def test_vectors_have_shadow_specs() -> None:
    assert VECTORS_BY_KIND["shadow"], "limits.txt lists no shadow spec"


@pytest.mark.parametrize("fields", VECTORS_BY_KIND["shadow"], ids=[f[0] for f in VECTORS_BY_KIND["shadow"]])
def test_shadow_spec(fields: Tuple[str, ...]) -> None:
    spec, w = fields[0], wire(fields[1:])
    parsed = Limit.parse(spec)
    assert parsed.shadow is True
    assert str(parsed) == spec
    assert (int(parsed.algorithm),) + parsed.params == w
    assert Limit.parse(str(parsed)) == parsed
    # shadow=true is not on the wire: the limit the wire form holds is the same one, not shadowed.
    plain = Limit.from_wire(*w)
    assert not plain.shadow and plain != parsed and len({plain, parsed}) == 2
    assert dataclasses.replace(plain, shadow=True) == parsed
    assert str(plain) + ",shadow=true" == spec


@pytest.mark.parametrize("spec,message", VECTORS_BY_KIND["invalid"], ids=[v[0] for v in VECTORS_BY_KIND["invalid"]])
def test_invalid_spec(spec: str, message: str) -> None:
    with pytest.raises(InvalidLimit) as info:
        Limit.parse(spec)
    assert str(info.value) == f"invalid limit: limit {quote(spec)}: {message}"
