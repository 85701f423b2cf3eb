"""Fixtures: a real sluiced serving the Redis protocol on a Unix socket.

sluiced is $SLUICED (``make test-python`` passes bin/sluiced), or built once
per session with ``go build``. Each test gets its own directory under /tmp
(socket paths stay under 108 bytes), its own state file and sockets, and a
sidecar stopped with SIGTERM afterwards, which must exit 0.
"""

from __future__ import annotations

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


@pytest.fixture
def resp_socket(sluiced_bin: str) -> Iterator[str]:
    """The Redis-protocol socket of a sluiced started for the test."""
    d = tempfile.mkdtemp(prefix="sl", dir="/tmp")
    sock = os.path.join(d, "r.sock")
    log = open(os.path.join(d, "sluiced.log"), "ab")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    proc = subprocess.Popen([sluiced_bin, "--state", os.path.join(d, "state"), "--socket", os.path.join(d, "s.sock"),
                             "--resp-socket", sock, "--slots", "4096"],
                            cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                pytest.fail(f"sluiced exited with {proc.returncode}")
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
