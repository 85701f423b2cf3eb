#!/usr/bin/env bash
# resp-bench.sh: Redis's own client (redis-benchmark) against Redis 7,
# Sluice in its default configuration (--transport auto) and on each
# transport it can be given, and the event-loop floor (bench/cmd/resp-floor),
# all on Unix sockets, interleaved in one run. Prints a Markdown table of
# requests per second (the median of the rounds) and each Sluice cell's
# ratio to Redis's PING in the same run.
#
#   bench/resp-bench.sh [rounds] [requests]     (make bench-resp)
#
# Needs redis-server and redis-benchmark, and bin/sluiced and
# bin/resp-floor (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
requests=${2:-200000}
for tool in redis-server redis-benchmark; do
  command -v $tool >/dev/null || { echo "resp-bench: $tool is missing (apt-get install redis-server redis-tools)" >&2; exit 1; }
done
for b in bin/sluiced bin/resp-floor; do
  [ -x $b ] || { echo "resp-bench: $b is missing (make build)" >&2; exit 1; }
done
d=$(mktemp -d /tmp/rb.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$d"; }
trap cleanup EXIT

redis-server --port 0 --unixsocket "$d/redis.sock" --save "" --appendonly no --daemonize no >/dev/null &
pids+=($!)
bin/resp-floor -socket "$d/floor.sock" &
pids+=($!)
transports=(auto goroutines epoll) # the default first
for t in "${transports[@]}"; do
  bin/sluiced --transport $t --state "$d/$t.state" --socket "$d/$t.sock" --resp-socket "$d/$t-resp.sock" \
    --slots 262144 --log-level warn &
  pids+=($!)
done
for s in redis.sock floor.sock auto-resp.sock goroutines-resp.sock epoll-resp.sock; do
  for _ in $(seq 100); do [ -S "$d/$s" ] && break; sleep 0.05; done
  [ -S "$d/$s" ] || { echo "resp-bench: $s did not come up" >&2; exit 1; }
done

# rps SOCKET CONNS PIPELINE COMMAND...: one redis-benchmark run's requests per second
rps() {
  local sock=$1 conns=$2 pipeline=$3
  shift 3
  redis-benchmark -s "$sock" -c "$conns" -P "$pipeline" -n "$requests" -r 100000 --csv "$@" | tail -1 | cut -d'"' -f4
}
# command, connections, requests in flight per connection
cells=("PING 16 1" "PING 50 1" "CL.THROTTLE 16 1" "CL.THROTTLE 50 1" "RL.REDUCE 16 1" "RL.REDUCE 50 1"
  "PING 1 1" "CL.THROTTLE 1 1" "CL.THROTTLE 16 16")
command_of() {
  case $1 in
  PING) echo PING ;;
  CL.THROTTLE) echo "CL.THROTTLE user:__rand_int__ 1000000 1000000 60 1" ;;
  RL.REDUCE) echo "RL.REDUCE user:__rand_int__ 1000000 60" ;;
  esac
}
declare -A res
for r in $(seq "$rounds"); do
  for cell in "${cells[@]}"; do
    set -- $cell
    cmd=$(command_of "$1")
    # Redis answers only PING: its cells are its PING rate at that concurrency.
    res["redis $cell $r"]=$(rps "$d/redis.sock" "$2" "$3" PING)
    res["floor $cell $r"]=$(rps "$d/floor.sock" "$2" "$3" $cmd)
    for t in "${transports[@]}"; do
      res["$t $cell $r"]=$(rps "$d/$t-resp.sock" "$2" "$3" $cmd)
    done
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| command, connections, pipeline | Redis 7 PING | floor | Sluice (default: auto) | Sluice goroutines | Sluice epoll | default / Redis | goroutines / Redis | epoll / Redis |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
for cell in "${cells[@]}"; do
  declare -A m=()
  for tgt in redis floor "${transports[@]}"; do
    vals=()
    for r in $(seq "$rounds"); do vals+=("${res["$tgt $cell $r"]}"); done
    m[$tgt]=$(median "${vals[@]}")
  done
  awk -v c="$cell" -v r="${m[redis]}" -v f="${m[floor]}" -v a="${m[auto]}" -v g="${m[goroutines]}" -v e="${m[epoll]}" 'BEGIN {
    printf "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2fx |\n", c, r, f, a, g, e, a/r, g/r, e/r }'
done
