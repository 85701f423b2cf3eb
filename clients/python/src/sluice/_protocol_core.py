"""The client side of the native protocol without I/O: the one core both clients drive.

As h11 and hyper-h2 do for HTTP, :class:`ProtocolCore` turns calls into request bytes and
response bytes into answers and decisions, and keeps everything a client must remember
between them; :class:`sluice.Client` (blocking sockets, a lock) and :class:`sluice.AsyncClient`
(an asyncio transport, futures) only move the bytes and wait. The core holds:

- the frame ids (:meth:`ProtocolCore._next_id`: one counter per client, mod 2**32);
- version negotiation: the protocol version of the sidecar at the other end of a connection
  (asked with a HELLO before the first call on a named limit, so that the request can tell a
  sidecar of version 4 the client's deadline and learn whether the limit fails closed);
- what each answer means (:meth:`~ProtocolCore._decided`, :meth:`~ProtocolCore._answers`):
  checked against its request, the sidecar seen answering, and the per-limit-name memory of
  which named limits fail closed;
- the failure policy (:mod:`sluice._policy`): the circuit breaker, ``on_unavailable``'s
  answers to the calls the sidecar could not answer, and the log lines, once each way.

A client *is* a core (a subclass), so that the hot path reads its state as attributes of one
object. The core can be made and driven without a socket: ``tests/test_protocol_core.py``.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from typing import Any, Callable, FrozenSet, List, Optional, Sequence, Tuple, Union

from . import proto
from ._answers import DECISION_FRAME, DECISION_FRAME_LEN, DECISION_FRAME_SIZE, hello_version, results
from ._calls import (
    At, Call, Frames, Key, LimitLike, any_named, deadline_ns, decide_frame, hello_frame, name_of, named_versions, pack,
)
from ._policy import (
    BREAKER_MAX_OPEN, BREAKER_MIN_OPEN, BREAKER_THRESHOLD, CLOSED, DEFAULT_POLICY, DEFAULT_TIMEOUT,
    DEGRADED_LOG_INTERVAL, Breaker, breaker_open, cannot_connect, check_policy, degraded, finish,
    never_answered,
)
from .errors import SluiceError, Unavailable
from .proto import Opcode
from .results import DEGRADED_FAILS_CLOSED, Decision, MultiDecision

log = logging.getLogger("sluice")

#: The sidecar's default socket, relative to the working directory (as sluiced's).
DEFAULT_SOCKET = "var/sluice.sock"

#: The size of sun_path: a socket's path is at most one byte shorter (its terminating NUL).
_MAX_SOCKET_PATH = 108

_DECISION_FRAME_UNPACK = DECISION_FRAME.unpack_from
_new = object.__new__
_setattr = object.__setattr__
_ACQUIRE, _REFUND = int(Opcode.ACQUIRE), int(Opcode.REFUND)
_DECIDES = (int(Opcode.ACQUIRE), int(Opcode.PEEK))


def resolve_socket_path(path: Optional[Union[str, "os.PathLike[str]"]]) -> Tuple[str, str]:
    """The socket to use: ``path``, else $SLUICE_SOCKET, else var/sluice.sock; as (its absolute
    path, for people; what to connect to). A relative path is resolved against the working
    directory once, here: the absolute one is connected to, unless it is too long for a socket
    address where the relative one is not. An abstract socket ("\\0...", "@...") stays as given."""
    if path is None:
        path = os.environ.get("SLUICE_SOCKET") or DEFAULT_SOCKET
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p or p[0] in "\0@":
        return p, p
    abs_path = os.path.abspath(p)
    if len(os.fsencode(abs_path)) >= _MAX_SOCKET_PATH > len(os.fsencode(p)):
        return abs_path, p
    return abs_path, abs_path


def decide_call(code: int, limit: LimitLike) -> Call:
    """The call of an acquire or peek sent by :func:`decide_frame`, for the policy and the
    decoder: its opcode and its limit's name."""
    return Call(b"", code, True, 0, 1, name_of(limit))


_cores: "weakref.WeakSet[ProtocolCore]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for core in list(_cores):
        core._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ProtocolCore:
    """One client's side of the protocol, without I/O; see the module doc.

    Its arguments are the clients', checked here (:class:`sluice.Client` documents them). A
    client made without ``lazy`` runs the driver's start check (``_start_check``) here; the
    core alone has none. After ``os.fork``, each client in the child forgets the connection
    it inherited (the driver's ``_forget``), and opens its own on first use. The sidecar's availability, as this client sees it: the
    ``on_unavailable`` policy decides only for a sidecar that has answered this client before
    (an outage of a sidecar that was there): until the first answer (a client made with
    ``lazy=True``), every call raises :class:`Unavailable`, whatever the policy, since a
    sidecar that has never answered is as likely a wrong path as one still starting. Each
    change between answering and unavailable is logged once: the first unavailable call after
    an answer (WARNING), the first answer after that (INFO); a connection that is accepted but
    not answered (a stopped sidecar) is not an answer. It counts and logs (at most every
    DEGRADED_LOG_INTERVAL seconds) the calls its failure policy answered.

    Its state changes where the driver serializes its calls (the sync client's lock, the
    asyncio client's loop), but for the fails-closed memory, which is replaced, never changed,
    so that a call reads it without a lock.
    """

    #: The sidecar's last answer is newer than its last failure, and there was one: the hot
    #: path's one check (``if not self._up``) before it calls _answered.
    _up = False
    _answered_once = False  # the sidecar has answered this client at least once
    _down = False  # the last call found it unavailable (after an answer), and said so
    #: Decisions the on_unavailable policy made ("open" or "closed") since the client was created.
    degraded_decisions = 0
    #: The names of the limits that fail closed, as the last decision (in a frame of version 4)
    #: on each said.
    _fails_closed: FrozenSet[str] = frozenset()
    _degraded_logged = 0  # degraded_decisions at the last log line
    _degraded_log_at = -DEGRADED_LOG_INTERVAL  # time.monotonic() of the last log line

    #: The driver's start check: connect to the socket (its path to connect to, its absolute
    #: path for people, the timeout), PING, and raise what a call would if that fails.
    _start_check: Optional[Callable[[str, str, Optional[float]], None]] = None

    def __init__(self, socket_path: Optional[Union[str, "os.PathLike[str]"]] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, on_unavailable: str = DEFAULT_POLICY, *,
                 breaker: Tuple[int, float, float] = (BREAKER_THRESHOLD, BREAKER_MIN_OPEN, BREAKER_MAX_OPEN),
                 lazy: bool = False) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        self.socket_path, self._path = resolve_socket_path(socket_path)
        self.timeout = timeout
        self.on_unavailable = check_policy(on_unavailable)
        self._breaker = Breaker(self.socket_path, *breaker)
        self._id = 0
        self._version_of: Any = None  # the connection whose sidecar's version is known
        self._version = 0  # its protocol version (0: its HELLO failed)
        self._forget()
        if not lazy and self._start_check is not None:
            self._start_check(self._path, self.socket_path, timeout)
            self._answered()
        _cores.add(self)

    def _forget(self) -> None:
        """The driver's: start without a connection (when the client is made, and in the child
        after fork, where the connection is the parent's)."""

    def healthy(self) -> bool:
        """Whether the client asks the sidecar: False while its circuit breaker is open."""
        return self._breaker.state == CLOSED

    # ---- requests ------------------------------------------------------------

    def _next_id(self) -> int:
        """The next frame id."""
        self._id = fid = (self._id + 1) & 0xFFFFFFFF
        return fid

    def _decide_request(self, code: int, key: Key, limit: LimitLike, n: Any, at: At, flags: int,
                        v4: bool, fid: int = 0, v7: bool = False) -> Tuple[int, bytes]:
        """The id and the whole frame of an acquire or peek (the hot path): frame ``fid``, or
        the next one. ``v4``: the sidecar speaks version 4 and the limit is named, so the
        request carries the client's deadline (the sidecar answers before the client gives up)
        and its answer says whether the limit fails closed. ``v7``: the sidecar speaks version 7,
        so the request asks for each limit's decision of a list (ALL). Bad arguments raise here,
        before any I/O."""
        dl = deadline_ns(self.timeout) if v4 and self.timeout is not None else 0
        if not fid:
            self._id = fid = (self._id + 1) & 0xFFFFFFFF
        return fid, decide_frame(fid, code, key, limit, n, at, flags, dl, v4, v7)

    def _batch(self, calls: Sequence[Call], version: int) -> Frames:
        """The frames of calls (a pipeline, or one call) to a sidecar of protocol ``version``:
        calls on named limits go in version 4 to a sidecar that speaks it, their leases and
        releases in version 5 to one that speaks it."""
        if version >= 4 and any_named(calls):
            calls = named_versions(calls, version)
        packed = pack(calls, (self._id + 1) & 0xFFFFFFFF)
        self._id = packed.frames[-1][0]
        return packed

    # ---- version negotiation -------------------------------------------------

    @staticmethod
    def _needs_version(calls: Sequence[Call]) -> bool:
        """Whether sending calls needs the sidecar's version: a call is on a named limit."""
        return any_named(calls)

    def _known_version(self, conn: Any) -> Optional[int]:
        """The protocol version of the sidecar at the other end of ``conn`` (0: its HELLO
        failed), or None if not asked yet on it."""
        return self._version if self._version_of is conn and conn is not None else None

    def _hello_request(self) -> Tuple[int, bytes]:
        """The id and frame of a HELLO asking the sidecar's version, in version 1: every
        sidecar answers it."""
        fid = self._next_id()
        return fid, hello_frame(fid)

    def _hello_answered(self, conn: Any, f: Optional[proto.Buffer], fid: int) -> int:
        """Remember what the answer ``f`` to HELLO ``fid`` on ``conn`` says of the sidecar's
        version, and return it: 0 for no answer (None). Raises the error result, or
        ProtocolError, after remembering 0."""
        self._version_of, self._version = conn, 0
        if f is not None:
            self._version = hello_version(f, fid)
        return self._version

    # ---- answers -------------------------------------------------------------

    def _decided(self, f: proto.Buffer, fid: int, code: int, version: int, limit: LimitLike, v4: bool) -> Any:
        """The Decision of the one-result frame ``f`` answering the acquire or peek of
        _decide_request in its common shape, else None (anything unusual: an error result,
        another id, bad bytes, a mark): the general path (:meth:`_answers`) decodes and reports
        it. ``version`` is the request's: the sidecar answers in it."""
        if len(f) != DECISION_FRAME_SIZE:
            return None
        length, ver, kind, count, rid, rcode, status, allowed, rem, lim, ra, rs, dl = _DECISION_FRAME_UNPACK(f)
        if rid != fid or rcode != code or status or allowed > 1 or count != 1 or length != DECISION_FRAME_LEN \
                or ver != version or kind != 2:
            return None
        if not self._up:
            self._answered()
        if v4 and self._fails_closed:  # a decision without the mark
            self._fails_closed_is(name_of(limit), False)  # type: ignore[arg-type]
        d = _new(Decision)  # make_decision, inlined: the hot path
        _setattr(d, "__dict__", {"allowed": allowed == 1, "remaining": rem, "limit": lim, "retry_after_ns": ra,
                                 "reset_after_ns": rs, "delay_ns": dl, "degraded": False, "shadow_denied": False,
                                 "outage": None, "fails_closed": False})
        return d
    def _answers(self, f: proto.Buffer, fid: int, calls: Sequence[Call]) -> List[Any]:
        """The answers of response frame ``f`` to ``calls`` (sent as frame ``fid``): values, or
        exceptions of error results. Raises the frame-level error or ProtocolError: the
        driver closes the connection, since nothing after it can be trusted."""
        out = results(f, fid, calls)
        if not self._up:
            self._answered()
        if f[4] >= 4:  # a frame before version 4 cannot say whether a limit fails closed
            for call, v in zip(calls, out):
                if call.name is not None and _ACQUIRE <= call.code <= _REFUND and isinstance(v, Decision):
                    self._fails_closed_is(call.name, v.fails_closed)
                elif call.names and f[4] >= proto.LIST_VERSION and isinstance(v, MultiDecision):  # MULTI
                    for name, d in zip(call.names, v.decisions):
                        if name is not None:
                            self._fails_closed_is(name, d.fails_closed)
        return out

    def _fails_closed_is(self, name: str, closed: bool) -> None:
        """Record whether the named limit fails closed."""
        known = self._fails_closed
        if (name in known) != closed:
            self._fails_closed = known | {name} if closed else known - {name}

    def _answered(self) -> None:
        """The sidecar answered a call (a result, even an error result)."""
        self._answered_once = True
        self._up = True
        if self._down:
            self._down = False
            log.info("the Sluice sidecar at %s answers again", self.socket_path)

    # ---- the failure policy --------------------------------------------------

    def _unavailable(self, e: Unavailable, call: Any) -> Any:
        """The on_unavailable policy's answer to a call the sidecar could not be asked about,
        or e raised: for a call the policy does not decide, and before the first answer."""
        if not self._answered_once:
            raise never_answered(e) if call.decides else e
        self._up = False
        if not self._down:
            self._down = True
            log.warning("the Sluice sidecar at %s is unavailable (%s); on_unavailable=%s decides until it answers",
                        self.socket_path, e, self.on_unavailable)
        return self._by_policy(e, call)

    def _outage(self, probe: bool, e: Unavailable, call: Any) -> Any:
        """The answer to a call the breaker let through (``probe``: as its probe) and the sidecar
        could not answer: the failure recorded with the breaker, then the policy's answer."""
        self._breaker.done(probe, e)
        return self._unavailable(e, call)

    def _by_policy(self, e: SluiceError, call: Any) -> Any:
        """The on_unavailable policy's answer to a call the sidecar could not decide (e raised
        for "raise", and for a call that decides nothing), counted and logged: a denial marked
        ``outage="closed"`` for an acquire or peek of a limit the sidecar said fails closed, and for
        each item of a multi with such a limit."""
        name, known = call.name, self._fails_closed
        if name is not None and name in known and self.on_unavailable != "raise" and call.code in _DECIDES:
            d = DEGRADED_FAILS_CLOSED
        elif call.names and self.on_unavailable != "raise" and not known.isdisjoint(call.names):  # MULTI
            d = MultiDecision(False, (DEGRADED_FAILS_CLOSED,) * call.n, degraded=True)
        else:
            d = degraded(self.on_unavailable, call, e)  # type: ignore[arg-type]
        self.degraded_decisions += 1
        now = time.monotonic()
        if now - self._degraded_log_at >= DEGRADED_LOG_INTERVAL:
            self._degraded_log_at = now
            n, self._degraded_logged = self.degraded_decisions - self._degraded_logged, self.degraded_decisions
            log.warning("%d decisions made by on_unavailable=%s, not by the Sluice sidecar at %s (%d in all): %s",
                        n, self.on_unavailable, self.socket_path, self.degraded_decisions, e)
        return d

    def _refused(self, calls: Sequence[Call], raise_on_error: bool) -> List[Any]:
        """The answers to calls the open breaker did not let through: the policy's."""
        return finish([], calls, breaker_open(self.socket_path), self._unavailable, raise_on_error)

    def _finish(self, out: List[Any], calls: Sequence[Call], failure: Optional[Unavailable],
                raise_on_error: bool) -> List[Any]:
        """out, the answers to the first calls, completed by the policy's for the calls
        ``failure`` left unanswered; the first error raised if asked."""
        return finish(out, calls, failure, self._unavailable, raise_on_error)

    def _cannot_connect(self, e: BaseException, timed_out: bool) -> Unavailable:
        return cannot_connect(self.socket_path, e, timed_out)

    def _lost(self, e: BaseException) -> Unavailable:
        """The error of a connection lost in the middle of an exchange."""
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        err = Unavailable(f"the sidecar is unavailable: lost the connection to {self.socket_path}: {why}")
        err.__cause__ = e
        return err

