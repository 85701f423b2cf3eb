"""What the ``limits`` storages ask the sidecar, shared by the sync and the asyncio one.

Each storage method is a *plan*: a generator that yields the operations of
one round trip (a list of :class:`Op`, sent in one write) and receives their
answers, as many times as it needs (once, but for ``get_moving_window`` and
``reset``), and returns the method's result. :func:`run` (here) and the
asyncio storage's driver send the operations with a client; a
:class:`~sluice.SluiceError` the client raises is thrown into the plan,
which may answer it (``check``, ``reset``) or let it pass.

The mapping (the module docs of :mod:`sluice.limits_storage` say it for
users):

- fixed window: a ``token_bucket`` of ``MAX`` tokens that refills whole
  every ``expiry`` seconds from its first write, so that its window starts
  at the first hit, as limits defines it (a ``fixed_window`` would start at
  multiples of ``expiry`` since the epoch), its count never stops a request
  (it goes on counting past the limit, as Redis's INCR), and it reads back
  exactly as ``MAX - remaining``; ``incr`` is an acquire of ``amount``,
  ``get`` and ``get_expiry`` a peek, ``clear`` a reset.
- moving window: a ``sliding_log`` of ``limit`` per ``expiry`` (above
  :data:`MAX_LOG`, a ``window_counters`` of 64 sub-windows, never more
  lenient); ``acquire_entry`` an acquire, ``get_moving_window`` a peek.
- sliding window counter: a ``sliding_window`` counting every request as
  :data:`SCALE` units against ``SCALE * (limit + 1) - 1``, which admits what
  limits' floor of the weighted count admits; ``get_sliding_window`` reads
  both windows' raw counts with two peeks at the start of this window and
  of the next (a peek at a window's start weighs the previous count fully).

A window's length comes from the call where limits passes it, and from
limits' key (``.../AMOUNT/MULTIPLES/GRANULARITY``, as
``RateLimitItem.key_for`` makes it) where it does not (``get``,
``get_expiry``, ``clear``, ``reset``).
"""

from __future__ import annotations

import hashlib
import math
import time
import urllib.parse
from functools import lru_cache
from typing import Any, Callable, Dict, Generator, List, NamedTuple, Optional, Tuple, TypeVar

from limits.errors import ConfigurationError
from limits.limits import GRANULARITIES

from .errors import SluiceError, Unsupported
from .limits import Algorithm, Limit, SlidingLog, SlidingWindow, TokenBucket, WindowCounters
from .proto import MAX_KEY_LEN
from .results import Decision, ScanEntry

T = TypeVar("T")

#: The most a count may reach: the fixed window's tokens, and the readers' limit.
MAX = (1 << 63) - 1
#: The sidecar's largest sliding_log limit (bucket.MaxLogLimit); above it a moving window is a
#: window_counters of MAX_COUNTERS sub-windows.
MAX_LOG = 4096
MAX_COUNTERS = 64
#: Units one request counts in a sliding window counter's bucket (see sliding_limit).
SCALE = 1_000_000
#: The largest sliding window counter limit the bucket holds: SCALE * (limit + 1) - 1 <= MAX.
MAX_SLIDING = (MAX + 1) // SCALE - 1
#: Entries per scan page, and resets per round trip, of reset().
SCAN_COUNT = 1000
RESET_BATCH = 256
#: Marks a key that stands for a longer one, as the Go middleware stores mark theirs.
DIGEST_MARK = "sha256:"
DEFAULT_PREFIX = "LIMITS"
_NS = 1_000_000_000


class Op(NamedTuple):
    """One client call: its method name (``acquire``, ``peek``, ``reset``, ``multi``,
    ``scan_page``, ``ping``) and arguments; a Client and a Pipeline both have them."""

    name: str
    args: Tuple[Any, ...]
    at: Optional[int] = None  #: Unix seconds: a peek at that time instead of the sidecar's clock

    def call(self, target: Any) -> Any:
        fn = getattr(target, self.name)
        return fn(*self.args) if self.at is None else fn(*self.args, at=self.at)


#: A storage method: yields the operations of each round trip, gets their answers, returns the result.
Plan = Generator[List[Op], List[Any], T]


def step(plan: Plan[T], answers: Optional[List[Any]] = None, error: Optional[SluiceError] = None) -> Tuple[bool, Any]:
    """Advance a plan with its round trip's answers (None to start it) or the error the client
    raised: (True, the method's result) when it is done, else (False, the next round trip)."""
    try:
        return False, plan.throw(error) if error is not None else plan.send(answers)
    except StopIteration as stop:
        return True, stop.value


def run(plan: Plan[T], send: Callable[[List[Op]], List[Any]]) -> T:
    """Carry out a plan with ``send``, which sends one round trip's operations and returns
    their answers; its :class:`SluiceError` is thrown into the plan."""
    done, v = step(plan)
    while not done:
        try:
            answers = send(v)
        except SluiceError as e:
            done, v = step(plan, error=e)
        else:
            done, v = step(plan, answers)
    return v  # type: ignore[no-any-return]


def parse_tail(key: str) -> Optional[Tuple[int, int]]:
    """The limit amount and window seconds of a key of limits' (``.../10/1/minute``), else None."""
    parts = key.rsplit("/", 3)
    if len(parts) != 4:
        return None
    amount, multiples, name = parts[1:]
    item = GRANULARITIES.get(name)
    if item is None or not (amount.isascii() and amount.isdigit() and multiples.isascii() and multiples.isdigit()):
        return None
    return int(amount), int(multiples) * item.GRANULARITY.seconds


@lru_cache(maxsize=1024)
def fixed_limit(expiry: int) -> Limit:
    """The fixed window of ``expiry`` seconds that counts without limit: MAX tokens, all back
    ``expiry`` after the first is taken, and every ``expiry`` after that."""
    return TokenBucket(MAX, expiry, MAX)


@lru_cache(maxsize=1024)
def log_limit(limit: int, expiry: int) -> Limit:
    """The moving window of ``limit`` per ``expiry`` seconds."""
    if limit <= MAX_LOG:
        return SlidingLog(limit, expiry)
    return WindowCounters(limit, expiry, counters=MAX_COUNTERS)


@lru_cache(maxsize=1024)
def sliding_limit(limit: int, expiry: int) -> Limit:
    """The sliding window counter of ``limit`` per ``expiry`` seconds, in units of SCALE.

    limits admits a request of ``amount`` iff floor(weighted) + amount <= limit, that is iff
    weighted + amount < limit + 1; the bucket admits iff SCALE * (weighted + amount) <=
    SCALE * (limit + 1) - 1, the same but where the weighted count is within 1/SCALE below an
    integer, where it denies.
    """
    if limit > MAX_SLIDING:
        raise ConfigurationError(f"a sliding window counter limit may be at most {MAX_SLIDING}, got {limit}")
    return SlidingWindow(SCALE * (limit + 1) - 1, expiry)


@lru_cache(maxsize=1024)
def sliding_reader(expiry: int) -> Limit:
    """A limit on the sliding window counter's bucket that reads its counts whole (the limit
    is not part of a sliding_window bucket's identity)."""
    return SlidingWindow(MAX, expiry)


def count(d: Decision) -> int:
    """The count of a bucket of MAX tokens (fixed window) or read through a limit of MAX."""
    return MAX - d.remaining


def options(uri: Optional[str], scheme: str, given: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
    """The socket path and options of a storage URI (``sluice:///run/sluice.sock?timeout=0.2``).

    The path is everything between ``://`` and ``?``, percent-decoded, and may be relative;
    empty means the client's default ($SLUICE_SOCKET, else var/sluice.sock). Query options
    and keyword options (keyword ones win) are ``timeout`` (seconds, or "none"),
    ``key_prefix`` and ``lazy`` (true or false); anything else is a :class:`ConfigurationError`.
    """
    path: Optional[str] = None
    query: Dict[str, Any] = {}
    if uri is not None:
        head = scheme + "://"
        if not uri.startswith(head):
            raise ConfigurationError(f"a {scheme} storage URI starts with {head}, got {uri!r}")
        rest, _, qs = uri[len(head):].partition("?")
        path = urllib.parse.unquote(rest) or None
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(qs, keep_blank_values=True).items()}
    opts = {**query, **given}
    unknown = sorted(set(opts) - {"timeout", "key_prefix", "lazy"})
    if unknown:
        raise ConfigurationError(f"unknown {scheme} storage option {unknown[0]!r}: the options are timeout, "
                                 "key_prefix and lazy")
    out: Dict[str, Any] = {"key_prefix": str(opts.get("key_prefix", DEFAULT_PREFIX))}
    lazy = opts.get("lazy", False)
    if not isinstance(lazy, bool):
        lazy = _BOOLS.get(str(lazy).lower())
        if lazy is None:
            raise ConfigurationError(f"the {scheme} storage's lazy is true or false, got {opts['lazy']!r}")
    out["lazy"] = lazy
    if "timeout" in opts:
        t = opts["timeout"]
        try:
            out["timeout"] = None if str(t).lower() == "none" else float(t)
        except ValueError:
            out["timeout"] = -1.0
        if out["timeout"] is not None and not 0 < out["timeout"] < math.inf:
            raise ConfigurationError(f"the {scheme} storage's timeout is seconds above 0 or none, got {t!r}")
    return path, out


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def client_of(uri: Optional[str], scheme: str, given: Dict[str, Any], client: Callable[..., T]) -> Tuple[Plans, T]:
    """The plans and the client of a storage: ``client`` (Client or AsyncClient) made with the
    URI's socket, timeout and lazy, raising when the sidecar cannot be asked."""
    path, opts = options(uri, scheme, given)
    return Plans(opts.pop("key_prefix")), client(path, on_unavailable="raise", **opts)


class Plans:
    """The plans of one storage: its key prefix and how it maps limits' keys to the sidecar's."""

    def __init__(self, key_prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = key_prefix + ":" if key_prefix else ""

    def key(self, key: str) -> bytes:
        """The sidecar's key for a key of limits: the prefix and the key or, past the sidecar's
        1024 bytes, the prefix, the key's SHA-256 and its limit tail (so reset() still reads it)."""
        k = (self.prefix + key).encode("utf-8", "surrogatepass")
        if len(k) <= MAX_KEY_LEN:
            return k
        tail = "/" + "/".join(key.rsplit("/", 3)[1:]) if parse_tail(key) else ""
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return (self.prefix + DIGEST_MARK + digest + tail).encode("utf-8", "surrogatepass")

    @staticmethod
    def tail(key: str) -> Tuple[int, int]:
        """The limit and window of a key of limits', or a ValueError saying why there is none."""
        t = parse_tail(key)
        if t is None:
            raise ValueError(f"the sluice storage reads the window of a key from its end, as limits writes it "
                             f"(.../AMOUNT/MULTIPLES/GRANULARITY), and {key!r} has none")
        return t

    # ---- fixed window ------------------------------------------------------

    def incr(self, key: str, expiry: int, amount: int) -> Plan[int]:
        d = (yield [Op("acquire", (self.key(key), fixed_limit(expiry), amount))])[0]
        return count(d)

    def get(self, key: str) -> Plan[int]:
        d = (yield [Op("peek", (self.key(key), fixed_limit(self.tail(key)[1])))])[0]
        return count(d)

    def get_expiry(self, key: str) -> Plan[float]:
        d = (yield [Op("peek", (self.key(key), fixed_limit(self.tail(key)[1])))])[0]
        return time.time() + d.reset_after_ns / _NS

    def clear(self, key: str) -> Plan[None]:
        limit, expiry = self.tail(key)
        k = self.key(key)
        ops = [Op("reset", (k, fixed_limit(expiry)))]
        if limit > 0:
            ops.append(Op("reset", (k, log_limit(limit, expiry))))
        yield ops

    # ---- moving window -----------------------------------------------------

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int) -> Plan[bool]:
        if limit < 1:
            return False
            yield  # a plan that asks nothing
        d = (yield [Op("acquire", (self.key(key), log_limit(limit, expiry), amount))])[0]
        return d.allowed

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Plan[Tuple[float, int]]:
        """(when the oldest entry in the window was taken, the entries in the window).

        A peek counts the entries; when the window is full its retry_after says when the
        oldest leaves. When it is not, a second round trip asks a multi that can never pass
        (its second item costs more than the limit, so nothing changes) what a request of
        ``limit - n + 1`` would wait for: the n-th newest entry, the oldest, to leave.
        """
        if limit < 1:
            return time.time(), 0
            yield
        k, lim = self.key(key), log_limit(limit, expiry)
        d = (yield [Op("peek", (k, lim))])[0]
        now = time.time()
        n = limit - d.remaining
        if n <= 0:
            return now, 0
        if d.remaining == 0 and d.retry_after_ns > 0:
            return now + d.retry_after_ns / _NS - expiry, n
        m = (yield [Op("multi", ([(k, lim, limit - n + 1), (k, lim, limit + 1)],))])[0]
        probe = m.decisions[0]
        if not probe.allowed and probe.retry_after_ns > 0:
            return time.time() + probe.retry_after_ns / _NS - expiry, n
        # Entries left the window between the two round trips: the newest one's time.
        return now + d.reset_after_ns / _NS - expiry, n

    # ---- sliding window counter --------------------------------------------

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int) -> Plan[bool]:
        if amount > limit:
            return False
            yield
        d = (yield [Op("acquire", (self.key(key), sliding_limit(limit, expiry), amount * SCALE))])[0]
        return d.allowed

    def get_sliding_window(self, key: str, expiry: int) -> Plan[Tuple[int, float, int, float]]:
        """(previous count, its time to expire, current count, its time to expire), as limits'
        storages with timestamped windows report them."""
        now_ns = time.time_ns()
        window_ns = expiry * _NS
        start_ns = now_ns - now_ns % window_ns
        start = start_ns // _NS
        k, lim = self.key(key), sliding_reader(expiry)
        both, curr = (yield [Op("peek", (k, lim), at=start), Op("peek", (k, lim), at=start + expiry)])
        # Counts are multiples of SCALE; rounding up keeps a foreign one conservative.
        current = -(-count(curr) // SCALE)
        previous = -(-max(count(both) - count(curr), 0) // SCALE)
        elapsed = (now_ns - start_ns) / _NS
        return previous, (expiry - elapsed if previous else 0.0), current, 2 * expiry - elapsed

    def clear_sliding_window(self, key: str, expiry: int) -> Plan[None]:
        yield [Op("reset", (self.key(key), sliding_reader(expiry)))]

    # ---- the storage as a whole --------------------------------------------

    def check(self) -> Plan[bool]:
        try:
            yield [Op("ping", ())]
        except SluiceError:
            return False
        return True

    def reset(self) -> Plan[int]:
        """Reset every bucket under the prefix that scan lists; the number that existed.

        Needs a sidecar whose slots keep keys (``--slot-size 128`` or 256): else
        NotImplementedError, which Flask-Limiter's ``Limiter.reset`` reports as a storage that
        cannot be reset.
        """
        entries: List[ScanEntry] = []
        cursor = 0
        prefix = self.prefix.encode()
        while True:
            try:
                page = (yield [Op("scan_page", (prefix, cursor, SCAN_COUNT))])[0]
            except Unsupported as e:
                raise NotImplementedError(f"the sluice storage's reset lists buckets with the sidecar's scan: {e}") from e
            entries.extend(page.entries)
            cursor = page.next
            if cursor == 0:
                break
        ops = [Op("reset", (e.key, lim)) for e in entries if (lim := self._scanned_limit(e)) is not None]
        cleared = 0
        for i in range(0, len(ops), RESET_BATCH):
            cleared += sum(bool(existed) for existed in (yield ops[i:i + RESET_BATCH]))
        return cleared

    def _scanned_limit(self, e: ScanEntry) -> Optional[Limit]:
        """A limit of the listed bucket's identity, if it is one of the storage's."""
        t = parse_tail(e.key_text[len(self.prefix):])
        if t is None:
            return None
        limit, expiry = t
        if e.algorithm == Algorithm.TOKEN_BUCKET:
            return fixed_limit(expiry)
        if e.algorithm == Algorithm.SLIDING_WINDOW:
            return sliding_reader(expiry)
        if e.algorithm in (Algorithm.SLIDING_LOG, Algorithm.WINDOW_COUNTERS) and limit > 0:
            lim = log_limit(limit, expiry)
            return lim if lim.algorithm == e.algorithm else None
        return None
