"""The package installs as a user installs it: pip install of the directory, and of a built wheel.

Each install goes into a fresh virtual environment, and the installed
client (not the source tree) then talks to the real sidecar. pip builds
with its usual isolation, so it fetches the build backend (setuptools) as a
user's pip would.
"""

from __future__ import annotations

import filecmp
import glob
import os
import shutil
import subprocess
import sys
from typing import Iterator

import pytest

from conftest import HERE, REPO, Sidecar, short_tmpdir

PROJECT = os.path.abspath(os.path.join(HERE, ".."))

SCRIPT = """
import sys
before = set(sys.modules)  # what the interpreter loaded at start (site hooks included)
import importlib.metadata as md, os
import sluice
assert os.path.realpath(sluice.__file__).startswith(os.path.realpath(sys.prefix)), sluice.__file__
assert os.path.exists(os.path.join(os.path.dirname(sluice.__file__), "py.typed"))
meta = md.metadata("sluice-ratelimit")
assert meta["Name"] == "sluice-ratelimit", meta["Name"]
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
# No dependencies: only the limits extra (pip install sluice-ratelimit[limits]) has one.
assert md.requires("sluice-ratelimit") == ['limits<6,>=5; extra == "limits"'], md.requires("sluice-ratelimit")
import sluice.aio, sluice.asgi, sluice.wsgi, sluice.headers, sluice.guard, sluice.proto  # noqa: E401
if hasattr(sys, "stdlib_module_names"):  # 3.10+: the standard library only, at run time
    new = {m.split(".")[0] for m in set(sys.modules) - before}
    outside = new - set(sys.stdlib_module_names) - {"sluice"}
    assert not outside, outside
with sluice.Client(sys.argv[1]) as c:
    d = c.acquire("installed", "gcra:burst=0,count=1,period=1h")
    assert d.allowed and not d.degraded, d
    assert not c.acquire("installed", "gcra:burst=0,count=1,period=1h").allowed
print("ok")
"""


@pytest.fixture
def workdir() -> Iterator[str]:
    d = short_tmpdir()
    # A copy of the project, so that building leaves nothing in the source tree.
    shutil.copytree(PROJECT, os.path.join(d, "src"),
                    ignore=shutil.ignore_patterns("tests", "bench", "build", "dist", "*.egg-info", "__pycache__",
                                                  ".pytest_cache"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run(*args: str, cwd: str) -> str:
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{' '.join(args)} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def venv(d: str, name: str) -> str:
    path = os.path.join(d, name)
    run(sys.executable, "-m", "venv", path, cwd=d)
    return os.path.join(path, "bin", "python")


def test_license_is_the_repositorys() -> None:
    assert filecmp.cmp(os.path.join(PROJECT, "LICENSE"), os.path.join(REPO, "LICENSE"), shallow=False)


def test_pip_install_directory(workdir: str, sidecar: Sidecar) -> None:
    py = venv(workdir, "dir")
    run(py, "-m", "pip", "install", "--quiet", os.path.join(workdir, "src"), cwd=workdir)
    assert run(py, "-c", SCRIPT, sidecar.socket, cwd=workdir).strip() == "ok"


def test_built_wheel(workdir: str, sidecar: Sidecar) -> None:
    dist = os.path.join(workdir, "dist")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, os.path.join(workdir, "src"),
        cwd=workdir)
    wheels = glob.glob(os.path.join(dist, "*.whl"))
    assert [os.path.basename(w) for w in wheels] == ["sluice_ratelimit-0.1.0-py3-none-any.whl"]
    py = venv(workdir, "whl")
    run(py, "-m", "pip", "install", "--quiet", wheels[0], cwd=workdir)
    assert run(py, "-c", SCRIPT, sidecar.socket, cwd=workdir).strip() == "ok"
