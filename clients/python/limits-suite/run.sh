#!/usr/bin/env bash
# Runs limits' own storage and strategy tests (sync and asyncio) against the
# sluice storage, on the tree setup.sh prepared, then the storage's own tests
# (clients/python/tests/limits: mapping, failures, processes, and Flask and
# FastAPI apps under gunicorn and uvicorn with 4 workers each).
# SLUICED names the sluiced binary to test (make test builds bin/sluiced).
#
# Only limits' tests of the sluice backend run (-m sluice): the others need
# the Redis, Memcached and MongoDB containers of limits' docker-compose.
# Storages each test drops keep their connection open until collected,
# which Python reports as a ResourceWarning: ignored, as limits' storages
# have no close.
set -euo pipefail
: "${SLUICED:?SLUICED names the sluiced binary to test}"
SLUICED=$(realpath "$SLUICED")
export SLUICED
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
python=$(cd "${VENV:-var/limits-venv}" && pwd)/bin/python
export PYTHONPATH=$root/clients/python/src${PYTHONPATH:+:$PYTHONPATH}

cd "$root/var/limits-suite/limits-5.8.0"
"$python" -m pytest -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function \
  -W ignore::ResourceWarning -m sluice -q \
  tests/test_storage.py tests/test_strategy.py tests/aio/test_storage.py tests/aio/test_strategy.py

cd "$root"
"$python" -m pytest -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function -q clients/python/tests/limits_storage
