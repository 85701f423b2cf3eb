"""The README's Python examples run, against the real sidecar, so they cannot drift.

Each ```python block of clients/python/README.md runs in order in one
namespace, in a directory whose var/sluice.sock is the test sidecar's socket
(the path the examples use). The names the examples take from their
surroundings (a user, a WSGI app, ...) are stand-ins defined here. A line
``EXPR   # 'VALUE'`` asserts that EXPR is VALUE; a block that awaits runs in
an event loop. The signature line of block 3 is only shown, not run, and the
apps of the limits storage run in tests/limits_storage/test_limits_apps.py,
served by gunicorn and uvicorn.
"""

from __future__ import annotations

import asyncio
import os
import re
import textwrap
from typing import Any, Dict, List

import pytest

from conftest import HERE, Sidecar
import sluice

README = os.path.join(HERE, "..", "README.md")


def blocks() -> List[str]:
    with open(README) as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


class User:
    id = 42


class App:
    """A WSGI app with a wsgi_app attribute (Flask's shape), or an ASGI app."""

    def wsgi_app(self, environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        pass


class TooManyAttempts(Exception):
    def __init__(self, retry_after: Any) -> None:
        super().__init__(retry_after)


def test_readme_examples_run(sidecar: Sidecar, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "var").mkdir()
    os.symlink(sidecar.socket, tmp_path / "var" / "sluice.sock")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICE_SOCKET", raising=False)
    ran: List[str] = []

    async def send(addr: str) -> None:
        ran.append("send " + addr)

    ns: Dict[str, Any] = {name: getattr(sluice, name) for name in sluice.__all__}
    ns.update(user=User(), app=App(), aclient=sluice.AsyncClient(), addr="a@example.com", send=send,
              TooManyAttempts=TooManyAttempts, run_export=lambda: ran.append("export"))
    bs = blocks()
    assert len(bs) >= 5, "the README's python blocks were not found"
    for i, b in enumerate(bs, 1):
        if b.lstrip().startswith("Client(socket_path="):
            continue  # the constructor's signature, shown
        if "import sluice.limits_storage" in b:
            continue  # an app of the limits storage: tests/limits_storage/test_limits_apps.py serves it
        # EXPR   # 'VALUE'  asserts.
        b = re.sub(r"(?m)^(\S[^#\n]*?)\s+#\s+('.*')$", r"assert \1 == \2, \1", b)
        if re.search(r"(?m)^(async with|await )", b):
            b = "async def _block():\n" + textwrap.indent(b, "    ") + "\n    globals().update(locals())\n"
            exec(compile(b, f"README block {i}", "exec"), ns)
            asyncio.run(ns["_block"]())
        else:
            exec(compile(b, f"README block {i}", "exec"), ns)
    assert ran == ["export", "send a@example.com"]
    # The decorated function of block 4 works too.
    ns["build_report"](User())
