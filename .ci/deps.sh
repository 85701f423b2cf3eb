#!/usr/bin/env bash
# Checks the import arrows between the project's packages with `go list -deps`.
# A package may only depend on what the table in the README ("Layout") allows.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(sed -n "s/^module //p" go.mod) # go list -m lists every module of the workspace (go.work)
fail=0

# forbid PKG PATTERN...: PKG must not depend (transitively) on any package
# matching one of the extended regular expressions. Every package may import
# vocab, the shared facts, which imports only the standard library.
forbid() {
  local pkg=$1; shift
  compgen -G "$pkg/*.go" >/dev/null || return 0
  local deps
  deps=$(go list -deps "./$pkg" | grep -v -e "^$mod/$pkg\$" -e "^$mod/vocab\$" || true)
  for pat in "$@"; do
    if bad=$(grep -E "$pat" <<<"$deps"); then
      echo "deps: $pkg must not import $pat, but imports:"; sed 's/^/  /' <<<"$bad"; fail=1
    fi
  done
}

forbid vocab "^$mod/" '\.' # standard library only (no module path has a dot in stdlib)
forbid bucket "^$mod/" '\.' # vocab and the standard library
forbid shm "^$mod/(bucket|proto|internal)"
forbid proto "^$mod/(shm|bucket|internal)"
forbid internal/engine "^$mod/(internal/server|clients)"
forbid internal/server "^$mod/clients" '^flag$'
forbid clients/go/sluice "^$mod/(shm|bucket|internal)" '^google\.golang\.org/grpc' '^github\.com/envoyproxy/'
# The rate limit service's matching: the engine's limits, never the server or the config file.
forbid internal/rls "^$mod/(internal/(server|config|global)|clients|cmd)"
# Global limits: bucket, go-redis and the standard library; the engine calls them, not the reverse.
forbid internal/global "^$mod/(shm|clients|cmd|internal/(engine|server))"
forbid internal/redistest "^$mod/(shm|bucket|proto|clients|cmd)" "^$mod/internal/([^s]|s[^i]|si[^d])" # sidecartest only
forbid internal/sidecartest "^$mod/" # the tests of internal/server use it
# The Go middleware stores, each a module of its own: the client and the library it adapts.
for m in clients/go/*/go.mod; do forbid "${m%/go.mod}" "^$mod/(shm|bucket|internal|cmd|bench)"; done
# Their helpers are in the main module, which must not require the stores' libraries.
# internal/sidecartest, of the standard library only, is the one internal package they may use.
for pkg in clients/go/internal/storekey clients/go/internal/sluicedtest; do
  forbid $pkg "^$mod/(shm|bucket|cmd)" "^$mod/internal/([^s]|s[^i]|si[^d])" '^github.com/(ulule|sethvargo|go-chi|throttled)/'
done

# Direct imports only: the server reaches the table through the engine.
if go list -f '{{join .Imports "\n"}}' ./internal/server | grep -qx "$mod/shm"; then
  echo "deps: internal/server must not import shm (the engine owns the table)"; fail=1
fi

# Direct imports only: the standard library itself depends on unsafe.
if compgen -G "proto/*.go" >/dev/null && go list -f '{{join .Imports "\n"}}' ./proto | grep -qx unsafe; then
  echo "deps: proto must not import unsafe"; fail=1
fi

# Source rules go list cannot see.
if grep -rn --include='*.go' --exclude='*_test.go' 'time\.Now' bucket/ 2>/dev/null; then
  echo "deps: bucket must not read the clock (time is a parameter)"; fail=1
fi
if grep -rn --include='*.go' --exclude='*_test.go' -E '"(crypto/rand|math/rand(/v2)?)"' bucket/ 2>/dev/null; then
  echo "deps: bucket must not draw random numbers (a lease id is a parameter)"; fail=1
fi
if grep -rln --include='*.go' --exclude='*_test.go' -E 'os\.Exit|log\.Fatal' shm bucket proto internal 2>/dev/null; then
  echo "deps: library packages must not exit the process"; fail=1
fi
[ $fail -eq 0 ] && echo "deps: ok"
exit $fail
