#!/usr/bin/env bash
# Prepares limits' own storage and strategy tests to run against the limits
# storage (make setup runs it after .ci/setup; run.sh runs the tests). They
# are in limits' source distribution, not its wheel: the sdist of limits
# 5.8.0, fetched with pip (the project's virtual environment's, $VENV,
# .venv by default) and checked against its SHA-256, is unpacked into
# var/limits-suite/ and patched with sluice-backend.patch, which adds a
# sluice backend to the dicts and parameter lists limits' storage tests are
# parametrised by and a fixture that starts sluiced for each test. What they
# import (limits, pytest-asyncio, ...) is in requirements-test.txt.
# Everything is downloaded here, none of it when the tests run; a second run
# with nothing changed downloads nothing. With --check it fetches nothing
# and says whether something is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
venv=${VENV:-.venv}
dir=var/limits-suite
version=5.8.0
sha256=c9e0d74aed837e8f6f50d1fcebcf5fd8130957287206bc3799adaee5092655da
sdist=$dir/limits-$version.tar.gz
# The patched tree is made again when the patch or the sdist changes.
stamp() { cat "$here/sluice-backend.patch" "$sdist" | sha256sum | cut -d' ' -f1; }

if [ "${1:-}" = --check ]; then
  if ! echo "$sha256  $sdist" | sha256sum --check --status 2>/dev/null ||
    [ "$(cat "$dir/limits-$version/.sluice-patched" 2>/dev/null)" != "$(stamp)" ]; then
    echo "make test needs limits' tests from its source distribution in $dir: make setup fetches them" >&2
    exit 1
  fi
  exit 0
fi

mkdir -p "$dir"
if ! echo "$sha256  $sdist" | sha256sum --check --status 2>/dev/null; then
  echo "setup: fetching the source distribution of limits $version into $dir" >&2
  rm -f "$sdist"
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    --dest "$dir" "limits==$version"
  if ! echo "$sha256  $sdist" | sha256sum --check --status; then
    echo "setup: $sdist is not the limits $version the patch was written for (its SHA-256 differs)" >&2
    exit 1
  fi
fi

if [ "$(cat "$dir/limits-$version/.sluice-patched" 2>/dev/null)" != "$(stamp)" ]; then
  tmp=$(mktemp -d "$dir/unpack.XXXXXX")
  tar xzf "$sdist" -C "$tmp"
  # git apply, outside any repository (the ceiling keeps it from finding this one): it needs
  # nothing that git does not have.
  (cd "$tmp/limits-$version" && GIT_CEILING_DIRECTORIES=$(dirname "$PWD") git apply "$here/sluice-backend.patch")
  stamp >"$tmp/limits-$version/.sluice-patched"
  rm -rf "$dir/limits-$version"
  mv "$tmp/limits-$version" "$dir/limits-$version"
  rm -rf "$tmp"
fi
