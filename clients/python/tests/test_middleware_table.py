"""The WSGI and ASGI middlewares under every limit a client accepts, and under every kind of
failure, against the real sluiced (and fake sidecars for the failures it does not make).

The Go middleware's tests (http_algorithms_test.go, http_failures_test.go) check the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from conftest import FakeServer, Sidecar, read_frame, short_tmpdir

from sluice import AsyncClient, Client, Concurrency, Limit, SlidingLog, Status, TokenBucket, proto
from sluice.asgi import RateLimitMiddleware as ASGIMiddleware
from sluice.wsgi import RateLimitMiddleware as WSGIMiddleware

CONFIG = """limits:
  api:
    limit: "gcra:burst=1,count=1,period=1h"
  jobs:
    limit: "concurrency:limit=1,lease=1m"
"""


@pytest.fixture
def named(make_sidecar: Callable[..., Sidecar]) -> Sidecar:
    """A sidecar whose config defines a named rate limit (api) and a named concurrency limit (jobs)."""
    path = os.path.join(short_tmpdir(), "sluice.yaml")
    with open(path, "w") as f:
        f.write(CONFIG)
    return make_sidecar(args=["--config", path])


def wsgi_app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


async def asgi_app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


Response = Tuple[int, Dict[str, str]]


def call_wsgi(app: Any, path: str = "/") -> Response:
    got: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"], got["headers"] = status, headers
        return lambda data: None

    result = app({"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "10.9.0.1"}, start_response)
    try:
        b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return int(got["status"].split()[0]), {k.lower(): v for k, v in got["headers"]}


def call_asgi(app: Any, path: str = "/") -> Response:
    sent: List[Dict[str, Any]] = []

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        await app({"type": "http", "method": "GET", "path": path, "headers": [], "client": ("10.9.0.1", 1)},
                  None, send)
    asyncio.run(main())
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}


def by_path(request: Dict[str, Any]) -> str:
    return "path:" + request.get("PATH_INFO", request.get("path", ""))


# limit, its RateLimit-Policy, the first request's RateLimit r, whether it is leased
ALGORITHMS = [
    ("token_bucket:max=2,refill_time=1h,refill_amount=1", '"p";q=2;w=7200', 1),
    ("gcra:burst=1,count=1,period=1h", '"p";q=2;w=7200', 1),
    ("fixed_window:limit=2,window=1h", '"p";q=2;w=3600', 1),
    ("sliding_window:limit=2,window=1h", '"p";q=2;w=3600', 1),
    ("pacer:rate=1,period=1h,max_delay=1ms", '"p";q=1;w=3600', 0),
    ("sliding_log:limit=2,window=1h", '"p";q=2;w=3600', 1),
    ("window_counters:limit=2,window=1h,counters=6", '"p";q=2;w=3600', 1),
    ("quota:limit=2,period=day,tz=Europe/Paris", '"p";q=2;w=86400', 1),
    ("api", '"p";q=2', 1),  # a named limit: its window is in the sidecar's config
    ("concurrency:limit=1,lease=1m", '"p";q=1;qu="concurrent-requests"', 0),
    ("jobs", '"p";q=1;qu="concurrent-requests"', 0),  # a named concurrency limit
]


@pytest.mark.parametrize("headers", [True, False], ids=["headers", "no headers"])
@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
@pytest.mark.parametrize("spec,policy,r", ALGORITHMS, ids=[a[0] for a in ALGORITHMS])
def test_every_limit(named: Sidecar, spec: str, policy: str, r: int, kind: str, headers: bool) -> None:
    leased = spec.startswith("concurrency") or spec == "jobs"
    client = Client(named.socket, on_unavailable="raise") if kind == "wsgi" \
        else AsyncClient(named.socket, on_unavailable="raise")
    mw, call = (WSGIMiddleware, call_wsgi) if kind == "wsgi" else (ASGIMiddleware, call_asgi)
    limits: Dict[str, Any] = {"limit": None, "concurrency": spec} if leased else {"limit": spec}
    app = mw(wsgi_app if kind == "wsgi" else asgi_app, client, key=by_path, name="p", headers=headers, **limits)
    path = "/" + spec

    status, h = call(app, path)
    assert status == 200
    if headers:
        assert h["ratelimit-policy"] == policy
        assert h["ratelimit"] == f'"p";r={r}' if leased else h["ratelimit"].startswith(f'"p";r={r};t=')
    else:
        assert "ratelimit" not in h and "ratelimit-policy" not in h
    if leased:  # a slot held by another process
        sync = Client(named.socket, on_unavailable="raise")
        assert sync.lease("path:" + path, Limit.parse(spec))
    for _ in range(10):
        status, h = call(app, path)
        if status != 200:
            break
    assert status == 429, "never denied"
    # A denial carries the fields whatever `headers` says.
    assert h["ratelimit-policy"] == policy
    if leased:
        assert h["ratelimit"] == '"p";r=0' and "retry-after" not in h
    else:  # t is the retry time, as Retry-After is
        assert int(h["retry-after"]) > 0 and h["ratelimit"] == f'"p";r=0;t={h["retry-after"]}'


# ---- failures ---------------------------------------------------------------------------


def answering(status: Status, message: str) -> Callable[[socket.socket, int], None]:
    """A fake sidecar that answers every request with an error of ``status``."""

    def handle(conn: socket.socket, n: int) -> None:
        while True:
            req = read_frame(conn)
            if req is None:
                return
            h = proto.parse_header(req)
            code = req[proto.HEADER_LEN]
            conn.sendall(proto.frame(proto.Kind.RESPONSE, h.id, 1, proto.encode_error(code, status, message),
                                     h.version))
    return handle


def older(conn: socket.socket, n: int) -> None:
    """A fake sidecar of protocol version 2: it refuses a frame of version 3 with BadVersion."""
    req = read_frame(conn)
    if req is not None and proto.parse_header(req).version > 2:
        conn.sendall(proto.frame(proto.Kind.RESPONSE, 0, 1, proto.encode_error(
            0, Status.BAD_VERSION, "version 3, this side speaks 1 to 2"), proto.MIN_VERSION))
    conn.close()


OPEN, CLOSED, RAISE = "open", "closed", "raise"
# What a request gets: (status, logged by the middleware, decided by the policy).
PASSED = (200, False, True)
DENIED = (429, False, True)
UNAVAILABLE = (503, True, False)
MISTAKE = (500, True, False)
BY_POLICY = {OPEN: (200, True, True), CLOSED: (429, True, True), RAISE: (503, True, False)}


class Env:
    """The sidecars and fake sidecars of the failure table, made as the rows need them."""

    def __init__(self, make_sidecar: Callable[..., Sidecar], fake_server: Callable[..., FakeServer],
                 named: Sidecar) -> None:
        self.make_sidecar, self.fake_server, self.named = make_sidecar, fake_server, named

    def full(self) -> str:
        sc = self.make_sidecar(slots=8, slot_size=64)
        c = Client(sc.socket, on_unavailable="raise")
        for i in range(100):
            try:
                c.acquire(f"fill:{i}", TokenBucket(10, 3600))
            except Exception:  # noqa: BLE001 - TableFull: full
                break
        return sc.socket


ROWS: List[Tuple[str, Any, Dict[str, Any], Dict[str, Tuple[int, bool, bool]]]] = [
    # name, the socket (or "outage", "absent"), the middleware's limits, what each policy gets
    ("outage", "outage", {"limit": TokenBucket(10, 3600)}, {OPEN: PASSED, CLOSED: DENIED, RAISE: UNAVAILABLE}),
    ("outage, leased", "outage", {"limit": None, "concurrency": Concurrency(1, 60)},
     {OPEN: PASSED, CLOSED: DENIED, RAISE: UNAVAILABLE}),
    ("never answered", "absent", {"limit": TokenBucket(10, 3600)}, dict.fromkeys((OPEN, CLOSED, RAISE), UNAVAILABLE)),
    ("never answered, leased", "absent", {"limit": None, "concurrency": Concurrency(1, 60)},
     dict.fromkeys((OPEN, CLOSED, RAISE), UNAVAILABLE)),
    ("table full", lambda env: env.full(), {"limit": TokenBucket(10, 3600)}, BY_POLICY),
    ("internal error", lambda env: env.fake_server(answering(Status.INTERNAL, "disk on fire")).path,
     {"limit": TokenBucket(10, 3600)}, BY_POLICY),
    ("invalid limit", lambda env: env.named.socket, {"limit": TokenBucket(0, 3600)},
     dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
    ("unknown name", lambda env: env.named.socket, {"limit": "nope"}, dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
    ("lease of a rate limit", lambda env: env.named.socket, {"limit": None, "concurrency": "api"},
     dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
    ("unsupported", lambda env: env.fake_server(answering(Status.UNSUPPORTED, "a global limit needs --global-redis")).path,
     {"limit": TokenBucket(10, 3600)}, dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
    ("older sidecar", lambda env: env.fake_server(older).path, {"limit": SlidingLog(2, 60)},
     dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
    ("refused process", "refusing", {"limit": TokenBucket(10, 3600)}, dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
    ("invalid key", lambda env: env.named.socket, {"limit": TokenBucket(10, 3600), "key": lambda r: "k" * 1025},
     dict.fromkeys((OPEN, CLOSED, RAISE), MISTAKE)),
]


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
@pytest.mark.parametrize("name,where,limits,want", ROWS, ids=[r[0] for r in ROWS])
def test_failures(make_sidecar: Callable[..., Sidecar], fake_server: Callable[..., FakeServer], named: Sidecar,
                  caplog: pytest.LogCaptureFixture, name: str, where: Any, limits: Dict[str, Any],
                  want: Dict[str, Tuple[int, bool, bool]], kind: str) -> None:
    env = Env(make_sidecar, fake_server, named)
    lazy = False
    stop: Optional[Sidecar] = None
    if where == "outage":
        stop = make_sidecar()
        path = stop.socket
    elif where == "absent":
        path, lazy = os.path.join(short_tmpdir(), "absent.sock"), True
    elif where == "refusing":
        path, lazy = make_sidecar(args=["--allow-uid", str(os.getuid() + 1)]).socket, True
    else:
        path = where(env)
    make = Client if kind == "wsgi" else AsyncClient
    clients = {p: make(path, timeout=1, on_unavailable=p, lazy=lazy) for p in want}
    if stop is not None:
        stop.stop()  # the clients' sidecar answered their start checks, and went away
    mw, app, call = (WSGIMiddleware, wsgi_app, call_wsgi) if kind == "wsgi" else (ASGIMiddleware, asgi_app, call_asgi)
    for policy, (status, logged, by_policy) in want.items():
        caplog.clear()
        c = clients[policy]
        kw = dict(limits)
        key = kw.pop("key", by_path)
        m = mw(app, c, key=key, **kw)
        with caplog.at_level(logging.ERROR, logger="sluice"):
            got = [call(m, "/f") for _ in range(3)]
        assert [s for s, _ in got] == [status] * 3, policy
        for s, h in got:
            assert "ratelimit" not in h and "ratelimit-policy" not in h, policy  # nothing the sidecar said
            assert "retry-after" not in h, policy  # "closed" knows no retry time
        lines = [r for r in caplog.records if "could not decide" in r.getMessage()]
        assert len(lines) == (1 if logged else 0), (policy, [r.getMessage() for r in lines])
        if logged:
            assert lines[0].levelno == logging.ERROR and "1 since the last line (1 in all)" in lines[0].getMessage()
        assert c.degraded_decisions == (3 if by_policy else 0), policy
