"""The failure policy: what a call gets when the sidecar cannot be asked, and when to stop asking.

- ``on_unavailable`` ("open", "closed", "raise") answers acquire, peek, multi and lease when
  the sidecar cannot be asked (:func:`degraded`); every other operation raises
  :class:`Unavailable`.
- :class:`Breaker`, the circuit breaker, stops a client from asking a sidecar that accepts
  connections but does not answer.
- The errors of a sidecar that cannot be asked, in words.

No I/O: :class:`sluice._protocol_core.ProtocolCore` applies the policy for both clients.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ._calls import Call
from ._gotime import format_duration
from .errors import SluiceError, StatusError, Unavailable
from .limits import Concurrency, Limit
from .proto import Opcode
from .results import DEGRADED_CLOSED, DEGRADED_CLOSED_LEASE, DEGRADED_OPEN, DEGRADED_OPEN_LEASE, MultiDecision

log = logging.getLogger("sluice")

#: The on_unavailable policies.
POLICIES = ("open", "closed", "raise")

#: The default seconds a call waits to connect and for its answer. The
#: sidecar is on the same host: a round trip takes tens of microseconds,
#: and the slowest answers of a host loaded to saturation stay within a few
#: milliseconds (README, "Failure policy"), so an answer that has not come
#: after 50 ms is not coming soon.
DEFAULT_TIMEOUT = 0.05

#: The default on_unavailable policy, the same as the Go client's.
DEFAULT_POLICY = "open"

#: The circuit breaker's defaults: consecutive calls without an answer in
#: time that open it, and its first and longest open periods, seconds.
BREAKER_THRESHOLD = 3
BREAKER_MIN_OPEN = 0.25
BREAKER_MAX_OPEN = 10.0

#: The least seconds between two log lines about decisions the
#: on_unavailable policy made.
DEGRADED_LOG_INTERVAL = 10.0

CLOSED, OPEN, PROBING = 0, 1, 2



def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"on_unavailable must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy

def degraded(policy: str, call: Call, exc: Unavailable) -> Any:
    """The answer of the on_unavailable policy to a call the sidecar could not answer."""
    if policy == "raise" or not call.decides:
        raise exc
    if call.code == Opcode.LEASE:  # a lease granted by policy holds nothing to release
        return DEGRADED_OPEN_LEASE if policy == "open" else DEGRADED_CLOSED_LEASE
    d = DEGRADED_OPEN if policy == "open" else DEGRADED_CLOSED
    if call.code == Opcode.MULTI:
        return MultiDecision(d.allowed, (d,) * call.n, degraded=True)
    return d


def finish(out: List[Any], calls: Sequence[Any], failure: Optional[Exception],
           unavailable: Callable[[Any, Any], Any], raise_on_error: bool) -> List[Any]:
    """Complete a batch's results: the calls a failure left unanswered get
    what the failure policy says (``unavailable(failure, call)``, or the
    Unavailable it raises), then the first error is raised if asked."""
    if failure is not None:
        for call in calls[len(out):]:
            try:
                out.append(unavailable(failure, call))
            except Unavailable as e:
                out.append(e)
    if raise_on_error:
        for v in out:
            if isinstance(v, SluiceError):
                raise v
    return out


class Breaker:
    """Stops a client from asking a sidecar that does not answer.

    After ``threshold`` consecutive calls without an answer in time
    (:class:`Unavailable` with ``timed_out`` set), it opens: calls fail at
    once, and the on_unavailable policy answers them, for an open period
    that doubles after each failed probe from ``min_open`` up to
    ``max_open`` seconds, each drawn at random from its upper half (so that
    the processes of a host do not probe in step). Then one call, the
    probe, goes to the sidecar: an answer closes the breaker, no answer in
    time opens it again. Fast failures (no socket, a refused or broken
    connection) count neither way: they cost nothing to find out.

    Each opening and closing is logged once. Thread-safe: its state changes
    under a lock; a closed breaker costs a call one attribute read.
    """

    __slots__ = ("threshold", "min_open", "max_open", "path", "state", "fails", "open_until", "opens", "_lock")

    def __init__(self, path: str, threshold: int = BREAKER_THRESHOLD, min_open: float = BREAKER_MIN_OPEN,
                 max_open: float = BREAKER_MAX_OPEN) -> None:
        self.threshold = threshold if threshold > 0 else 1 << 62
        self.min_open = max(min_open, 0.001)
        self.max_open = max(max_open, self.min_open)
        self.path = path
        self.state = CLOSED
        self.fails = 0
        self.open_until = 0.0
        self.opens = 0
        self._lock = threading.Lock()

    def allow(self) -> Tuple[bool, bool]:
        """Whether a call may go to the sidecar, and whether it is the probe."""
        if self.state == CLOSED:
            return True, False
        with self._lock:
            if self.state != OPEN or time.monotonic() < self.open_until:
                return False, False
            self.state = PROBING
            return True, True

    def done(self, probe: bool, exc: Optional[BaseException]) -> None:
        """Record the outcome of a call ``allow`` let through: None if the sidecar answered.

        A probe that gets an answer closes the breaker; the client logs that the sidecar
        answers again (Availability), once."""
        timed_out = isinstance(exc, Unavailable) and exc.timed_out
        if probe:
            with self._lock:
                if exc is None or isinstance(exc, SluiceError) and not isinstance(exc, Unavailable):
                    self.fails, self.opens, self.state = 0, 0, CLOSED
                elif timed_out:
                    self._open()
                else:
                    self.open_until, self.state = 0.0, OPEN  # the next call probes instead
            return
        if exc is None or isinstance(exc, SluiceError) and not isinstance(exc, Unavailable):
            if self.fails:
                self.fails = 0
        elif timed_out:
            with self._lock:
                self.fails += 1
                if self.fails >= self.threshold and self.state == CLOSED:
                    self.opens = 0
                    d = self._open()
                    log.warning("the Sluice sidecar at %s is not answering (%d calls timed out), so calls fail "
                                "at once and on_unavailable decides until a probe gets an answer; "
                                "the first probe in %.0f ms", self.path, self.fails, d * 1000)

    def _open(self) -> float:
        d = min(self.min_open * (2 ** min(self.opens, 60)), self.max_open)
        d = d / 2 + random.random() * d / 2
        self.opens += 1
        self.open_until = time.monotonic() + d
        self.state = OPEN
        return d

    def retry_in(self) -> float:
        """Seconds until the next probe; 0 when closed."""
        if self.state == CLOSED:
            return 0.0
        return max(0.0, self.open_until - time.monotonic())


#: The error of a call the open breaker did not let through.
def breaker_open(path: str) -> Unavailable:
    return Unavailable(f"the sidecar at {path} did not answer the last calls, so the client is not asking it for now")


def cannot_connect(where: str, e: BaseException, timed_out: bool) -> Unavailable:
    """The error of a failed connect to the socket at ``where``: "nothing listens at" it if the
    socket file is missing or nobody listens on it."""
    if timed_out:
        err = Unavailable(f"the sidecar is unavailable: cannot connect to {where}: timed out")
    elif isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        err = Unavailable(f"the sidecar is unavailable: nothing listens at {where}: {e.strerror or e}")
    else:
        err = Unavailable(f"the sidecar is unavailable: cannot connect to {where}: "
                          f"{getattr(e, 'strerror', None) or e}")
    err.timed_out = timed_out
    return err


def no_answer(where: str, timeout: Optional[float], cause: Optional[BaseException] = None) -> Unavailable:
    """The error of a call whose answer did not come from the socket at ``where`` within ``timeout``."""
    err = Unavailable(f"the sidecar is unavailable: no answer from {where} within {timeout}s")
    err.timed_out = True
    err.__cause__ = cause
    return err


def never_answered(e: Unavailable) -> Unavailable:
    """The error of a call to a sidecar that has never answered the client (see Availability)."""
    cls = type(e) if isinstance(e, StatusError) else Unavailable
    err = cls(f"{e} (it has never answered this client, so on_unavailable does not apply)")
    err.timed_out = e.timed_out
    err.__cause__ = e
    return err


def release_failed(limit: Limit, key: Any, lease_id: int, e: SluiceError) -> None:
    """Log a release the sidecar did not do: the lease expires on its own after the limit's lease time."""
    within = format_duration(limit.lease_ns) if isinstance(limit, Concurrency) else "its lease time"
    log.warning("could not release lease %d of %s for %r (%s); it expires on its own within %s",
                lease_id, limit, key, e, within)
