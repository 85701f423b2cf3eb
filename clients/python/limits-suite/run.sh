#!/usr/bin/env bash
# Runs limits' own storage and strategy tests (sync and asyncio) against the
# limits storage, on the tree setup.sh patched (make test runs it). SLUICED
# names the sluiced binary to test, PYTHON the interpreter (.venv's, with
# requirements-test.txt, by default).
#
# Only limits' tests of the sluice backend run (-m sluice): the others need
# the Redis, Memcached and MongoDB containers of limits' docker-compose.
# pytest-asyncio's fixture loop scope is set, as it asks (limits' pytest.ini
# leaves it unset and makes every warning an error). Storages each test drops
# keep their connection open until collected, which Python reports as a
# ResourceWarning: ignored, as limits' storages have no close.
set -euo pipefail
: "${SLUICED:?SLUICED names the sluiced binary to test}"
SLUICED=$(realpath "$SLUICED")
export SLUICED
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
python=${PYTHON:-.venv/bin/python}
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
export PYTHONPATH=$root/clients/python/src${PYTHONPATH:+:$PYTHONPATH}

cd var/limits-suite/limits-5.8.0
"$python" -m pytest -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function \
  -W ignore::ResourceWarning -m sluice -q \
  tests/test_storage.py tests/test_strategy.py tests/aio/test_storage.py tests/aio/test_strategy.py
