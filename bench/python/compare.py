#!/usr/bin/env python3
"""One cell of the comparative benchmark, from Python: Sluice or Redis + Lua.

The orchestrator (``bench/cmd/sluice-bench``) starts a fresh ``sluiced`` or
``redis-server`` for each cell and runs this script once per cell. The
script opens ``--clients`` connections, one per thread, warms up for
``--warmup`` seconds, then sends rate-limit decisions for ``--duration``
seconds, ``--depth`` per round trip, on keys drawn from a Zipf or uniform
distribution, and prints one JSON object on stdout::

    python3 bench/python/compare.py --target sluice --socket var/sluice.sock --limit gcra
    python3 bench/python/compare.py --target redis-lua --socket /tmp/redis.sock --depth 16

Targets: ``sluice`` asks the sidecar's native socket with the Python client
of this repository (``Client.acquire``, or ``Client.pipeline()`` when the
depth is above 1); ``redis-lua`` runs ``bench/lua/token_bucket.lua`` or
``gcra.lua`` with EVALSHA through redis-py (a pipeline of EVALSHA when the
depth is above 1).

Exit status: 0 success; 1 failure (cannot connect, every request failed);
2 bad arguments; 3 the target cannot run here (redis-py is not installed).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import platform
import random
import sys
import threading
import time
from array import array
from bisect import bisect_right
from fractions import Fraction
from itertools import accumulate, chain, cycle, repeat
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python", "src"))

import sluice  # noqa: E402

KEY_SEQUENCE_LEN = 65536  # keys drawn per client before the run; the run cycles through them
TIMEOUT = 10.0  # seconds a client waits for its server before counting an error

#: Each reported quantile: the JSON field and the fraction of decisions at or below it.
QUANTILES: Tuple[Tuple[str, Fraction], ...] = (
    ("p50_ns", Fraction(1, 2)),
    ("p90_ns", Fraction(9, 10)),
    ("p99_ns", Fraction(99, 100)),
    ("p999_ns", Fraction(999, 1000)),
)

#: What a batch of requests came back as: one per request, its decision
#: (allowed or not) or the exception it failed with.
Outcome = Union[bool, Exception]


class BenchError(Exception):
    """An expected failure: reported on stderr in one line, exit status 1."""


class MissingClient(Exception):
    """The target cannot run here (its client library is missing): exit status 3."""


# ---- arguments ---------------------------------------------------------------


def _integers(text: str, names: Sequence[str], minimums: Sequence[int]) -> Tuple[int, ...]:
    """Comma-separated integers, one per name, each at least its minimum."""
    parts = text.split(",")
    if len(parts) != len(names):
        raise argparse.ArgumentTypeError(f"want {','.join(names)}, got {text!r}")
    values = []
    for name, minimum, part in zip(names, minimums, parts):
        try:
            v = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: not an integer: {part!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {v}")
        values.append(v)
    return tuple(values)


def token_bucket_params(text: str) -> Tuple[int, ...]:
    """--tb: MAX,REFILL_MS,AMOUNT."""
    return _integers(text, ("MAX", "REFILL_MS", "AMOUNT"), (1, 1, 1))


def gcra_params(text: str) -> Tuple[int, ...]:
    """--gcra: BURST,COUNT,PERIOD_MS."""
    return _integers(text, ("BURST", "COUNT", "PERIOD_MS"), (0, 1, 1))


def _at_least(minimum: float, kind: Callable[[str], Any], strict: bool = False) -> Callable[[str], Any]:
    """An argparse type: a number of the given kind, >= minimum (> minimum if strict)."""
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if v < minimum or (strict and v == minimum) or (isinstance(v, float) and not math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {minimum}, got {text}")
        return v
    return parse


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with status 2 and a message on bad arguments."""
    ap = argparse.ArgumentParser(
        prog="compare.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, choices=("sluice", "redis-lua"))
    ap.add_argument("--socket", required=True,
                    help="Unix socket: sluiced's native socket, or redis-server's unixsocket")
    ap.add_argument("--limit", required=True, choices=("token-bucket", "gcra"))
    ap.add_argument("--clients", type=_at_least(1, int), default=1,
                    help="threads, each with its own connection (default 1)")
    ap.add_argument("--depth", type=_at_least(1, int), default=1,
                    help="requests per round trip: 1 one at a time, more a pipeline (default 1)")
    ap.add_argument("--duration", type=_at_least(0, float, strict=True), default=2.0,
                    help="seconds measured (default 2)")
    ap.add_argument("--warmup", type=_at_least(0, float), default=0.3,
                    help="seconds run before measuring, not counted (default 0.3)")
    ap.add_argument("--keys", type=_at_least(1, int), default=1_000_000,
                    help="key space: keys PREFIX0 .. PREFIX<N-1> (default 1000000)")
    ap.add_argument("--dist", choices=("zipf", "uniform"), default="zipf",
                    help="key distribution (default zipf)")
    ap.add_argument("--zipf-s", type=_at_least(1, float, strict=True), default=1.1,
                    help="zipf exponent s > 1: P(i) ~ (1+i)^-s, as Go's rand.NewZipf(r, s, 1, N-1) (default 1.1)")
    ap.add_argument("--prefix", default="bench:", help='key prefix (default "bench:")')
    ap.add_argument("--seed", type=int, default=1, help="client i draws its keys with seed SEED+i (default 1)")
    ap.add_argument("--tb", type=token_bucket_params, default="100,1000,10", metavar="MAX,REFILL_MS,AMOUNT",
                    help="token bucket parameters (default 100,1000,10)")
    ap.add_argument("--gcra", type=gcra_params, default="100,10,1000", metavar="BURST,COUNT,PERIOD_MS",
                    help="gcra parameters (default 100,10,1000)")
    ap.add_argument("--lua-dir", default=os.path.join(REPO, "bench", "lua"),
                    help="directory of token_bucket.lua and gcra.lua (default <repo>/bench/lua)")
    return ap.parse_args(argv)


# ---- keys --------------------------------------------------------------------


def key_name(prefix: str, index: int) -> str:
    """Key ``index`` of the key space: the Go side builds the same strings."""
    return prefix + str(index)


def index_sampler(n: int, dist: str, zipf_s: float) -> Callable[[random.Random], int]:
    """A function drawing a key index in [0, n) from a random source.

    "uniform": every index alike. "zipf": P(i) proportional to (1+i)^-s, the
    distribution of Go's ``rand.NewZipf(r, s, 1, n-1)``, drawn by inverting
    its cumulative weights (built once, 8 bytes per key) with a binary search.
    """
    if dist == "uniform":
        return lambda rng: rng.randrange(n)
    cumulative = array("d", accumulate(map(pow, range(1, n + 1), repeat(-zipf_s))))
    total, last = cumulative[-1], n - 1

    def zipf(rng: random.Random) -> int:
        return min(bisect_right(cumulative, rng.random() * total), last)
    return zipf


def draw_keys(draw: Callable[[random.Random], int], seed: int, prefix: str, count: int) -> List[str]:
    """``count`` keys drawn with ``random.Random(seed)``: the sequence one client cycles through."""
    rng = random.Random(seed)
    return [key_name(prefix, draw(rng)) for _ in range(count)]


# ---- targets -----------------------------------------------------------------


class SluiceConnection:
    """One connection to sluiced's native socket, through the repository's client."""

    def __init__(self, socket_path: str, limit: sluice.Limit) -> None:
        self._limit = limit
        try:
            self._client = sluice.Client(socket_path, timeout=TIMEOUT, on_unavailable="raise")  # checks it answers
        except sluice.SluiceError as e:
            raise BenchError(f"cannot reach sluiced: {e}") from None

    def one(self, key: str) -> bool:
        """Acquire one token on key; whether it was allowed."""
        return self._client.acquire(key, self._limit).allowed

    def batch(self, keys: Sequence[str]) -> List[Outcome]:
        """Acquire one token on each key, in one pipeline: one round trip."""
        pipe = self._client.pipeline()
        for key in keys:
            pipe.acquire(key, self._limit)
        return [r if isinstance(r, Exception) else r.allowed for r in pipe.execute(raise_on_error=False)]

    def close(self) -> None:
        self._client.close()


class RedisConnection:
    """One redis-py connection (a pool of one) to redis-server, running a Lua script by EVALSHA."""

    def __init__(self, redis: Any, socket_path: str, script: str, args: Sequence[int]) -> None:
        self._redis = redis.Redis(unix_socket_path=socket_path, max_connections=1,
                                  socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
        self._args = tuple(args)
        try:
            self._sha = self._redis.script_load(script)
        except redis.RedisError as e:
            self._redis.close()
            raise BenchError(f"cannot load the script into redis-server at {socket_path}: {e}") from None

    def one(self, key: str) -> bool:
        """Run the script on key; whether it allowed the request."""
        return self._redis.evalsha(self._sha, 1, key, *self._args)[0] == 1  # type: ignore[no-any-return]

    def batch(self, keys: Sequence[str]) -> List[Outcome]:
        """Run the script on each key, in one pipeline (no MULTI): one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.evalsha(self._sha, 1, key, *self._args)
        return [r if isinstance(r, Exception) else r[0] == 1 for r in pipe.execute(raise_on_error=False)]

    def close(self) -> None:
        self._redis.close()


Connection = Union[SluiceConnection, RedisConnection]


class Target(NamedTuple):
    """How to open connections to the server under test, and the client's name for the report."""

    connect: Callable[[], Connection]
    client: str


def limit_spec(args: argparse.Namespace) -> str:
    """The Sluice limit spec of --limit with the --tb or --gcra parameters."""
    if args.limit == "token-bucket":
        return "token_bucket:max={},refill_time={}ms,refill_amount={}".format(*args.tb)
    return "gcra:burst={},count={},period={}ms".format(*args.gcra)


def sluice_target(args: argparse.Namespace) -> Target:
    limit = sluice.Limit.parse(limit_spec(args))
    return Target(lambda: SluiceConnection(args.socket, limit), f"sluice {sluice.__version__}")


def redis_target(args: argparse.Namespace) -> Target:
    try:
        import redis
    except ImportError as e:
        raise MissingClient(f"target redis-lua needs redis-py (pip install redis): {e}") from None
    name, params = ("token_bucket", args.tb) if args.limit == "token-bucket" else ("gcra", args.gcra)
    path = os.path.join(args.lua_dir, name + ".lua")
    try:
        with open(path) as f:
            script = f.read()
    except OSError as e:
        raise BenchError(f"cannot read the Lua script: {e}") from None
    script_args = (*params, 1)  # the script's last argument: the cost of each request
    return Target(lambda: RedisConnection(redis, args.socket, script, script_args),
                  f"redis-py {redis.__version__}")


# ---- the run -----------------------------------------------------------------


class Schedule:
    """The run's clock: set once every client is connected and ready, read by all of them."""

    def __init__(self, warmup: float, duration: float) -> None:
        self.warmup_ns = int(warmup * 1e9)
        self.duration_ns = int(duration * 1e9)
        self.measure_from = 0  # perf_counter_ns at which measuring starts
        self.measure_until = 0  # no request starts at or after this

    def start(self) -> None:
        """Start the warm-up now (the barrier's action: it runs before any client goes)."""
        self.measure_from = time.perf_counter_ns() + self.warmup_ns
        self.measure_until = self.measure_from + self.duration_ns


class Worker(threading.Thread):
    """One client: its connection, its keys, its counts and latency samples.

    Requests that start before ``measure_from`` warm up and are not
    counted; requests that start before ``measure_until`` are. Each
    decision's sample is the round trip that carried it, in nanoseconds.
    """

    def __init__(self, conn: Connection, keys: List[str], depth: int, barrier: threading.Barrier,
                 schedule: Schedule) -> None:
        super().__init__(daemon=True)
        self.conn, self.depth, self.barrier, self.schedule = conn, depth, barrier, schedule
        self.keys = keys
        self.ops = 0
        self.allowed = 0
        self.errors = 0
        self.first_error: Optional[str] = None
        self.samples = array("q")
        self.finished = 0  # perf_counter_ns when its last measured request was answered or failed
        self.measuring = False  # errors count from the measured phase on

    def run(self) -> None:
        self.barrier.wait()
        if self.depth == 1:
            keys = cycle(self.keys)
            self._one_at_a_time(keys, self.schedule.measure_from, None)
            self.measuring = True
            self._one_at_a_time(keys, self.schedule.measure_until, self.samples)
        else:
            d = self.depth
            batches = cycle([self.keys[i:i + d] for i in range(0, len(self.keys), d)])
            self._pipelined(batches, self.schedule.measure_from, None)
            self.measuring = True
            self._pipelined(batches, self.schedule.measure_until, self.samples)

    def _one_at_a_time(self, keys: "cycle[str]", until: int, samples: "Optional[array[int]]") -> None:
        """Send one request per round trip until ``until``; count and sample if samples is given."""
        one, clock = self.conn.one, time.perf_counter_ns
        ops = allowed = 0
        record = samples.append if samples is not None else None
        end = clock()
        for key in keys:
            start = clock()
            if start >= until:
                break
            try:
                ok = one(key)
            except Exception as e:  # counted: a benchmark goes on through failures
                end = clock()
                self._error(e)
                continue
            end = clock()
            ops += 1
            allowed += ok
            if record is not None:
                record(end - start)
        if samples is not None:
            self.ops, self.allowed, self.finished = ops, allowed, end

    def _pipelined(self, batches: "cycle[List[str]]", until: int, samples: "Optional[array[int]]") -> None:
        """Send a batch of requests per round trip until ``until``; count and sample if samples is given."""
        batch, clock = self.conn.batch, time.perf_counter_ns
        ops = allowed = 0
        end = clock()
        for keys in batches:
            start = clock()
            if start >= until:
                break
            try:
                outcomes = batch(keys)
            except Exception as e:  # the whole round trip failed: every request in it
                end = clock()
                for _ in keys:
                    self._error(e)
                continue
            end = clock()
            decided = 0
            for outcome in outcomes:
                if isinstance(outcome, Exception):
                    self._error(outcome)
                else:
                    decided += 1
                    allowed += outcome
            ops += decided
            if samples is not None:
                samples.extend(repeat(end - start, decided))
        if samples is not None:
            self.ops, self.allowed, self.finished = ops, allowed, end

    def _error(self, e: Exception) -> None:
        """Count a failed request of the measured phase; keep the first one's message."""
        if not self.measuring:
            return
        self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(e).__name__}: {e}"


def percentile(sorted_values: Sequence[int], q: Fraction) -> int:
    """The value of rank ceil(q*n) (1-based) in ascending values; 0 when there are none."""
    n = len(sorted_values)
    if n == 0:
        return 0
    rank = min(max(math.ceil(q * n), 1), n)
    return sorted_values[rank - 1]


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Run one cell and return its report."""
    target = redis_target(args) if args.target == "redis-lua" else sluice_target(args)
    draw = index_sampler(args.keys, args.dist, args.zipf_s)
    sequence_len = max(1, KEY_SEQUENCE_LEN // args.depth) * args.depth  # whole batches
    schedule = Schedule(args.warmup, args.duration)
    barrier = threading.Barrier(args.clients, action=schedule.start)
    workers: List[Worker] = []
    try:
        for i in range(args.clients):
            keys = draw_keys(draw, args.seed + i, args.prefix, sequence_len)
            workers.append(Worker(target.connect(), keys, args.depth, barrier, schedule))
        gc.freeze()  # the keys and connections live for the whole run: no collection need scan them
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        for w in workers:
            w.conn.close()

    ops = sum(w.ops for w in workers)
    errors = sum(w.errors for w in workers)
    first_error = next((w.first_error for w in workers if w.first_error is not None), None)
    if ops == 0:
        raise BenchError(f"no request succeeded ({errors} failed): {first_error or 'none was sent'}")
    seconds = (max(w.finished for w in workers) - schedule.measure_from) / 1e9
    samples = sorted(chain.from_iterable(w.samples for w in workers))
    report: Dict[str, Any] = {
        "lang": "python", "target": args.target, "limit": args.limit,
        "clients": args.clients, "depth": args.depth,
        "ops": ops, "allowed": sum(w.allowed for w in workers),
        "errors": errors, "first_error": first_error,
        "seconds": seconds, "ops_per_sec": ops / seconds,
    }
    for name, q in QUANTILES:
        report[name] = percentile(samples, q)
    report["max_ns"] = samples[-1]
    report["python"] = platform.python_version()
    report["client"] = target.client
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    # The client's warnings (sidecar unavailable, back) would repeat what the
    # report and the one-line failure message say.
    logging.getLogger("sluice").addHandler(logging.NullHandler())
    try:
        report = run(args)
    except MissingClient as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 3
    except BenchError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
