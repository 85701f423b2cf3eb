"""The protocol core and the middleware core, driven without a socket: bytes in, bytes and
decisions out."""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

import pytest

from sluice import (
    Concurrency, Decision, InvalidLimit, Named, ProtocolError, SluiceError, TableFull, TokenBucket, Unavailable, proto,
)
from sluice._calls import item_call, simple_call
from sluice._middleware_core import APP, CALL, RESPOND, SHADOW_BAN, SLEEP, MiddlewareCore
from sluice._protocol_core import ProtocolCore, decide_call
from sluice.proto import Flags, Opcode
from sluice.results import Hello, Lease

LIMIT = TokenBucket(10, 3600)
BREAKER = (3, 0.25, 10.0)


def core(policy: str = "open") -> ProtocolCore:
    return ProtocolCore("/nonexistent/sluice.sock", 0.05, policy, breaker=BREAKER)


def answer(fid: int, d: Decision, version: int = 1, code: int = Opcode.ACQUIRE) -> bytes:
    return proto.frame(proto.Kind.RESPONSE, fid, 1, proto.encode_decision(code, d), version)


def hello_answer(fid: int, version: int) -> bytes:
    hello = Hello(version, proto.MAX_FRAME_LEN, proto.MAX_BATCH, proto.MAX_KEY_LEN, proto.MAX_MULTI, 1024, 128)
    return proto.frame(proto.Kind.RESPONSE, fid, 1, proto.encode_result(proto.Result(Opcode.HELLO, value=hello)), 1)


def test_frame_ids_count_up_and_wrap() -> None:
    c = core()
    c._id = 0xFFFFFFFE
    fid, payload = c._decide_request(Opcode.ACQUIRE, "k", LIMIT, 1, None, 0, False)
    assert fid == 0xFFFFFFFF == proto.parse_header(payload).id
    assert c._next_id() == 0
    packed = c._batch([simple_call(Opcode.PING)] * 300, 0)
    assert [fid for fid, _ in packed.frames] == [1, 2] and c._id == 2
    # A given id is kept: the asyncio client rebuilds a request in version 4 under its id.
    assert c._decide_request(Opcode.ACQUIRE, "k", LIMIT, 1, None, 0, False, 7)[0] == 7 and c._id == 2


def test_a_decision_in_the_requests_shape_takes_the_fast_path() -> None:
    c = core()
    fid, payload = c._decide_request(Opcode.ACQUIRE, "k", LIMIT, 1, None, 0, False)
    d = Decision(True, 9, 10, -1, 360_000_000_000, 0)
    assert not c._up
    assert c._decided(answer(fid, d), fid, Opcode.ACQUIRE, payload[4], LIMIT, False) == d
    assert c._up and c._answered_once
    # Another id, opcode or version, or an error result: the general path decides.
    for f in (answer(fid + 1, d), answer(fid, d, code=Opcode.PEEK), answer(fid, d, version=2),
              proto.frame(proto.Kind.RESPONSE, fid, 1, proto.encode_error(Opcode.ACQUIRE, 9, "full"), 1)):
        assert c._decided(f, fid, Opcode.ACQUIRE, payload[4], LIMIT, False) is None
    with pytest.raises(ProtocolError, match="out of step"):
        c._answers(answer(fid + 1, d), fid, (decide_call(Opcode.ACQUIRE, LIMIT),))
    (err,) = c._answers(proto.frame(proto.Kind.RESPONSE, fid, 1, proto.encode_error(Opcode.ACQUIRE, 9, "full"), 1),
                        fid, (decide_call(Opcode.ACQUIRE, LIMIT),))
    assert isinstance(err, TableFull)


def test_the_version_is_asked_once_per_connection() -> None:
    c = core()
    conn, other = object(), object()
    assert c._known_version(conn) is None and c._known_version(None) is None
    fid, hello = c._hello_request()
    assert proto.parse_header(hello).version == 1 and proto.decode_frame(hello)[1][0].code == Opcode.HELLO
    assert c._hello_answered(conn, hello_answer(fid, 4), fid) == 4
    assert c._known_version(conn) == 4 and c._known_version(other) is None
    # No answer (or a failed one): version 0, not asked again on that connection.
    assert c._hello_answered(other, None, 0) == 0 and c._known_version(other) == 0
    with pytest.raises(ProtocolError, match="out of step"):
        c._hello_answered(conn, hello_answer(fid + 1, 4), fid)
    assert c._known_version(conn) == 0


def test_a_named_limit_to_a_sidecar_of_version_4_carries_the_deadline() -> None:
    c = core()
    named = Named("login")
    _, payload = c._decide_request(Opcode.ACQUIRE, "k", named, 1, None, 0, True)
    h, (op,) = proto.decode_frame(payload)
    assert h.version == 4 and op.flags & Flags.DEADLINE and op.at > 0  # type: ignore[union-attr]
    _, payload = c._decide_request(Opcode.ACQUIRE, "k", named, 1, None, 0, False)
    h, (op,) = proto.decode_frame(payload)
    assert h.version == 2 and not op.flags & Flags.DEADLINE  # type: ignore[union-attr]
    # A pipeline's calls on named limits go in version 4 only to a sidecar that speaks it.
    calls = [item_call(Opcode.ACQUIRE, "k", named, 1, None, 0), item_call(Opcode.ACQUIRE, "k", LIMIT, 1, None, 0)]
    assert proto.parse_header(c._batch(calls, 3).payload).version == 2
    assert proto.parse_header(c._batch(calls, 4).payload).version == 4
    assert c._needs_version(calls) and not c._needs_version(calls[1:])


def test_the_core_remembers_which_named_limits_fail_closed() -> None:
    c = core("open")
    call = decide_call(Opcode.ACQUIRE, "login")
    closed = Decision(True, 1, 2, -1, 0, 0, fails_closed=True)
    # A frame before version 4 cannot say: nothing learned.
    c._answers(answer(1, closed, version=3), 1, (call,))
    assert c._fails_closed == frozenset()
    c._answers(answer(2, closed, version=4), 2, (call,))
    assert c._fails_closed == {"login"}
    # An outage: the policy says open, but this limit fails closed.
    d = c._unavailable(Unavailable("gone"), call)
    assert not d.allowed and d.degraded and d.outage == "closed"
    assert c._unavailable(Unavailable("gone"), decide_call(Opcode.ACQUIRE, "other")).allowed
    # A decision without the mark, on the fast path, forgets it.
    plain = Decision(True, 1, 2, -1, 0, 0)
    assert c._decided(answer(3, plain, version=4), 3, Opcode.ACQUIRE, 4, "login", True) == plain
    assert c._fails_closed == frozenset()
    assert c._unavailable(Unavailable("gone"), call).allowed
    assert c.degraded_decisions == 3


def test_the_policy_answers_only_for_a_sidecar_that_answered(caplog: Any) -> None:
    c = core("closed")
    acquire, ping = decide_call(Opcode.ACQUIRE, LIMIT), simple_call(Opcode.PING)
    with pytest.raises(Unavailable, match="never answered"):
        c._unavailable(Unavailable("gone"), acquire)
    c._answered()
    caplog.set_level(logging.INFO, logger="sluice")
    d = c._unavailable(Unavailable("gone"), acquire)
    assert not d.allowed and d.degraded and c.degraded_decisions == 1 and not c._up
    with pytest.raises(Unavailable, match="gone"):
        c._unavailable(Unavailable("gone"), ping)  # a ping decides nothing
    c._unavailable(Unavailable("gone"), acquire)
    c._answered()
    said = [r.getMessage() for r in caplog.records]
    assert sum("is unavailable" in m for m in said) == 1 and sum("answers again" in m for m in said) == 1
    # A batch the breaker refused, and one cut short: the policy completes it.
    out = c._refused([acquire, ping], False)
    assert not out[0].allowed and isinstance(out[1], Unavailable) and "not asking it" in str(out[1])
    out = c._finish([Decision(True, 1, 2, -1, 0, 0)], [acquire, acquire], Unavailable("gone"), False)
    assert out[0].allowed and out[1].degraded
    with pytest.raises(Unavailable):
        core("raise")._refused([acquire], True)


def test_the_start_check_is_the_drivers() -> None:
    checked: List[Tuple[str, Optional[float]]] = []

    class Checked(ProtocolCore):
        _start_check = staticmethod(lambda path, where, timeout: checked.append((where, timeout)))

    c = Checked("/nonexistent/sluice.sock", 0.5)
    assert checked == [("/nonexistent/sluice.sock", 0.5)] and c._answered_once
    assert not Checked("/nonexistent/sluice.sock", lazy=True)._answered_once and len(checked) == 1
    assert not core()._answered_once  # the core alone checks nothing


class FakeClient(ProtocolCore):
    """A client whose acquire and lease answer from a script, for the middleware core."""

    def __init__(self, *answers: Any) -> None:
        super().__init__("/nonexistent/sluice.sock", 0.05, "open", breaker=BREAKER)
        self._answered()
        self.answers = list(answers)
        self.asked: List[Tuple[str, Any]] = []

    def _next(self, what: str, key: Any) -> Any:
        self.asked.append((what, key))
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    def acquire(self, key: Any, limit: Any, cost: int = 1, shadow: bool = False) -> Any:
        return self._next("acquire", key)

    def lease(self, key: Any, limit: Any) -> Any:
        return self._next("lease", key)


def drive(mw: MiddlewareCore, request: Any) -> List[Tuple[int, Any]]:
    """Run the middleware core's steps for a request as an adapter would; the steps taken."""
    steps, taken, answer = mw._steps(request), [], None
    while True:
        taken.append(steps.send(answer))
        verb, arg = taken[-1]
        if verb not in (CALL, SLEEP):
            return taken
        answer = value_or_error(arg) if verb == CALL else None


def value_or_error(f: Any) -> Any:
    try:
        return f()
    except SluiceError as e:
        return e


def test_the_middleware_core_allows_denies_and_fails() -> None:
    allowed, denied = Decision(True, 4, 5, -1, 1_000_000_000, 0), Decision(False, 0, 5, 2_500_000_000, 3, 0)
    paced = Decision(True, 4, 5, -1, 1_000_000_000, 250_000_000)
    limit = "gcra:burst=4,count=1,period=1s"

    def mw(client: Any, **kw: Any) -> MiddlewareCore:
        return MiddlewareCore(None, client, limit, lambda req: req, name="api", **kw)

    steps = drive(mw(FakeClient(allowed)), "ip:1")
    assert [v for v, _ in steps] == [CALL, CALL, APP]
    add, lease = steps[-1][1]
    assert lease is None and [h for h, _ in add] == ["RateLimit-Policy", "RateLimit"]
    assert [v for v, _ in drive(mw(FakeClient(paced)), "ip:1")] == [CALL, CALL, SLEEP, APP]
    assert drive(mw(FakeClient(allowed), headers=False), "ip:1")[-1] == (APP, (None, None))

    steps = drive(mw(FakeClient(denied)), "ip:1")
    verb, resp = steps[-1]
    assert verb == RESPOND and (resp.status, resp.reason, resp.body) == (429, "Too Many Requests",
                                                                          b"Too Many Requests\n")
    assert resp.headers[:2] == [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "18")]
    assert ("Retry-After", "3") in resp.headers

    # None: not limited. A full table: the client's policy ("open") lets it through.
    assert [v for v, _ in drive(mw(FakeClient()), None)] == [CALL, APP]
    client = FakeClient(TableFull("full"))
    assert drive(mw(client), "ip:1")[-1] == (APP, (None, None)) and client.degraded_decisions == 1
    # A mistake: 500, never let through.
    verb, resp = drive(mw(FakeClient(InvalidLimit("no such limit"))), "ip:1")[-1]
    assert verb == RESPOND and (resp.status, resp.body) == (500, b"Internal Server Error\n")


def test_the_middleware_core_holds_a_concurrency_slot() -> None:
    conc = Concurrency(2, 30)
    held, full = Lease(True, 1, 2, -1, 0, 0, id=77), Lease(False, 0, 2, 5_000_000_000, 0, 0)
    mw = MiddlewareCore(None, FakeClient(held), None, lambda req: req, concurrency=conc,
                        concurrency_key=lambda req: "c:" + req)
    steps = drive(mw, "ip")
    add, lease = steps[-1][1]
    assert lease == ("c:ip", 77) and [h for h, _ in add] == ["RateLimit-Policy", "RateLimit"]
    verb, resp = drive(MiddlewareCore(None, FakeClient(full), None, lambda req: req, concurrency=conc), "ip")[-1]
    assert verb == RESPOND and resp.status == 429 and not any(h == "Retry-After" for h, _ in resp.headers)
    # Shadow: a full concurrency limit lets the request through holding nothing, or shadow-bans it.
    mw = MiddlewareCore(None, FakeClient(full), None, lambda req: req, concurrency=conc, shadow=True)
    verb, (add, lease) = drive(mw, "ip")[-1]
    assert verb == APP and lease is None
    mw = MiddlewareCore(None, FakeClient(full), None, lambda req: req, concurrency=conc, shadow=True,
                        shadow_ban=object())
    assert drive(mw, "ip")[-1] == (SHADOW_BAN, None)


def test_a_key_functions_error_is_the_apps() -> None:
    def key(req: Any) -> Optional[str]:
        raise TableFull("from the key function")
    with pytest.raises(TableFull, match="key function"):
        drive(MiddlewareCore(None, FakeClient(), LIMIT, key), "ip")
