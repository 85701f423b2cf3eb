"""Fixtures: a real sluiced serving the Redis protocol on a Unix socket.

sluiced is $SLUICED (``make test-python`` passes bin/sluiced), or built once
per session with ``go build``. Each test gets its own directory under /tmp
(socket paths stay under 108 bytes), its own state file and sockets, and a
sidecar stopped with SIGTERM afterwards, which must exit 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Iterator

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="session")
def sluiced_bin() -> Iterator[str]:
    binary = os.environ.get("SLUICED")
    if binary:
        yield os.path.abspath(binary)
        return
    tmp = tempfile.mkdtemp(prefix="sl", dir="/tmp")
    out = os.path.join(tmp, "sluiced")
    try:
        subprocess.run(["go", "build", "-o", out, "./cmd/sluiced"], cwd=REPO, check=True,
                       capture_output=True, timeout=300)
    except FileNotFoundError:
        pytest.fail("the compatibility tests need Go to build sluiced, or $SLUICED naming a binary")
    except subprocess.CalledProcessError as e:
        pytest.fail(f"go build ./cmd/sluiced failed:\n{e.stderr.decode(errors='replace')}")
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _sluiced(sluiced_bin: str, *extra: str) -> Iterator[str]:
    """Runs a sluiced (with extra flags) in a directory of its own, yields
    its Redis-protocol socket, and stops it with SIGTERM, which must end it
    with status 0."""
    d = tempfile.mkdtemp(prefix="sl", dir="/tmp")
    sock = os.path.join(d, "r.sock")
    log = open(os.path.join(d, "sluiced.log"), "ab")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    proc = subprocess.Popen([sluiced_bin, "--state", os.path.join(d, "state"), "--socket", os.path.join(d, "s.sock"),
                             "--resp-socket", sock, "--slots", "4096", *extra],
                            cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                with open(os.path.join(d, "sluiced.log"), "rb") as f:
                    pytest.fail(f"sluiced exited with {proc.returncode}: {f.read().decode(errors='replace')}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(sock)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("sluiced did not listen within 10 s")
                time.sleep(0.005)
        yield sock
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, "sluiced did not exit cleanly on SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def resp_socket(sluiced_bin: str) -> Iterator[str]:
    """The Redis-protocol socket of a sluiced started for the test."""
    with _sluiced(sluiced_bin) as sock:
        yield sock


@pytest.fixture
def redis_socket() -> Iterator[str]:
    """The Unix socket of a redis-server started for the test."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    d = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    sock = os.path.join(d, "redis.sock")
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                             "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("redis-server did not start within 10 s")
            time.sleep(0.005)
        yield sock
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


ROUTES = """resp:
  - match: "test:*"
    scope: local
  - match: "*"
    scope: global
    on_unavailable: closed
"""


@pytest.fixture
def routed_pair(sluiced_bin: str, redis_socket: str, tmp_path) -> Iterator[tuple[str, str]]:
    """The Redis-protocol sockets of two sidecars sharing one Redis, every
    key but test:* routed to it (ROUTES)."""
    cfg = tmp_path / "sluice.yaml"
    cfg.write_text(ROUTES)
    # A generous Redis timeout: no request is left to the outage policy on a loaded host.
    flags = ("--config", str(cfg), "--global-redis", redis_socket, "--global-timeout", "10s")
    with _sluiced(sluiced_bin, *flags) as a, _sluiced(sluiced_bin, *flags) as b:
        yield a, b
