#!/usr/bin/env bash
# `make test`: vet, then every test, with a throwaway Postgres so the store
# conformance suite and the end-to-end tests run on both engines.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# phase names the phase starting now and says how long the last one took,
# so that a run that creeps towards CI's budget shows where.
phase_name="" phase_start=$start
phase() {
	local now; now=$(date +%s)
	[ -n "$phase_name" ] && echo "    ($phase_name: $(( now - phase_start ))s)"
	phase_name=$1 phase_start=$now
	[ -n "$1" ] && echo "==> $1"
	return 0
}

# -race needs cgo, and cgo a C compiler (the project itself uses none).
if ! command -v "$(go env CC)" >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || { echo "make test: -race needs a C compiler ($(go env CC)); install gcc" >&2; exit 1; }
	echo "==> installing gcc (the race detector needs cgo)"
	apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
fi

# The tests of `make run` and of the README's walkthrough run them as
# written, and they use curl and jq.
missing=$(for tool in curl jq; do command -v "$tool" >/dev/null 2>&1 || echo "$tool"; done)
if [ -n "$missing" ]; then
	command -v apt-get >/dev/null 2>&1 || { echo "make test: install" $missing "(make run and the README's walkthrough use them)" >&2; exit 1; }
	echo "==> installing" $missing "(make run and the README's walkthrough use them)"
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The console and the host page are tested in a real headless Chromium.
if [ -z "${RELAY_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || { echo "make test: install Chromium (the console and the host page are tested in it) or set RELAY_CHROMIUM" >&2; exit 1; }
	echo "==> installing chromium (the console and the host page are tested in it)"
	apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
export RELAY_REQUIRE_BROWSER=1
RELAY_SCREENSHOT_DIR=${RELAY_SCREENSHOT_DIR:-$PWD/.screenshots}
export RELAY_SCREENSHOT_DIR

pgdir=$(mktemp -d /tmp/relay-pgtest.XXXXXX)
cleanup() { scripts/pgtest.sh stop "$pgdir" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
phase "starting a throwaway Postgres"
RELAY_TEST_DATABASE_URL=$(scripts/pgtest.sh start "$pgdir")
export RELAY_TEST_DATABASE_URL RELAY_REQUIRE_POSTGRES=1

phase "go vet"
go vet ./...

phase "go test -race (every package but the end-to-end suite)"
# -race also turns on checkptr, which checks every unsafe pointer conversion;
# in modernc.org's SQLite (C translated to Go, all unsafe arithmetic) that
# doubled the CPU of SQLite-heavy tests. It stays on for the project's own
# code. The race detector instruments every package written in Go, the
# SQLite driver's included, but not SQLite's C translated to Go and the libc
# under it (modernc.org/sqlite/lib, modernc.org/libc): C is never
# instrumented under cgo either, SQLite locks its own memory, and what the
# project hands it is copied by the driver, which is instrumented. That
# took the SQLite store's suite from 65 to 28 s on an idle machine.
#
# Three packages at a time on
# two cores: the store's and the server's tests wait on Postgres a good
# part of their time (251 s against 285 s with two). The Postgres store's
# suite, the longest, waits on Postgres nearly all its time (8 s of CPU in
# 120): it runs beside the others, six of its tests at a time (72 s).
race=(go test -race -gcflags='modernc.org/...=-d=checkptr=0'
	-gcflags='modernc.org/sqlite/lib=-d=checkptr=0 -race=false' -gcflags='modernc.org/libc/...=-d=checkptr=0 -race=false'
	-count=1 -timeout 10m)
pgstore_log=$(mktemp)
"${race[@]}" -parallel 6 ./cloud/store/postgres/ >"$pgstore_log" 2>&1 &
pgstore=$!
race_ok=0
"${race[@]}" -p 3 $(go list ./... | grep -v /cloud/e2e | grep -v '/cloud/store/postgres$') || race_ok=1
wait "$pgstore" || race_ok=1
cat "$pgstore_log"; rm -f "$pgstore_log"
[ "$race_ok" = 0 ] || { echo "FAIL: go test -race"; exit 1; }

phase "go test (end-to-end: real cloud and host processes)"
# Its tests mostly wait on processes (a handler's sleep, a lease, a cut
# link): four at a time keep the machine busy, where two (the default on
# two cores) left it idle two thirds of the time.
go test -count=1 -parallel 4 -timeout 10m ./cloud/e2e/...

phase "fault suite, short (scripts/chaos -short: cloud SIGKILLs, host SIGKILLs, network faults, hosts on heartbeats then on sockets; make chaos runs every scenario in full), beside go test -fuzz (every fuzz target, ${RELAY_FUZZTIME:-1s} each, two at a time)"
# The fault suite mostly waits on its processes and on the faults' windows
# (its deadlines are a minute and more), so the fuzz targets, which want
# the CPU, run beside it rather than after it.
#
# Targets are found, not named, so new ones run too. Set RELAY_FUZZTIME
# (e.g. 30s) to fuzz longer. A failure leaves its input under the package's
# testdata/fuzz/ as a regression seed. Two targets run at once, each with
# one fuzzing worker: as much fuzzing as one target with two workers, and
# each run's build, link and start (1.5–2.5 s) overlaps another's fuzzing.
# Go 1.26's fuzz coordinator can also end a run with a bare "context
# deadline exceeded" when -fuzztime runs out under load (golang/go#75804):
# with no failing input written, that is not a finding, and the target is
# run again (at most twice more: on a loaded machine the race can come
# twice in a row).
fuzz_one() {
  local pkg=$1 target=$2 out try
  for try in 1 2 3; do
    if out=$(go test -run '^$' -fuzz "^${target}\$" -fuzztime="${RELAY_FUZZTIME:-1s}" -parallel 1 "$pkg/" 2>&1); then
      echo "    ${pkg#./} $target ok"
      return 0
    fi
    if [ "$try" -lt 3 ] && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
      echo "    $target: fuzz coordinator deadline race, no failing input; again"
      continue
    fi
    printf '%s\nFAIL: %s %s\n' "$out" "${pkg#./}" "$target"
    return 1
  done
}
export -f fuzz_one
fuzz_log=$(mktemp)
fuzz_all() {
  fuzz_pkgs=$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u)
  for pkg in $fuzz_pkgs; do
    go test -list '^Fuzz' "$pkg/" | grep '^Fuzz' | sed "s|^|$pkg |"
  done | xargs -P 2 -L 1 bash -c 'fuzz_one "$0" "$1"'
}
fuzz_all >"$fuzz_log" 2>&1 &
fuzz_pid=$!
chaos_ok=0
go run ./scripts/chaos -short || chaos_ok=1
fuzz_ok=0
wait "$fuzz_pid" || fuzz_ok=1
echo "==> go test -fuzz, beside it:"
cat "$fuzz_log"; rm -f "$fuzz_log"
[ "$chaos_ok" = 0 ] || { echo "FAIL: scripts/chaos -short"; exit 1; }
[ "$fuzz_ok" = 0 ] || { echo "FAIL: go test -fuzz"; exit 1; }

phase ""
echo "==> screenshots of the console and the host page: $RELAY_SCREENSHOT_DIR"
echo "==> all tests passed in $(( $(date +%s) - start ))s"
