#!/usr/bin/env bash
# Prepares the limits storage's tests (make test runs it; run.sh runs them):
#   - requirements.txt in a virtual environment ($VENV, var/limits-venv by
#     default), reinstalled when the file changes;
#   - limits' own tests, which are in its source distribution and not in
#     its wheel: the sdist of limits 5.8.0 fetched with pip (checked against
#     its SHA-256) into var/limits-suite/, unpacked, and patched with
#     sluice-backend.patch, which adds a sluice backend to the dicts and
#     parameter lists its storage tests are parametrised by, and a fixture
#     that starts sluiced for each test.
# Everything is downloaded here, none of it when the tests run; a second run
# with nothing changed downloads nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
venv=${VENV:-var/limits-venv}
dir=var/limits-suite
version=5.8.0
sha256=c9e0d74aed837e8f6f50d1fcebcf5fd8130957287206bc3799adaee5092655da
sdist=$dir/limits-$version.tar.gz
req=$here/requirements.txt

if ! cmp -s "$req" "$venv/.limits-requirements"; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  echo "limits-suite: installing $req into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.limits-requirements"
fi

mkdir -p "$dir"
if ! echo "$sha256  $sdist" | sha256sum --check --status 2>/dev/null; then
  echo "limits-suite: fetching the source distribution of limits $version" >&2
  rm -f "$sdist"
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    --dest "$dir" "limits==$version"
  if ! echo "$sha256  $sdist" | sha256sum --check --status; then
    echo "limits-suite: $sdist is not the limits $version this suite was written for (SHA-256 differs)" >&2
    exit 1
  fi
fi

# The patched tree, made again when the patch or the sdist changes.
stamp=$(cat "$here/sluice-backend.patch" "$sdist" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dir/limits-$version/.sluice-patched" 2>/dev/null)" != "$stamp" ]; then
  tmp=$(mktemp -d "$dir/unpack.XXXXXX")
  tar xzf "$sdist" -C "$tmp"
  # git apply, outside any repository (the ceiling keeps it from finding this one): it needs
  # nothing that git does not have.
  (cd "$tmp/limits-$version" && GIT_CEILING_DIRECTORIES=$(dirname "$PWD") git apply "$here/sluice-backend.patch")
  echo "$stamp" >"$tmp/limits-$version/.sluice-patched"
  rm -rf "$dir/limits-$version"
  mv "$tmp/limits-$version" "$dir/limits-$version"
  rm -rf "$tmp"
fi
