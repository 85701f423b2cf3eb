"""How the clients cut calls into frames and a byte stream back into frames."""

from __future__ import annotations

import copy
import pickle
import random
from typing import List, Tuple

import pytest

from sluice import (
    GCRA, Concurrency, Decision, Named, ProtocolError, SlidingLog, SlidingWindow, TokenBucket, WindowCounters, proto,
)
from sluice._answers import FrameReader, fast_decision, results
from sluice._calls import decide_frame, item_call, lease_call, multi_call, pack, release_call, scan_call, simple_call

LIMIT = TokenBucket(10, 3600)


def test_pack_splits_at_max_batch_and_max_frame_len() -> None:
    calls = [simple_call(proto.Opcode.PING)] * 600
    packed = pack(calls, 0xFFFFFFFF)
    assert [(fid, len(group)) for fid, group in packed.frames] == [(0xFFFFFFFF, 256), (0, 256), (1, 88)]
    frames = []
    off = 0
    while off < len(packed.payload):
        h, end = proto.split_frame(packed.payload, off)
        assert h is not None
        frames.append(proto.decode_frame(packed.payload[off:end]))
        off = end
    assert [len(ops) for _, ops in frames] == [256, 256, 88]

    # MULTIs of 16 items with 1 KiB keys are 16,971 bytes: 61 fill a frame.
    big = [multi_call([("k%d" % i + "k" * 1020, LIMIT) for i in range(16)], None)] * 200
    packed = pack(big, 7)
    assert [len(g) for _, g in packed.frames] == [61, 61, 61, 17]
    assert all(sum(len(c.body) for c in g) <= proto.MAX_FRAME_LEN - 8 for _, g in packed.frames)


def test_reader_reassembles_frames_cut_anywhere() -> None:
    rng = random.Random(1)
    d = Decision(True, 5, 10, -1, 1, 0)
    stream = b"".join(proto.frame(proto.Kind.RESPONSE, i, 1, proto.encode_decision(3, d)) for i in range(50))
    for _ in range(20):
        reader, got, pos = FrameReader(), [], 0
        while pos < len(stream):
            n = rng.randint(1, 200)
            got.extend(reader.feed(stream[pos:pos + n]))
            pos += n
        assert [proto.parse_header(f).id for f in got] == list(range(50)) and reader.buffered == 0


def test_reader_refuses_a_bad_header_at_once() -> None:
    with pytest.raises(ProtocolError, match="frame too large"):
        FrameReader().feed((proto.MAX_FRAME_LEN + 1).to_bytes(4, "little") + b"\x01\x02\x01\x00\x00\x00\x00\x00")
    with pytest.raises(ProtocolError, match="request frame"):
        FrameReader().feed(proto.frame(proto.Kind.REQUEST, 1, 1, b"\x02"))


def test_only_an_acquire_of_a_shadow_limit_is_a_shadow_request() -> None:
    from sluice._calls import decide_frame

    shadowed = TokenBucket(10, 3600, shadow=True)
    frames = [decide_frame(1, proto.Opcode.ACQUIRE, "k", shadowed, 1, None, 1),
              decide_frame(1, proto.Opcode.ACQUIRE, "k", str(shadowed), 1, 0, 0),
              decide_frame(1, proto.Opcode.PEEK, "k", shadowed, 0, None, 0)]
    frames += [proto.frame(proto.Kind.REQUEST, 1, 1, item_call(code, "k", shadowed, 1, None, 0).body)
               for code in (proto.Opcode.ACQUIRE, proto.Opcode.PEEK, proto.Opcode.REFUND, proto.Opcode.RESET)]
    frames.append(proto.frame(proto.Kind.REQUEST, 1, 1, multi_call([("k", shadowed)], None).body))
    ops = [proto.decode_frame(f)[1][0] for f in frames]
    assert [op.flags for op in ops[:-1]] == [  # type: ignore[union-attr]
        proto.Flags.SHADOW | proto.Flags.STRICT, proto.Flags.SHADOW | proto.Flags.AT, 0,
        proto.Flags.SHADOW, 0, 0, 0]
    multi = ops[-1]
    assert multi.items[0].flags == 0  # type: ignore[union-attr]
    # The wire limit is the same: shadow=true is not part of it.
    assert all(lim == LIMIT for lim in [op.limit for op in ops[:-1]] + [multi.items[0].limit])  # type: ignore[union-attr]


def test_results_check_the_frame_against_the_request() -> None:
    calls = [item_call(proto.Opcode.ACQUIRE, "k", LIMIT, 1, None, False), simple_call(proto.Opcode.PING)]
    d = Decision(False, 0, 10, 5, 6, 0)
    body = proto.encode_decision(3, d) + bytes((2, 0))
    assert results(proto.frame(2, 9, 2, body), 9, calls) == [d, None]
    with pytest.raises(ProtocolError, match="out of step"):
        results(proto.frame(2, 8, 2, body), 9, calls)
    with pytest.raises(ProtocolError, match="opcode"):
        results(proto.frame(2, 9, 2, bytes((2, 0)) + bytes((2, 0))), 9, calls)
    with pytest.raises(ProtocolError, match="after the last result"):
        results(proto.frame(2, 9, 2, body + b"\x00"), 9, calls)
    err = results(proto.frame(2, 9, 2, proto.encode_error(3, 9, "full") + bytes((2, 0))), 9, calls)
    assert type(err[0]).__name__ == "TableFull" and err[1] is None


def test_values_pickle_and_copy() -> None:
    for v in (LIMIT, GCRA(4, 1, 0.5), Decision(True, 1, 2, -1, 0, 0)):
        assert pickle.loads(pickle.dumps(v)) == v and copy.deepcopy(v) == v


# Each operation's oldest version: 1 for what version 1 had, 2 for named limits and shadow
# requests, 3 for leases and the algorithms from sliding_log on; a MULTI takes its items' highest
# (a shadow spec's flag is not sent in a MULTI), and a SCAN stays in version 3.
def test_item_version() -> None:
    tb = TokenBucket(10, 3600)
    shadowed = TokenBucket(10, 3600, shadow=True)
    O, F = proto.Opcode, proto.Flags
    for code, flags, limit, want in [
        (O.ACQUIRE, F.STRICT | F.AT, tb, 1),
        (O.PEEK, 0, shadowed, 1),
        (O.ACQUIRE, 0, shadowed, 2),
        (O.ACQUIRE, F.SHADOW, tb, 2),
        (O.REFUND, 0, Named("login"), 2),
        (O.ACQUIRE, 0, SlidingLog(5, 1), 3),
        (O.RESET, 0, WindowCounters(5, 1, 60), 3),
        (O.ACQUIRE, 0, Concurrency(2, 1), 3),
        (O.LEASE, 0, Named("jobs"), 3),
        (O.RELEASE, 0, Concurrency(2, 1), 3),
    ]:
        assert proto.item_version(code, flags, limit) == want, (code, flags, limit)
    items = [proto.WireMultiItem(0, shadowed, 1, b"a"), proto.WireMultiItem(F.STRICT, tb, 1, b"b")]
    assert proto.multi_version(items) == 1
    assert proto.multi_version(items + [proto.WireMultiItem(0, Named("x"), 1, b"c")]) == 2
    assert proto.multi_version(items + [proto.WireMultiItem(0, SlidingLog(1, 1), 1, b"c")]) == 3
    assert [proto.op_version(proto.Op(code)) for code in (O.HELLO, O.PING, O.STATS)] == [1, 1, 1]
    assert proto.op_version(proto.Op(O.SCAN, count=1)) == proto.SCAN_VERSION == 3
    assert proto.item_version(O.ACQUIRE, F.DEADLINE, Named("login")) == 4


def _sent(payload: bytes) -> Tuple[int, List[proto.Op]]:
    """The version of the one request frame in payload, and its operations, decoded in that version
    (which refuses what the version does not have)."""
    h, ops = proto.decode_frame(payload)
    assert h.kind == proto.Kind.REQUEST
    return h.version, ops  # type: ignore[return-value]


def test_each_call_goes_in_the_oldest_version_that_holds_it() -> None:
    O = proto.Opcode
    tb, shadowed, named, log = TokenBucket(10, 3600), GCRA(1, 1, 1, shadow=True), Named("login"), SlidingLog(2, 1)
    conc = Concurrency(2, 30)
    # The one-frame acquire and peek of the hot path.
    for code, limit, at, flags, want in [
        (O.ACQUIRE, tb, None, 0, 1),
        (O.ACQUIRE, "token_bucket:max=10,refill_time=1h", 5, 1, 1),  # a spec, AT and STRICT
        (O.PEEK, SlidingWindow(5, 1), None, 0, 1),
        (O.ACQUIRE, tb, None, 16, 2),  # shadow=True
        (O.ACQUIRE, tb, 5, 17, 2),
        (O.ACQUIRE, shadowed, None, 0, 2),  # the spec's shadow=true
        (O.PEEK, shadowed, None, 0, 1),  # ignored by a peek
        (O.ACQUIRE, named, None, 0, 2),
        (O.PEEK, named, 5, 0, 2),
        (O.ACQUIRE, log, None, 0, 3),
        (O.ACQUIRE, "window_counters:limit=5,window=1s", 5, 16, 3),
        (O.PEEK, conc, None, 0, 3),
    ]:
        version, (op,) = _sent(decide_frame(7, code, "k", limit, 1, at, flags))
        assert version == want == proto.op_version(op), (code, limit, at, flags)
    # Every other call, each in a frame of its own.
    calls = [
        (item_call(O.ACQUIRE, "k", tb, 1, None, 1), 1),
        (item_call(O.ACQUIRE, "k", shadowed, 1, 5, 0), 2),
        (item_call(O.ACQUIRE, "k", tb, 1, None, 16), 2),
        (item_call(O.REFUND, "k", shadowed, 1, None, 0), 1),
        (item_call(O.RESET, "k", named, 0, None, 0), 2),
        (item_call(O.REFUND, "k", log, 1, None, 0), 3),
        (item_call(O.RESET, "k", conc, 0, None, 0), 3),
        (lease_call("k", conc), 3),
        (lease_call("k", "jobs"), 3),
        (release_call("k", conc, 1 << 63), 3),
        (multi_call([("a", tb), ("b", shadowed, 2, True)], None), 1),
        (multi_call([("a", tb), ("b", named)], 5), 2),
        (multi_call([("a", named), ("b", WindowCounters(5, 1, 4))], None), 3),
        (scan_call("k", 0, 10), 3),
        (simple_call(O.HELLO), 1),
        (simple_call(O.PING), 1),
        (simple_call(O.STATS), 1),
    ]
    for call, want in calls:
        assert call.version == want
        version, (op,) = _sent(pack([call], 1).payload)
        assert version == want == proto.op_version(op), call


def test_a_frame_of_several_calls_is_in_their_highest_version() -> None:
    O = proto.Opcode
    v1 = item_call(O.ACQUIRE, "k", LIMIT, 1, None, 0)
    v2 = item_call(O.ACQUIRE, "k", Named("login"), 1, None, 0)
    v3 = lease_call("k", Concurrency(2, 30))
    ping = simple_call(O.PING)
    for group, want in [([v1, ping, v1], 1), ([v1, v2, ping], 2), ([ping, v3, v1], 3), ([v2] * 3 + [v3], 3)]:
        assert _sent(pack(group, 1).payload)[0] == want
    # Split into frames, each in its own calls' highest.
    packed = pack([v1] * 256 + [v1, v2] + [ping] * 255 + [v3], 1)
    assert [(fid, len(g)) for fid, g in packed.frames] == [(1, 256), (2, 256), (3, 2)]
    versions, off = [], 0
    while off < len(packed.payload):
        h, off = proto.split_frame(packed.payload, off)
        assert h is not None
        versions.append(h.version)
    assert versions == [1, 2, 3]


def test_an_answer_in_the_requests_version_takes_the_fast_path() -> None:
    d = Decision(True, 5, 10, -1, 1, 0)
    for version in (1, 2, 3):
        f = proto.frame(proto.Kind.RESPONSE, 9, 1, proto.encode_decision(3, d), version)
        assert fast_decision(f, 9, 3, version) == d
        # Another version is left to the general path, which takes any the client reads.
        other = 1 + version % 3
        assert fast_decision(f, 9, 3, other) is None
        assert results(f, 9, [item_call(3, "k", LIMIT, 1, None, 0)]) == [d]
