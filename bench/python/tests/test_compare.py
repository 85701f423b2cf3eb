"""Tests of bench/python/compare.py: its pure parts, and short runs against real servers.

The sluice runs need $SLUICED naming a sluiced binary (``make build``, then
``SLUICED=bin/sluiced``); the redis-lua runs need ``redis-server`` on PATH
and redis-py importable. Each is skipped without them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from typing import Any, Dict, Iterator, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(os.path.join(HERE, "..", "compare.py"))

_spec = importlib.util.spec_from_file_location("compare", SCRIPT)
assert _spec is not None and _spec.loader is not None
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)

REPORT_FIELDS = {
    "lang", "target", "limit", "clients", "depth", "ops", "allowed", "errors", "first_error",
    "seconds", "ops_per_sec", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "python", "client",
}


def short_tmpdir() -> str:
    """A fresh directory under /tmp: socket paths must stay under 108 bytes."""
    return tempfile.mkdtemp(prefix="slc", dir="/tmp")


def run_script(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60,
                          env=env)


# ---- keys --------------------------------------------------------------------


def zipf_probability(i: int, n: int, s: float) -> float:
    return float((1 + i) ** -s / sum((1 + j) ** -s for j in range(n)))


def test_key_name() -> None:
    assert compare.key_name("bench:", 0) == "bench:0"
    assert compare.key_name("bench:", 42) == "bench:42"
    assert compare.key_name("", 999999) == "999999"


def test_zipf_favours_low_indexes() -> None:
    draw = compare.index_sampler(1000, "zipf", 1.1)
    rng = random.Random(7)
    counts = [0] * 1000
    for _ in range(100_000):
        counts[draw(rng)] += 1
    assert counts[0] > counts[1] > counts[10]


def test_zipf_frequencies_follow_the_formula() -> None:
    n, s, samples = 1000, 1.1, 200_000
    draw = compare.index_sampler(n, "zipf", s)
    rng = random.Random(1)
    counts = [0] * n
    for _ in range(samples):
        counts[draw(rng)] += 1
    for i in (0, 1, 2, 5, 10, 100):
        p = zipf_probability(i, n, s)
        sigma = math.sqrt(p * (1 - p) / samples)
        assert abs(counts[i] / samples - p) < 5 * sigma, f"index {i}: {counts[i] / samples} vs {p}"
    tail = sum(zipf_probability(i, n, s) for i in range(100, n))
    sigma = math.sqrt(tail * (1 - tail) / samples)
    assert abs(sum(counts[100:]) / samples - tail) < 5 * sigma


def test_zipf_of_one_key() -> None:
    draw = compare.index_sampler(1, "zipf", 1.1)
    rng = random.Random(3)
    assert {draw(rng) for _ in range(1000)} == {0}


def test_uniform_within_range() -> None:
    draw = compare.index_sampler(7, "uniform", 1.1)
    rng = random.Random(5)
    drawn = [draw(rng) for _ in range(70_000)]
    assert min(drawn) == 0 and max(drawn) == 6
    counts = [drawn.count(i) for i in range(7)]
    assert min(counts) > 9_000 and max(counts) < 11_000


def test_draw_keys() -> None:
    draw = compare.index_sampler(50, "uniform", 1.1)
    keys = compare.draw_keys(draw, 1, "b:", 1000)
    assert len(keys) == 1000
    assert {int(k[len("b:"):]) for k in keys} <= set(range(50))
    assert all(k == "b:" + k[2:] for k in keys)
    assert compare.draw_keys(draw, 1, "b:", 1000) == keys, "not deterministic"
    assert compare.draw_keys(draw, 2, "b:", 1000) != keys, "seeds do not matter"


# ---- percentiles -------------------------------------------------------------


def test_percentile_nearest_rank() -> None:
    values = [15, 20, 35, 40, 50]
    assert compare.percentile(values, Fraction(0)) == 15
    assert compare.percentile(values, Fraction(3, 10)) == 20  # rank ceil(1.5) = 2
    assert compare.percentile(values, Fraction(2, 5)) == 20  # rank 2 exactly
    assert compare.percentile(values, Fraction(1, 2)) == 35  # rank ceil(2.5) = 3
    assert compare.percentile(values, Fraction(1)) == 50
    thousand = list(range(1, 1001))
    assert [compare.percentile(thousand, q) for _, q in compare.QUANTILES] == [500, 900, 990, 999]
    assert compare.percentile([], Fraction(1, 2)) == 0


# ---- arguments ---------------------------------------------------------------

REQUIRED = ["--target", "sluice", "--socket", "s.sock", "--limit", "gcra"]


def test_defaults() -> None:
    args = compare.parse_args(REQUIRED)
    assert (args.clients, args.depth, args.duration, args.warmup) == (1, 1, 2.0, 0.3)
    assert (args.keys, args.dist, args.zipf_s, args.prefix, args.seed) == (1_000_000, "zipf", 1.1, "bench:", 1)
    assert args.tb == (100, 1000, 10) and args.gcra == (100, 10, 1000)
    assert args.lua_dir == os.path.join(compare.REPO, "bench", "lua")
    assert os.path.isfile(os.path.join(args.lua_dir, "gcra.lua"))


def test_limit_spec() -> None:
    tb = compare.parse_args(REQUIRED[:-1] + ["token-bucket", "--tb", "5,250,2"])
    assert compare.limit_spec(tb) == "token_bucket:max=5,refill_time=250ms,refill_amount=2"
    gcra = compare.parse_args(REQUIRED + ["--gcra", "0,3,1000"])
    assert compare.limit_spec(gcra) == "gcra:burst=0,count=3,period=1000ms"
    for args in (tb, gcra):
        compare.sluice.Limit.parse(compare.limit_spec(args))


@pytest.mark.parametrize("bad, message", [
    (["--tb", "100,1000"], "argument --tb: want MAX,REFILL_MS,AMOUNT"),
    (["--tb", "100,1s,10"], "argument --tb: REFILL_MS: not an integer"),
    (["--tb", "0,1000,10"], "argument --tb: MAX must be >= 1"),
    (["--gcra", "1,0,1000"], "argument --gcra: COUNT must be >= 1"),
    (["--clients", "0"], "argument --clients: must be >= 1"),
    (["--duration", "0"], "argument --duration: must be > 0"),
    (["--zipf-s", "1"], "argument --zipf-s: must be > 1"),
    (["--dist", "normal"], "argument --dist: invalid choice"),
])
def test_bad_arguments_exit_2(bad: List[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        compare.parse_args(REQUIRED + bad)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# ---- failures ----------------------------------------------------------------


def test_unreachable_sidecar_exits_1_in_one_line() -> None:
    tmp = short_tmpdir()
    try:
        p = run_script("--target", "sluice", "--socket", os.path.join(tmp, "none.sock"), "--limit", "gcra",
                       "--keys", "10")
    finally:
        shutil.rmtree(tmp)
    assert p.returncode == 1, p.stderr
    assert p.stdout == ""
    assert p.stderr.startswith("compare.py: cannot reach sluiced:") and p.stderr.count("\n") == 1, p.stderr


def test_redis_lua_without_redis_py_exits_3() -> None:
    tmp = short_tmpdir()
    try:
        with open(os.path.join(tmp, "redis.py"), "w") as f:
            f.write('raise ImportError("redis-py hidden by the test")\n')
        env = dict(os.environ, PYTHONPATH=tmp)
        p = run_script("--target", "redis-lua", "--socket", os.path.join(tmp, "r.sock"), "--limit", "gcra",
                       env=env)
    finally:
        shutil.rmtree(tmp)
    assert p.returncode == 3, p.stderr
    assert p.stdout == ""
    assert "redis-py" in p.stderr and p.stderr.count("\n") == 1, p.stderr


# ---- runs against real servers -----------------------------------------------


def wait_for_socket(path: str, proc: subprocess.Popen, what: str) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
            return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not listen on {path} within 10 s")
        time.sleep(0.005)


def stop(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def sluiced_socket() -> Iterator[str]:
    binary = os.environ.get("SLUICED")
    if not binary:
        pytest.skip("set SLUICED to a sluiced binary (make build; SLUICED=bin/sluiced)")
    tmp = short_tmpdir()
    sock = os.path.join(tmp, "s.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    proc = subprocess.Popen([os.path.abspath(binary), "--state", os.path.join(tmp, "s.state"), "--socket", sock,
                             "--resp-socket", "-", "--slots", "4096", "--log-level", "warn"],
                            cwd=tmp, env=env, stdout=subprocess.DEVNULL)
    try:
        wait_for_socket(sock, proc, "sluiced")
        yield sock
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_socket() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH")
    pytest.importorskip("redis")
    tmp = short_tmpdir()
    sock = os.path.join(tmp, "r.sock")
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                             "--appendonly", "no", "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
                            stdout=subprocess.DEVNULL)
    try:
        wait_for_socket(sock, proc, "redis-server")
        yield sock
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def measure(target: str, sock: str, limit: str, depth: int) -> Dict[str, Any]:
    """A short run of two clients; the report, checked for consistency."""
    p = run_script("--target", target, "--socket", sock, "--limit", limit, "--clients", "2",
                   "--depth", str(depth), "--duration", "0.25", "--warmup", "0.05", "--keys", "1000",
                   "--prefix", f"{limit}:")  # one prefix per limit: the Lua scripts store different types
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1, p.stdout
    report: Dict[str, Any] = json.loads(lines[0])
    assert set(report) == REPORT_FIELDS
    assert (report["lang"], report["target"], report["limit"]) == ("python", target, limit)
    assert (report["clients"], report["depth"]) == (2, depth)
    assert report["ops"] > 0 and 0 <= report["allowed"] <= report["ops"]
    assert report["errors"] == 0 and report["first_error"] is None, report["first_error"]
    assert 0.25 <= report["seconds"] < 5
    assert report["ops_per_sec"] == pytest.approx(report["ops"] / report["seconds"])
    assert 0 < report["p50_ns"] <= report["p90_ns"] <= report["p99_ns"] <= report["p999_ns"] <= report["max_ns"]
    assert report["python"] == platform.python_version()
    return report


@pytest.mark.parametrize("depth", [1, 8])
@pytest.mark.parametrize("limit", ["token-bucket", "gcra"])
def test_sluice(sluiced_socket: str, limit: str, depth: int) -> None:
    report = measure("sluice", sluiced_socket, limit, depth)
    assert report["client"] == f"sluice {compare.sluice.__version__}"


@pytest.mark.parametrize("depth", [1, 8])
@pytest.mark.parametrize("limit", ["token-bucket", "gcra"])
def test_redis_lua(redis_socket: str, limit: str, depth: int) -> None:
    report = measure("redis-lua", redis_socket, limit, depth)
    assert report["client"].startswith("redis-py ")
