"""Flask-Limiter under gunicorn and SlowAPI under uvicorn, 4 workers each, on the real sidecar.

200 requests from one address, 16 at a time, on a limit of 50: exactly 50
are admitted, whichever workers serve them. The READMEs' examples (the
python blocks that import sluice.limits_storage, in the repository's
README.md and clients/python/README.md) run as written (but for a generous
timeout), in a directory whose var/sluice.sock is the test sidecar's socket;
apps/ has an app of each framework whose strategy comes from the environment,
to run every strategy.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

pytest.importorskip("limits", reason="the limits storage's tests need limits (requirements-test.txt): make "
                                     "test runs them with .venv/bin/python, which make setup prepares")

from conftest import HERE, REPO, TEST_TIMEOUT, Sidecar, short_tmpdir  # noqa: E402

SRC = os.path.abspath(os.path.join(HERE, "..", "src"))
APPS = os.path.join(HERE, "limits_storage", "apps")
READMES = [os.path.join(REPO, "README.md"), os.path.join(HERE, "..", "README.md")]
REQUESTS, AT_ONCE, WORKERS = 200, 16, 4


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the server's Unix socket (no port to pick)."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=120)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Server:
    """gunicorn or uvicorn serving ``module:app`` from ``cwd`` on a Unix socket, 4 workers."""

    def __init__(self, kind: str, module: str, cwd: str, env: Dict[str, str], preload: bool = False) -> None:
        self.kind, self.cwd = kind, cwd
        self.socket = os.path.join(cwd, "http.sock")
        self.log = os.path.join(cwd, kind + ".log")
        if kind == "gunicorn":
            argv = ["gunicorn", "-w", str(WORKERS), "-b", "unix:" + self.socket] + (["--preload"] if preload else [])
            # gunicorn names each worker it boots; uvicorn says when each has started its app.
            self.ready = re.compile(r"Booting worker with pid")
        else:
            argv = ["uvicorn", "--workers", str(WORKERS), "--uds", self.socket]
            self.ready = re.compile(r"Application startup complete")
        env = dict(os.environ, **env, PYTHONPATH=os.pathsep.join([SRC, cwd]))
        env.pop("SLUICE_SOCKET", None)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m"] + argv + [module + ":app"], cwd=cwd, env=env,
                                         stdout=log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def logs(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while len(self.ready.findall(self.logs())) < WORKERS or not os.path.exists(self.socket):
            if self.proc.poll() is not None:
                pytest.fail(f"{self.kind} exited with {self.proc.returncode}:\n{self.logs()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{self.kind} did not start {WORKERS} workers within 2 minutes:\n{self.logs()[-4000:]}")
            time.sleep(0.05)

    def request(self, method: str, path: str) -> Tuple[int, Optional[str]]:
        c = UnixHTTPConnection(self.socket)
        try:
            c.request(method, path, headers={"Connection": "close"})
            r = c.getresponse()
            r.read()
            return r.status, r.getheader("X-Worker")
        finally:
            c.close()

    def burst(self, method: str, path: str) -> List[Tuple[int, Optional[str]]]:
        with ThreadPoolExecutor(AT_ONCE) as pool:
            return list(pool.map(lambda _: self.request(method, path), range(REQUESTS)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def appdir(sidecar: Sidecar) -> Iterator[str]:
    """A directory whose var/sluice.sock is the sidecar's socket (what the examples name)."""
    d = short_tmpdir()
    os.makedirs(os.path.join(d, "var"))
    os.symlink(sidecar.socket, os.path.join(d, "var", "sluice.sock"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def serve(kind: str, module: str, cwd: str, env: Dict[str, str], preload: bool = False) -> Iterator[Server]:
    server = Server(kind, module, cwd, env, preload)
    try:
        yield server
    finally:
        server.stop()


def examples() -> List[Tuple[str, str]]:
    """(where, code) of each README block that imports the storage."""
    out = []
    for path in READMES:
        with open(path) as f:
            text = f.read()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S), 1):
            if "import sluice.limits_storage" in block:
                out.append((f"{os.path.relpath(path, REPO)} block {i}", block))
    return out


def test_the_readmes_have_examples() -> None:
    found = [code for _, code in examples()]
    assert sum("flask_limiter" in c for c in found) == 2 and sum("slowapi" in c for c in found) == 1, found


@pytest.mark.parametrize("where, code", examples(), ids=[w for w, _ in examples()])
def test_readme_example(appdir: str, where: str, code: str) -> None:
    # As written, but for the storage's timeout: the tests' clients wait TEST_TIMEOUT, which a busy
    # machine keeps (the default's 50 ms it does not).
    uri = 'storage_uri="sluice://var/sluice.sock'
    assert code.count(uri) == 1, f"{where} has no {uri}"
    with open(os.path.join(appdir, "app.py"), "w") as f:
        f.write(code.replace(uri, f"{uri}?timeout={TEST_TIMEOUT}"))
    kind = "gunicorn" if "flask" in code else "uvicorn"
    method, path = re.search(r'@app\.(get|post)\("([^"]+)"\)', code).groups()  # type: ignore[union-attr]
    limit = int(re.search(r'limiter\.limit\("(\d+)[ /]', code).group(1))  # type: ignore[union-attr]
    for server in serve(kind, "app", appdir, {}):
        statuses = sorted(status for status, _ in server.burst(method.upper(), path))
        assert statuses == [200] * limit + [429] * (REQUESTS - limit), f"{where}:\n{server.logs()[-4000:]}"


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
@pytest.mark.parametrize("kind, module", [("gunicorn", "flask_app"), ("uvicorn", "fastapi_app")])
def test_workers_share_the_limit(appdir: str, sidecar: Sidecar, kind: str, module: str, strategy: str) -> None:
    # 50 per hour: the sliding window counter's windows are aligned to the hour, and a burst that
    # crossed into the next would rightly admit more (the previous hour's weight falls).
    left = 3600 - time.time() % 3600
    if left < 30:
        time.sleep(left + 0.01)
    shutil.copy(os.path.join(APPS, module + ".py"), appdir)
    env = {"STORAGE_URI": f"sluice://{sidecar.socket}?timeout={TEST_TIMEOUT}", "STRATEGY": strategy,
           "LIMIT": "50 per hour"}
    # gunicorn --preload makes the storage (and its client) before forking the workers. Every burst
    # (a key of its own) admits exactly 50; on a busy host one worker may take every connection of
    # a burst, which shows nothing shared, so bursts go on (up to 5) until two workers served one.
    for server in serve(kind, module, appdir, env, preload=True):
        for attempt in range(5):
            answers = server.burst("GET", f"/hit?k=burst{attempt}")
            statuses = sorted(status for status, _ in answers)
            assert statuses == [200] * 50 + [429] * 150, server.logs()[-4000:]
            workers = {w for _, w in answers}
            if len(workers) >= 2:
                break
        assert len(workers) >= 2, f"one worker served every request of 5 bursts: {workers}"
