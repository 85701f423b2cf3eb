#!/usr/bin/env bash
# Installs what `make bench-compare` needs, when missing: redis-server
# (Debian's package) and, for the Python side, redis-py with hiredis in a
# virtual environment. Prints the Python interpreter to use; never fails:
# a missing piece only skips its targets.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${BENCH_VENV:-var/bench-venv}

if ! command -v redis-server >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  echo "bench: installing redis-server (apt-get)" >&2
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null; } ||
    echo "bench: could not install redis-server: the Redis targets will be skipped" >&2
fi

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import redis' >/dev/null 2>&1; then
  echo "bench: installing redis-py into $venv" >&2
  { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check 'redis[hiredis]'; } >&2 ||
    echo "bench: could not install redis-py: the Python side runs without its Redis rows" >&2
fi
if [ -x "$venv/bin/python" ]; then echo "$venv/bin/python"; else echo python3; fi
