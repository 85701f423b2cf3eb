"""Fixtures: the real sluiced on a temporary state file and socket, and a fake server.

sluiced is built once per session with ``go build`` unless $SLUICED names a
binary. Every test gets its own directory under /tmp (short: socket paths
must stay under 108 bytes), its own state file and socket, and a sidecar
stopped with SIGTERM afterwards, which must exit 0 and remove its socket.
"""

from __future__ import annotations

import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
GOLDEN = os.path.join(REPO, "proto", "testdata", "golden")

from sluice import AsyncClient, Client, proto  # noqa: E402

#: The timeout of the tests' clients, unless a test gives its own: the
#: default 50 ms is missed by a busy machine (a load of 8 on 2 cores made
#: acquires of the real sidecar time out). Tests of the default itself and
#: of the timeouts are marked default_timeout and keep it.
TEST_TIMEOUT = 60.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "default_timeout: the clients keep the library's default timeout")


@pytest.fixture(autouse=True)
def _generous_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """Clients made without a timeout wait TEST_TIMEOUT for an answer (see above)."""
    if request.node.get_closest_marker("default_timeout"):
        yield
        return
    saved = []
    for cls in (Client, AsyncClient):
        init = cls.__init__
        params = [p for p in inspect.signature(init).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        defaults = list(init.__defaults__ or ())
        names = [p.name for p in params[len(params) - len(defaults):]]
        if "timeout" in names:
            saved.append((init, init.__defaults__))
            defaults[names.index("timeout")] = TEST_TIMEOUT
            init.__defaults__ = tuple(defaults)
    try:
        yield
    finally:
        for init, d in reversed(saved):  # the clients may share one __init__: undo in reverse
            init.__defaults__ = d


def short_tmpdir() -> str:
    return tempfile.mkdtemp(prefix="sl", dir="/tmp")


@pytest.fixture(scope="session")
def sluiced_bin() -> Iterator[str]:
    binary = os.environ.get("SLUICED")
    if binary:
        yield os.path.abspath(binary)
        return
    tmp = short_tmpdir()
    out = os.path.join(tmp, "sluiced")
    try:
        subprocess.run(["go", "build", "-o", out, "./cmd/sluiced"], cwd=REPO, check=True,
                       capture_output=True, timeout=300)
    except FileNotFoundError:
        pytest.fail("the integration tests need Go to build sluiced, or $SLUICED naming a binary")
    except subprocess.CalledProcessError as e:
        pytest.fail(f"go build ./cmd/sluiced failed:\n{e.stderr.decode(errors='replace')}")
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


class Sidecar:
    """A sluiced process on a state file and socket of its own directory."""

    def __init__(self, binary: str, slot_size: int = 128, slots: int = 4096, args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.dir = short_tmpdir()
        os.makedirs(os.path.join(self.dir, "var"))  # relative defaults of newer flags land here
        self.socket = os.path.join(self.dir, "s.sock")
        self.state = os.path.join(self.dir, "s.state")
        self.log = os.path.join(self.dir, "sluiced.log")
        self.slot_size, self.slots, self.args = slot_size, slots, list(args)
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> Sidecar:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--state", self.state, "--socket", self.socket, "--slots", str(self.slots),
                 "--slot-size", str(self.slot_size)] + self.args,
                cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"sluiced exited with {self.proc.returncode}:\n{self.logs()}")
            if os.path.exists(self.socket):
                try:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(self.socket)
                    return self
                except OSError:
                    pass
            if time.monotonic() > deadline:
                pytest.fail(f"sluiced did not listen within 10 s:\n{self.logs()}")
            time.sleep(0.005)

    def stop(self) -> None:
        """SIGTERM; the sidecar must exit 0 and remove its socket."""
        p, self.proc = self.proc, None
        if p is None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            pytest.fail(f"sluiced did not stop within 10 s of SIGTERM:\n{self.logs()}")
        assert rc == 0, f"sluiced exited with {rc}:\n{self.logs()}"
        assert not os.path.exists(self.socket), "sluiced left its socket behind"

    def restart(self) -> None:
        self.stop()
        self.start()

    def logs(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def cleanup(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def sidecar(sluiced_bin: str) -> Iterator[Sidecar]:
    sc = Sidecar(sluiced_bin).start()
    try:
        yield sc
        sc.stop()
    finally:
        sc.cleanup()


@pytest.fixture
def make_sidecar(sluiced_bin: str) -> Iterator[Callable[..., Sidecar]]:
    made: List[Sidecar] = []

    def make(**kw: Any) -> Sidecar:
        sc = Sidecar(sluiced_bin, **kw)
        made.append(sc)
        return sc.start()

    yield make
    for sc in made:
        try:
            sc.stop()
        finally:
            sc.cleanup()


def read_frame(conn: socket.socket) -> Optional[bytes]:
    """One whole frame from conn, or None at EOF."""
    buf = b""
    while len(buf) < proto.HEADER_LEN:
        more = conn.recv(65536)
        if not more:
            return None
        buf += more
    need = 4 + int.from_bytes(buf[:4], "little")
    while len(buf) < need:
        more = conn.recv(65536)
        if not more:
            return None
        buf += more
    return buf


_PING = proto.frame(proto.Kind.REQUEST, 1, 1, bytes((proto.Opcode.PING,)), proto.MIN_VERSION)


class FakeServer:
    """A Unix socket server in a thread; ``handle(conn, n)`` serves the n-th connection (from 0).

    With ``check`` (the default) it answers a client's start check itself: a connection whose
    first frame is a PING gets its answer, and is handed to ``handle`` (counted in n) only if
    the client goes on to send more on it; one the client closes after the answer, as the start
    check does, is not.
    """

    def __init__(self, handle: Callable[[socket.socket, int], None], check: bool = True) -> None:
        self.dir = short_tmpdir()
        self.path = os.path.join(self.dir, "fake.sock")
        self.handle = handle
        self.check = check
        self._n = 0
        self._lock = threading.Lock()
        self.ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ln.bind(self.path)
        self.ln.listen(16)
        self.conns: List[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.ln.accept()
            except OSError:
                return
            self.conns.append(conn)
            if not self.check:
                with self._lock:
                    n, self._n = self._n, self._n + 1
                threading.Thread(target=self._one, args=(conn, n), daemon=True).start()
            else:
                threading.Thread(target=self._checked, args=(conn,), daemon=True).start()

    def _checked(self, conn: socket.socket) -> None:
        try:
            first = conn.recv(len(_PING), socket.MSG_PEEK | socket.MSG_WAITALL)
            # A PING: its length, kind, count and opcode (not its version or id).
            if len(first) == len(_PING) and first[:4] == _PING[:4] and first[5:8] == _PING[5:8] \
                    and first[12:] == _PING[12:]:
                conn.recv(len(_PING))
                conn.sendall(proto.frame(proto.Kind.RESPONSE, proto.parse_header(first).id, 1,
                                         bytes((proto.Opcode.PING, 0)), first[4]))
                if not conn.recv(1, socket.MSG_PEEK):
                    conn.close()
                    return  # a start check
        except OSError:
            return
        with self._lock:
            n, self._n = self._n, self._n + 1
        self._one(conn, n)

    @property
    def handled(self) -> int:
        """The connections handed to ``handle`` so far."""
        with self._lock:
            return self._n

    def _one(self, conn: socket.socket, n: int) -> None:
        try:
            self.handle(conn, n)
        except OSError:
            pass

    def close(self) -> None:
        self.ln.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeServer]]:
    made: List[FakeServer] = []

    def make(handle: Callable[[socket.socket, int], None], check: bool = True) -> FakeServer:
        s = FakeServer(handle, check)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
