"""The shared test vectors: every golden frame of proto/testdata/golden.

A frame not named bad_* must decode and re-encode to the same bytes; a
bad_* frame must raise the exception of the error its .txt names (the Go
sentinel and the status a server answers with).
"""

from __future__ import annotations

import os
import re
from typing import Dict, Type

import pytest
from conftest import GOLDEN

from sluice import errors, proto
from sluice.limits import GCRA, Concurrency, FixedWindow, Pacer, SlidingLog, SlidingWindow, TokenBucket, WindowCounters
from sluice.limits import Named
from sluice.results import Decision, Hello, Lease, Register, Released

ERRORS: Dict[str, Type[errors.StatusError]] = {
    "ErrMalformed": errors.Malformed,
    "ErrBadVersion": errors.BadVersion,
    "ErrFrameTooLarge": errors.FrameTooLarge,
    "ErrBatchTooLarge": errors.BatchTooLarge,
    "ErrUnknownOpcode": errors.UnknownOpcode,
    "ErrInvalidLimit": errors.InvalidLimit,
    "ErrInvalidKey": errors.InvalidKey,
    "ErrTooManyItems": errors.TooManyItems,
}

NAMES = sorted(f[:-4] for f in os.listdir(GOLDEN) if f.endswith(".hex"))


def load(name: str) -> bytes:
    with open(os.path.join(GOLDEN, name + ".hex")) as f:
        return bytes.fromhex("".join(f.read().split()))


def expectation(name: str) -> str:
    with open(os.path.join(GOLDEN, name + ".txt")) as f:
        m = re.search(r"^Expect: (.*)$", f.read(), re.M)
    assert m, f"{name}.txt has no Expect: line"
    return m.group(1)


def test_every_vector_is_here() -> None:
    # A directory that went missing or empty must not pass as "no cases".
    assert len(NAMES) >= 48, NAMES
    assert sum(n.startswith("bad_") for n in NAMES) >= 19
    for n in NAMES:
        assert os.path.exists(os.path.join(GOLDEN, n + ".txt"))


@pytest.mark.parametrize("name", [n for n in NAMES if not n.startswith("bad_")])
def test_valid_frame_round_trips(name: str) -> None:
    assert expectation(name).startswith("decodes without error")
    b = load(name)
    if b[4] > proto.VERSION:
        # A frame of a version this client does not speak yet (version 5's quota): it must say so.
        with pytest.raises(errors.BadVersion):
            proto.decode_frame(b)
        return
    h, parts = proto.decode_frame(b)
    assert h.count == len(parts) and h.length + 4 == len(b)
    assert proto.encode_frame(h.kind, h.id, parts, h.version) == b
    # Decoding what was re-encoded gives equal values.
    assert proto.decode_frame(proto.encode_frame(h.kind, h.id, parts))[1] == parts


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("bad_")])
def test_bad_frame_raises_its_error(name: str) -> None:
    m = re.match(r"error (Err\w+) \(status (\d+) (\w+)\)", expectation(name))
    assert m, expectation(name)
    cls = ERRORS[m.group(1)]
    assert cls.status == int(m.group(2))
    b = load(name)
    if b[4] > proto.VERSION and cls is not errors.BadVersion:
        # A frame of a version this client does not speak (version 6's registers): it says so first.
        cls = errors.BadVersion
    with pytest.raises(cls) as info:
        proto.decode_frame(b)
    assert type(info.value) is cls
    assert not str(info.value).startswith(("proto:", "sluice:"))


def test_header_checks_come_before_the_body() -> None:
    # bad_length_too_large is a header alone: refused without the body.
    h, need = proto.split_frame(load("ping_request")[:5])
    assert h is None and need == proto.HEADER_LEN
    with pytest.raises(errors.FrameTooLarge):
        proto.split_frame(load("bad_length_too_large"))


def test_acquire_request_fields() -> None:
    h, (op,) = proto.decode_frame(load("acquire_request"))
    assert (h.kind, h.id, h.count) == (proto.Kind.REQUEST, 3, 1)
    assert op.code == proto.Opcode.ACQUIRE
    assert op.flags == proto.Flags.STRICT | proto.Flags.AT
    assert op.limit == TokenBucket(10, 3600, 1)
    assert str(op.limit) == "token_bucket:max=10,refill_time=1h0m0s,refill_amount=1"
    assert (op.n, op.at, op.key) == (1, 1_700_000_000_000_000_000, b"login:alice")
    # The encoder alone gives the same bytes.
    body = proto.encode_item(proto.Opcode.ACQUIRE, 5, TokenBucket(10, 3600, 1), 1, 1_700_000_000_000_000_000,
                             b"login:alice")
    assert proto.frame(proto.Kind.REQUEST, 3, 1, body, version=1) == load("acquire_request")


def test_limits_of_every_algorithm() -> None:
    ops = [proto.decode_frame(load(n))[1][0] for n in ("peek_request", "refund_request", "reset_request")]
    assert [op.limit for op in ops] == [GCRA(4, 1, 1), FixedWindow(100, 60), SlidingWindow(100, 60)]
    _, (pacer, neg, ping) = proto.decode_frame(load("batch_request"))
    assert pacer.limit == Pacer(4, 1, 2) and pacer.key == b"send:dave"
    assert neg.n == -1 and ping.code == proto.Opcode.PING
    _, (multi,) = proto.decode_frame(load("multi_request"))
    assert multi.flags == proto.Flags.AT and multi.at == 1_700_000_000_000_000_000
    assert [(i.flags, i.cost, i.key) for i in multi.items] == [(1, 1, b"login:alice"), (0, 2, b"api:tenant-7")]
    _, (scan,) = proto.decode_frame(load("scan_request"))
    assert (scan.cursor, scan.count, scan.prefix) == (0, 100, b"login:")


def test_result_fields() -> None:
    _, (r,) = proto.decode_frame(load("acquire_response_denied"))
    d = r.value
    assert isinstance(d, Decision)
    assert (d.allowed, d.remaining, d.limit) == (False, 0, 10)
    assert d.retry_after == 1800.0 and d.reset_after == 36000.0 and d.delay == 0.0
    _, (r,) = proto.decode_frame(load("acquire_response_allowed"))
    assert r.value.retry_after is None and r.value.retry_after_ns == -1
    _, (r,) = proto.decode_frame(load("hello_response"))
    assert r.value == Hello(1, 1 << 20, 256, 1024, 16, 1 << 20, 128)
    _, (r,) = proto.decode_frame(load("reset_response"))
    assert r.value is True
    _, (r,) = proto.decode_frame(load("multi_response"))
    assert r.value.allowed and [d.remaining for d in r.value.decisions] == [8, 2]
    assert [(d.outage, d.fails_closed) for d in r.value.decisions] == [(None, False), (None, False)]


def test_multi_outage_marks() -> None:
    # Version 7: each item's decision of a MULTI carries the outage policy that made it and
    # whether its limit fails closed, as an ACQUIRE's; version 6: booleans.
    h, (r,) = proto.decode_frame(load("multi_response_outage_closed"))
    m = r.value
    assert h.version == 7 and not m.allowed and not m.degraded
    assert [(d.allowed, d.outage, d.fails_closed, d.limit) for d in m] == [(False, "closed", True, 5),
                                                                         (False, "closed", False, 10)]
    h, (r,) = proto.decode_frame(load("multi_response_outage_unmarked"))
    assert h.version == 6 and [(d.allowed, d.outage, d.fails_closed) for d in r.value] == [(False, None, False)] * 2
    assert [d.limit for d in r.value] == [d.limit for d in m]
    # Bits no version sets in a MULTI's decision: shadow-denied (1), the limits of a list (5).
    for bit in (2, 32):
        b = bytearray(load("multi_response_outage_unmarked"))
        b[proto.HEADER_LEN + 4] |= bit
        with pytest.raises(errors.Malformed):
            proto.decode_frame(bytes(b))
    _, (r,) = proto.decode_frame(load("scan_response"))
    assert r.value.next == 4096 and [e.key for e in r.value.entries] == [b"login:alice", b"login:bob"]
    _, (r,) = proto.decode_frame(load("stats_response"))
    assert r.value == {"slot_count": 1 << 20, "used_slots": 3, "ops": 42}
    _, (r,) = proto.decode_frame(load("error_response"))
    assert r.status == errors.Status.TABLE_FULL
    err = r.error()
    assert isinstance(err, errors.TableFull) and "table full" in str(err)
    _, (ok, bad, pong) = proto.decode_frame(load("batch_response"))
    assert ok.value.delay == 0.25 and isinstance(bad.error(), errors.InvalidCost) and pong.value is None
    _, (r,) = proto.decode_frame(load("frame_error_response"))
    assert r.code == 0 and isinstance(r.error(), errors.BadVersion)


def test_lease_and_release_requests() -> None:
    conc = Concurrency(10, 30)
    h, (op,) = proto.decode_frame(load("lease_request"))
    assert (h.version, h.id, op.code, op.flags, op.n, op.at, op.key) == (3, 19, proto.Opcode.LEASE, 0, 1, 0,
                                                                          b"upload:erin")
    assert op.limit == conc and str(op.limit) == "concurrency:limit=10,lease=30s"
    assert proto.frame(proto.Kind.REQUEST, 19, 1, proto.encode_lease(conc, b"upload:erin"), version=3) == \
        load("lease_request")
    h, (op,) = proto.decode_frame(load("release_request"))
    assert (h.version, op.code, op.lease, op.n, op.key) == (3, proto.Opcode.RELEASE, 7, 0, b"upload:erin")
    assert proto.frame(proto.Kind.REQUEST, 20, 1, proto.encode_release(conc, 7, b"upload:erin"), version=3) == \
        load("release_request")
    # The largest lease id travels as the i64 of its 64 bits.
    big = proto.encode_release(conc, (1 << 64) - 1, b"k")
    assert proto.decode_op(big)[0].lease == (1 << 64) - 1
    # In a frame of version 1 or 2, LEASE and RELEASE are unknown opcodes, the version-3 algorithms unknown.
    for name in ("lease_request", "release_request"):
        for v in (1, 2):
            with pytest.raises(errors.UnknownOpcode):
                proto.decode_op(load(name), proto.HEADER_LEN, None, v)
    _, ops = proto.decode_frame(load("peek_version_3_algorithms_request"))
    assert [o.limit for o in ops] == [SlidingLog(100, 60), WindowCounters(100, 3600, 60, True), conc]
    with pytest.raises(errors.InvalidLimit):
        proto.decode_op(load("peek_version_3_algorithms_request"), proto.HEADER_LEN, None, 2)


def test_lease_and_release_results() -> None:
    h, (r,) = proto.decode_frame(load("lease_response_allowed"))
    lease = r.value
    assert h.version == 3 and isinstance(lease, Lease) and lease
    assert (lease.id, lease.remaining, lease.limit, lease.retry_after, lease.reset_after) == (7, 9, 10, None, 30.0)
    assert proto.frame(proto.Kind.RESPONSE, 19, 1, proto.encode_lease_result(lease), version=3) == \
        load("lease_response_allowed")
    _, (r,) = proto.decode_frame(load("lease_response_denied"))
    assert not r.value and r.value.id == 0 and r.value.retry_after == 12.0
    _, (r,) = proto.decode_frame(load("release_response"))
    rel = r.value
    assert isinstance(rel, Released) and rel and rel.decision == Decision(True, 10, 10, -1, 0, 0)
    assert proto.frame(proto.Kind.RESPONSE, 20, 1, proto.encode_release_result(rel), version=3) == \
        load("release_response")
    # A lease is never shadowed: allowed 3 is malformed; so is released 2.
    b = bytearray(proto.encode_lease_result(lease))
    b[2] = 3
    with pytest.raises(errors.Malformed):
        proto.decode_result(bytes(b))
    b = bytearray(proto.encode_release_result(rel))
    b[2] = 2
    with pytest.raises(errors.Malformed):
        proto.decode_result(bytes(b))


def test_every_status_maps_to_its_exception() -> None:
    for s in errors.Status:
        if s == errors.Status.OK:
            continue
        cls = errors.error_class(s)
        assert cls.status == s
        e = proto.Result(proto.Opcode.PING, s, "why").error()
        assert type(e) is cls and str(e) == "why"
    assert errors.error_class(17) is errors.Malformed
    assert issubclass(errors.Busy, errors.Unavailable) and issubclass(errors.ShuttingDown, errors.Unavailable)
    assert issubclass(errors.InvalidLimit, ValueError)


def test_error_message_is_cut_at_a_utf8_boundary() -> None:
    b = proto.encode_error(proto.Opcode.ACQUIRE, errors.Status.INTERNAL, "é" * 600)
    r, off = proto.decode_result(b)
    assert off == len(b) and r.message == "é" * 512
    # OK and unknown statuses cannot be put on the wire as errors.
    assert proto.encode_error(3, 0, "x")[1] == errors.Status.INTERNAL


def test_truncations_never_escape_as_other_exceptions() -> None:
    # Every frame cut short, with its length field fixed to match, is refused
    # with a codec error, never an IndexError or struct.error; so is every
    # prefix of the whole frame.
    for name in NAMES:
        if name.startswith("bad_") or load(name)[4] > proto.VERSION:
            continue
        b = load(name)
        h = proto.parse_header(b)
        for n in range(proto.HEADER_LEN, len(b)):
            with pytest.raises(errors.StatusError):
                proto.decode_frame(proto.frame(h.kind, h.id, h.count, b[proto.HEADER_LEN:n]))
            with pytest.raises(errors.StatusError):
                proto.decode_frame(b[:n])


def test_deadline_and_outage() -> None:
    # Version 4: the client's deadline in the at field (DEADLINE), and the outage policy that decided.
    h, (op,) = proto.decode_frame(load("acquire_deadline_request"))
    assert (h.version, op.flags, op.at) == (4, proto.Flags.DEADLINE | proto.Flags.NAMED, 1_700_000_000_050_000_000)
    _, (r,) = proto.decode_frame(load("acquire_response_outage_closed"))
    assert (r.value.allowed, r.value.outage, r.value.retry_after, r.value.fails_closed) == (False, "closed", 0.005, True)
    _, (r,) = proto.decode_frame(load("acquire_response_outage_local"))
    assert (r.value.allowed, r.value.outage, r.value.remaining, r.value.fails_closed) == (True, "local", 332, False)
    _, (r,) = proto.decode_frame(load("acquire_response_fails_closed"))
    assert (r.value.allowed, r.value.outage, r.value.remaining, r.value.fails_closed) == (True, None, 999, True)
    d = proto.decode_frame(load("acquire_response_allowed"))[1][0].value
    assert d.outage is None and not d.fails_closed
    # Bits 6-7 of a decision's first byte are set by no version; bit 5 (version 7) says the
    # limits of a list follow, and there are none here.
    b = bytearray(load("acquire_response_fails_closed"))
    for c in (0x20, 0x40, 0x80):
        b[14] = c | 1
        with pytest.raises(errors.Malformed):
            proto.decode_frame(bytes(b))
    with pytest.raises(errors.Malformed):
        proto.decode_frame(load("bad_deadline_in_version_3"))


def test_list_all() -> None:
    # Version 7: ALL asks for each limit's decision of a named list; the answer's decision has
    # bit 5 set, then n, bound and each limit's decision in the list's order.
    h, (op,) = proto.decode_frame(load("acquire_all_request"))
    assert (h.version, op.flags) == (7, proto.Flags.ALL | proto.Flags.NAMED)
    assert proto.item_version(op.code, op.flags, op.limit) == proto.LIST_VERSION
    body = proto.encode_item(proto.Opcode.ACQUIRE, proto.Flags.ALL, Named("login"), 1, 0, b"login:alice")
    assert proto.frame(proto.Kind.REQUEST, 34, 1, body, version=7) == load("acquire_all_request")
    _, (r,) = proto.decode_frame(load("acquire_response_limits"))
    d = r.value
    assert (d.allowed, d.limit, d.retry_after, d.bound) == (False, 1000, 36000.0, 1)
    day = 36000 * 10**9
    assert d.limits == (Decision(True, 4, 5, -1, 200_000_000, 0), Decision(False, 0, 1000, day, day, 0))
    assert proto.decode_frame(load("acquire_response_allowed"))[1][0].value.limits == ()
    # ALL is reserved before version 7; a bound at or past n is malformed.
    with pytest.raises(errors.Malformed):
        proto.decode_frame(load("bad_all_in_version_6"))
    with pytest.raises(errors.Malformed):
        proto.decode_frame(load("bad_limits_bound"))


def test_registers() -> None:
    # Version 6: the register operations decode and re-encode (the clients do not send them).
    _, (op,) = proto.decode_frame(load("register_cas_request"))
    t0 = 1_700_000_000 * 10**9
    assert (op.code, op.old, op.n, op.ttl, op.key) == (proto.Opcode.REGCAS, t0, t0 + 10**9, 10**9, b"gcra:login:alice")
    _, (r,) = proto.decode_frame(load("register_get_response_absent"))
    assert r.value == Register(False, 0, -1, t0)
