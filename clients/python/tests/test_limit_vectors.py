"""The limit table's shared vectors (proto/testdata/limits.txt, written by Go).

Each line is a canonical spec and its wire form: the Python client parses
the spec to the same wire form, and formats the wire form back to the same
spec, so its copy of the algorithms' names, parameters, order and duration
formatting cannot drift from proto's.
"""

from __future__ import annotations

import os
from typing import List, Tuple

import pytest
from conftest import REPO

from sluice.limits import Limit

VECTORS = os.path.join(REPO, "proto", "testdata", "limits.txt")


def vectors() -> List[Tuple[str, Tuple[int, int, int, int]]]:
    out = []
    with open(VECTORS) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            spec, *wire = line.split()
            a, p0, p1, p2 = (int(v) for v in wire)
            out.append((spec, (a, p0, p1, p2)))
    return out


@pytest.mark.parametrize("spec,wire", vectors())
def test_limit_vector(spec: str, wire: Tuple[int, int, int, int]) -> None:
    parsed = Limit.parse(spec)
    assert (int(parsed.algorithm),) + parsed.params == wire
    assert str(Limit.from_wire(*wire)) == spec


def test_vectors_cover_every_algorithm() -> None:
    from sluice.limits import Algorithm

    assert {w[0] for _, w in vectors()} == {int(a) for a in Algorithm}
