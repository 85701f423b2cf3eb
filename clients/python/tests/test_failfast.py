"""A hung sidecar costs little; a refusing one is reported as refusing; one policy for both clients."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, List

import pytest

from conftest import Sidecar
from sluice import AsyncClient, Busy, Client, Denied, Status, TokenBucket, Unavailable, proto
from sluice import _policy

# These tests are about the default timeout and what a breaker does with
# timeouts: the clients keep the library's (conftest gives the others more).
pytestmark = pytest.mark.default_timeout

LIMIT = TokenBucket(max=10, refill_time=3600)


def wait_stopped(pid: int) -> None:
    """Return once process pid is stopped (a signal is delivered asynchronously)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.002)
    pytest.fail(f"process {pid} did not stop")


def first_answer(c: Client, caplog: pytest.LogCaptureFixture) -> int:
    """Acquire a token of LIMIT, each try on a key of its own, until the sidecar answers within
    the client's 50 ms, which a loaded host may miss; forget what the client logged meanwhile,
    and return its degraded_decisions."""
    deadline = time.monotonic() + 10
    for i in range(1 << 30):
        d = c.acquire(f"first-{i}", LIMIT)
        if not d.degraded:
            assert d.remaining == 9
            break
        assert time.monotonic() < deadline, "the sidecar did not answer in time for 10 s"
        time.sleep(0.005)  # the breaker, open after 3 calls without an answer, lets a probe through
    caplog.clear()
    return c.degraded_decisions


async def first_answer_async(c: AsyncClient) -> int:
    """first_answer for an AsyncClient (the test reads no logs)."""
    deadline = time.monotonic() + 10
    for i in range(1 << 30):
        d = await c.acquire(f"first-{i}", LIMIT)
        if not d.degraded:
            assert d.remaining == 9
            break
        assert time.monotonic() < deadline, "the sidecar did not answer in time for 10 s"
        await asyncio.sleep(0.005)
    return c.degraded_decisions


def test_defaults_are_the_go_clients() -> None:
    # The Go client: DefaultTimeout 50ms, DefaultPolicy FailOpen, the breaker's 3, 250ms, 10s.
    c = Client("unused.sock", lazy=True)
    assert (c.timeout, c.on_unavailable) == (0.05, "open")
    assert (c._breaker.threshold, c._breaker.min_open, c._breaker.max_open) == (3, 0.25, 10.0)
    a = AsyncClient("unused.sock", lazy=True)
    assert (a.timeout, a.on_unavailable) == (0.05, "open")


def test_stopped_sidecar_sync(sidecar: Sidecar, caplog: pytest.LogCaptureFixture) -> None:
    # SIGSTOP: the sidecar accepts connections and answers nothing. After 3
    # calls that time out the breaker opens and the rest fail at once.
    c = Client(sidecar.socket)
    before = first_answer(c, caplog)
    assert sidecar.proc is not None
    pid = sidecar.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_stopped(pid)
        with caplog.at_level(logging.INFO, logger="sluice"):
            start = time.monotonic()
            ds = [c.acquire("k", LIMIT) for _ in range(20)]
            took = time.monotonic() - start
            assert all(d.allowed and d.degraded for d in ds)
            assert took < 0.5, f"20 calls to a stopped sidecar took {took:.3f}s"
            assert not c.healthy()
            assert c.degraded_decisions - before == 20
            # A web request that checks two limits does not wait either.
            start = time.monotonic()
            assert c.acquire("a", LIMIT).degraded and c.acquire("b", LIMIT).degraded
            assert time.monotonic() - start < 0.04  # under the 50 ms timeout of one call
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    with caplog.at_level(logging.INFO, logger="sluice"):
        while c.acquire("k", LIMIT, 0).degraded:
            assert time.monotonic() < deadline, "still degraded 10 s after SIGCONT"
            time.sleep(0.01)
    assert c.healthy()
    opened = [r for r in caplog.records if "not answering" in r.getMessage()]
    closed = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(opened) == 1 and opened[0].levelno == logging.WARNING
    assert len(closed) == 1 and closed[0].levelno == logging.INFO
    c.close()


def test_stopped_sidecar_logs_once_each_way(sidecar: Sidecar, caplog: pytest.LogCaptureFixture) -> None:
    # A sidecar stopped for a while accepts each probe's connection and answers nothing: an
    # accepted connection is not an answer, so the client says once that the sidecar is
    # unavailable, and once, after SIGCONT, that it answers again; nothing in between.
    c = Client(sidecar.socket, breaker=(3, 0.02, 0.05))
    first_answer(c, caplog)
    assert sidecar.proc is not None
    pid = sidecar.proc.pid
    with caplog.at_level(logging.INFO, logger="sluice"):
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_stopped(pid)
            probes_before = c._breaker.opens
            deadline = time.monotonic() + 10
            while c._breaker.opens < probes_before + 6:  # six probes found it stopped
                assert c.acquire("k", LIMIT).degraded
                assert time.monotonic() < deadline, "the breaker did not probe six times in 10 s"
                time.sleep(0.005)
            during = [r.getMessage() for r in caplog.records]
        finally:
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while c.acquire("k", LIMIT, 0).degraded:
            assert time.monotonic() < deadline, "still degraded 10 s after SIGCONT"
            time.sleep(0.01)
    down = [m for m in during if "decides until it answers" in m]
    assert len(down) == 1, during
    assert not [m for m in during if "again" in m or "connected" in m], during
    up = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(up) == 1 and up[0].levelno == logging.INFO
    assert len([r for r in caplog.records if "decides until it answers" in r.getMessage()]) == 1
    c.close()


def test_stopped_sidecar_async(sidecar: Sidecar) -> None:
    async def main() -> None:
        c = AsyncClient(sidecar.socket)
        before = await first_answer_async(c)
        assert sidecar.proc is not None
        pid = sidecar.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_stopped(pid)
            start = time.monotonic()
            ds = [await c.acquire("k", LIMIT) for _ in range(20)]
            took = time.monotonic() - start
            assert all(d.allowed and d.degraded for d in ds)
            assert took < 0.5, f"20 calls to a stopped sidecar took {took:.3f}s"
            assert not c.healthy()
            assert c.degraded_decisions - before == 20
            # Pipelines are answered by the policy too.
            out = await c.pipeline().acquire("a", LIMIT).acquire("b", LIMIT).execute()
            assert [d.degraded for d in out] == [True, True]
        finally:
            os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while (await c.acquire("k", LIMIT, 0)).degraded:
            assert time.monotonic() < deadline, "still degraded 10 s after SIGCONT"
            await asyncio.sleep(0.01)
        assert c.healthy()
        await c.close()

    asyncio.run(main())


def test_one_probe_at_a_time(fake_server: Any) -> None:
    # Reads everything, answers nothing. While the probe waits, the others
    # get the policy's answer at once; "closed" denies.
    def hang(conn: socket.socket, n: int) -> None:
        while conn.recv(65536):
            pass

    srv = fake_server(hang)
    # Calls that waited would take the 0.1 s timeout each; the bounds below
    # are far under it and far over a fast failure.
    c = Client(srv.path, timeout=0.1, on_unavailable="closed", breaker=(2, 0.15, 0.3))
    for _ in range(2):
        d = c.acquire("k", LIMIT)
        assert d.degraded and not d.allowed
    start = time.monotonic()
    assert c.acquire("k", LIMIT).degraded
    assert time.monotonic() - start < 0.05
    time.sleep(0.16)  # the open period has passed
    probe = threading.Thread(target=c.acquire, args=("probe", LIMIT))
    probe.start()
    time.sleep(0.01)
    start = time.monotonic()
    for _ in range(10):
        assert c.acquire("k", LIMIT).degraded
    # The probe holds the connection's lock while it waits: the others did
    # not queue behind it.
    assert time.monotonic() - start < 0.05
    probe.join()
    assert not c.healthy()
    assert c.degraded_decisions == 14


def refusing(status: Status, written: threading.Event) -> Any:
    def handle(conn: socket.socket, n: int) -> None:
        conn.sendall(proto.frame(proto.Kind.RESPONSE, 0, 1, proto.encode_error(0, status, "refused by the test")))
        conn.close()
        written.set()
    return handle


@pytest.mark.parametrize("status,exc", [(Status.BUSY, Busy), (Status.DENIED, Denied)])
def test_refusal_before_the_request_sync(fake_server: Any, status: Status, exc: type) -> None:
    # The sidecar refuses the connection and closes it before the client
    # writes: the write fails (EPIPE), and the refusal is what is reported.
    # Busy is an outage (Unavailable), Denied a mistake: not one.
    written = threading.Event()
    srv = fake_server(refusing(status, written), check=False)
    with pytest.raises(exc, match="refused by the test") as start:
        Client(srv.path)  # the start check
    assert isinstance(start.value, Unavailable) == (status == Status.BUSY)
    for op in ("acquire", "ping", "pipeline"):
        written.clear()
        c = Client(srv.path, on_unavailable="raise", timeout=1, lazy=True)
        connect = c._connect

        def connect_then_wait() -> socket.socket:
            s = connect()
            assert written.wait(5)
            time.sleep(0.01)  # the close is done
            return s

        c._connect = connect_then_wait  # type: ignore[method-assign]
        with pytest.raises(exc) as info:
            if op == "acquire":
                c.acquire("k", LIMIT)
            elif op == "ping":
                c.ping()
            else:
                c.pipeline().acquire("k", LIMIT).execute()
        assert "refused by the test" in str(info.value) and "roken pipe" not in str(info.value)
        c.close()


@pytest.mark.parametrize("status,exc", [(Status.BUSY, Busy), (Status.DENIED, Denied)])
def test_refusal_before_the_request_async(fake_server: Any, status: Status, exc: type) -> None:
    written = threading.Event()
    srv = fake_server(refusing(status, written), check=False)
    with pytest.raises(exc, match="refused by the test"):
        AsyncClient(srv.path)  # the start check

    async def main() -> None:
        # Reading paused, the refusal is still unread when the write fails
        # (EPIPE); reading, the refusal arrives before the request is sent.
        for paused in (True, False, True, False):
            written.clear()
            c = AsyncClient(srv.path, on_unavailable="raise", timeout=1, lazy=True)
            connect = c._connect

            async def connect_then_wait() -> Any:
                conn = await connect()
                if paused:
                    conn.transport.pause_reading()
                while not written.is_set():
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0.01)  # the close is done
                return conn

            c._connect = connect_then_wait  # type: ignore[method-assign]
            with pytest.raises(exc) as info:
                await c.acquire("k", LIMIT)
            assert "refused by the test" in str(info.value) and "roken pipe" not in str(info.value)
            await c.close()

    asyncio.run(main())


def test_busy_real_sidecar(make_sidecar: Any) -> None:
    sc = make_sidecar(args=["--max-conns", "1"])
    deadline = time.monotonic() + 10
    while True:  # the fixture's own probe of the socket may still hold the one connection
        try:
            first = Client(sc.socket, on_unavailable="raise")
            first.ping()
            break
        except Busy:
            assert time.monotonic() < deadline, "the sidecar stayed busy"
            time.sleep(0.01)
    for _ in range(10):
        with pytest.raises(Busy):
            Client(sc.socket, on_unavailable="raise")  # its start check
        c = Client(sc.socket, on_unavailable="open", lazy=True)
        with pytest.raises(Busy, match="never answered"):  # an outage, but of a sidecar that never answered
            c.acquire("k", LIMIT)
        c.close()
    first.close()


def test_error_texts_for_people(fake_server: Any) -> None:
    # One sentence, no package prefixes.
    texts: List[str] = []
    c = Client("/nonexistent/sluice.sock", on_unavailable="raise", lazy=True)
    for f in (lambda: c.ping(), lambda: c.acquire("", LIMIT), lambda: c.acquire("k", "gcra:burst=x"),
              lambda: c.acquire("k", LIMIT, -1), lambda: c.multi([])):
        try:
            f()
        except Exception as e:  # noqa: BLE001
            texts.append(str(e))
    assert len(texts) == 5
    for t in texts:
        assert not t.startswith(("sluice:", "proto:")) and "\n" not in t, t
    assert texts[0] == "the sidecar is unavailable: nothing listens at /nonexistent/sluice.sock: No such file or directory"
    assert isinstance(_policy.breaker_open("x"), Unavailable)
