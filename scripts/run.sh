#!/usr/bin/env bash
# The `make run` demo: the cloud on embedded SQLite, a host created and
# claimed, a demo receiver behind it, and the command that sends a signed
# GitHub webhook through the whole relay. Ctrl-C stops everything.
#
# Settings: RELAY_DEMO_PORT (cloud, default 8080), RELAY_DEMO_RECEIVER_PORT
# (default 3000), RELAY_DEMO_HOST_PORT (host local API, default 7071).
# State lives in ./.run (delete it to start over).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in go curl jq; do
  command -v "$tool" >/dev/null || { echo "run: '$tool' is required (apt-get install $tool)" >&2; exit 1; }
done

port=${RELAY_DEMO_PORT:-8080}
rport=${RELAY_DEMO_RECEIVER_PORT:-3000}
hport=${RELAY_DEMO_HOST_PORT:-7071}
run=.run
mkdir -p "$run" bin
chmod 700 "$run"

echo "==> building"
go build -o bin/cloud ./cloud
go build -o bin/host ./host
go build -o bin/demo-receiver ./scripts/demo-receiver
go build -o bin/send-sample ./scripts/send-sample

pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "==> stopped"
}
trap cleanup EXIT INT TERM

# The cloud wants an admin token of at least 32 characters (older runs made shorter ones).
[ "$(wc -c < "$run/admin-token" 2>/dev/null || echo 0)" -ge 32 ] || head -c 48 /dev/urandom | base64 | tr -d '/+=\n' > "$run/admin-token"
admin=$(cat "$run/admin-token")
cloud="http://127.0.0.1:$port"

echo "==> starting cloud on $cloud (SQLite at $run/cloud.db, log $run/cloud.log)"
RELAY_LISTEN="127.0.0.1:$port" RELAY_DATABASE_URL="sqlite:$run/cloud.db" RELAY_DATA_DIR="$run" \
  RELAY_ADMIN_TOKEN="$admin" RELAY_PUBLIC_URL="$cloud" bin/cloud serve >>"$run/cloud.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "$cloud/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "run: cloud failed to start:" >&2; tail -20 "$run/cloud.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "$cloud/readyz" >/dev/null || { echo "run: cloud not ready" >&2; exit 1; }

api() { # method path [json]
  curl -fsS -X "$1" "$cloud$2" -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' ${3:+-d "$3"}
}

if [ ! -f "$run/host/credentials.json" ]; then
  echo "==> creating host 'demo' and its github source"
  created=$(api POST /api/hosts '{"name":"demo"}')
  host_id=$(jq -r .id <<<"$created")
  code=$(jq -r .claim_code <<<"$created")
  head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$run/github-secret"
  api PUT "/api/hosts/$host_id/sources/github" \
    "$(jq -n --arg s "$(cat "$run/github-secret")" '{provider:"github", secrets:[$s]}')" >/dev/null
  echo "==> claiming host $host_id with code $code"
  bin/host claim --cloud "$cloud" --code "$code" --state "$run/host"
fi
host_id=$(jq -r .host_id "$run/host/credentials.json")

cat >"$run/host-config.json" <<JSON
{"cloud_url": "$cloud",
 "heartbeat_interval_s": 2,
 "webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:$rport/github"}}}
JSON

echo "==> starting demo receiver on 127.0.0.1:$rport"
bin/demo-receiver -listen "127.0.0.1:$rport" &
pids+=($!)
echo "==> starting host (local API on 127.0.0.1:$hport, log $run/host.log)"
RELAY_HOST_STATE="$run/host" RELAY_HOST_LISTEN="127.0.0.1:$hport" \
  bin/host run --config "$run/host-config.json" >>"$run/host.log" 2>&1 &
pids+=($!)

cat <<MSG

The relay is running. In another terminal, send a signed GitHub webhook:

    bin/send-sample -cloud $cloud -host $host_id -secret-file $run/github-secret

The receiver below prints it, byte-exact, once. Then look around:

    curl -s -H "Authorization: Bearer \$(cat $run/admin-token)" $cloud/api/hosts/$host_id/webhooks | jq
    curl -s http://127.0.0.1:$hport/webhooks/ledger | jq

Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"
echo "run: a process exited; see $run/cloud.log and $run/host.log" >&2
exit 1
