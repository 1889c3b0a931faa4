#!/usr/bin/env bash
# `make test`: vet, then every test, with a throwaway Postgres so the store
# conformance suite and the end-to-end tests run on both engines.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

pgdir=$(mktemp -d /tmp/relay-pgtest.XXXXXX)
cleanup() { scripts/pgtest.sh stop "$pgdir" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
echo "==> starting a throwaway Postgres"
RELAY_TEST_DATABASE_URL=$(scripts/pgtest.sh start "$pgdir")
export RELAY_TEST_DATABASE_URL RELAY_REQUIRE_POSTGRES=1

echo "==> go vet"
go vet ./...

echo "==> go test -race (every package but the end-to-end suite)"
go test -race -count=1 -timeout 10m $(go list ./... | grep -v /cloud/e2e)

echo "==> go test (end-to-end: real cloud and host processes)"
go test -count=1 -timeout 10m ./cloud/e2e/...

echo "==> all tests passed in $(( $(date +%s) - start ))s"
