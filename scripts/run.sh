#!/usr/bin/env bash
# The `make run` demo: the cloud on embedded SQLite, a host created and
# claimed, a demo receiver behind it, and the command that sends a signed
# GitHub webhook through the whole relay. Ctrl-C stops everything: the
# script exits 0 on SIGINT or SIGTERM; on a terminal, so does make run.
#
# Settings: RELAY_DEMO_PORT (cloud, default 8080), RELAY_DEMO_RECEIVER_PORT
# (default 3000), RELAY_DEMO_HOST_PORT (host local API, default 7071),
# RELAY_DEMO_DIR (state and logs, default .run; delete it to start over).
set -euo pipefail

# Under make, the terminal's Ctrl-C reaches make too, and make then reports
# "Interrupt" and exits 130 whatever the script does. On a terminal the demo
# therefore runs as a job of its own (bash -m gives it its own process group
# and the terminal's Ctrl-C), and make sees only its exit code.
if [ -t 0 ] && [ -z "${RELAY_DEMO_JOB:-}" ]; then
  RELAY_DEMO_JOB=1 exec bash -mc '"$0" "$@"; exit $?' "$0" "$@"
fi

cd "$(dirname "$0")/.."

for tool in go curl jq; do
  command -v "$tool" >/dev/null || { echo "run: '$tool' is required (apt-get install $tool)" >&2; exit 1; }
done

# listening PORT: does something accept connections on 127.0.0.1:PORT?
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

port=${RELAY_DEMO_PORT:-8080}
rport=${RELAY_DEMO_RECEIVER_PORT:-3000}
hport=${RELAY_DEMO_HOST_PORT:-7071}
for v in RELAY_DEMO_PORT:"$port" RELAY_DEMO_RECEIVER_PORT:"$rport" RELAY_DEMO_HOST_PORT:"$hport"; do
  name=${v%%:*} p=${v#*:}
  if ! [[ $p =~ ^[0-9]{1,5}$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
    echo "run: $name: invalid port \"$p\"" >&2
    exit 2
  fi
  if listening "$p"; then
    echo "run: port $p is in use; set $name to another port (e.g. $name=$((p + 1)) make run)" >&2
    exit 1
  fi
done
[ "$port" != "$rport" ] && [ "$port" != "$hport" ] && [ "$rport" != "$hport" ] || {
  echo "run: RELAY_DEMO_PORT ($port), RELAY_DEMO_RECEIVER_PORT ($rport) and RELAY_DEMO_HOST_PORT ($hport) must differ" >&2
  exit 2
}

run=${RELAY_DEMO_DIR:-.run}
mkdir -p "$run" bin
chmod 700 "$run"

pids=()
stop() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
# Ctrl-C (SIGINT) or SIGTERM is the normal way out: stop everything, exit 0.
trap 'stop; echo "==> stopped"; exit 0' INT TERM

echo "==> building"
make --no-print-directory build BIN=bin

# wait_for WHAT PID VAR LOG CHECK...: runs CHECK until it succeeds, while the
# process PID lives; if it exits (a port taken since the check above, a bad
# setting), says so with its log and the variable that moves its port.
wait_for() {
  local what=$1 pid=$2 var=$3 log=$4; shift 4
  for _ in $(seq 1 300); do
    "$@" && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "run: the $what exited before it was ready (a port in use? set $var to move it):" >&2
      tail -20 "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "run: the $what is not ready after 30 s; see $log" >&2
  exit 1
}

# Admin tokens are at least 32 characters.
if [ ! -f "$run/admin-token" ] || [ "$(wc -c <"$run/admin-token")" -lt 33 ]; then
  head -c 33 /dev/urandom | base64 > "$run/admin-token"
fi
admin=$(cat "$run/admin-token")
cloud="http://127.0.0.1:$port"

RELAY_LISTEN="127.0.0.1:$port" RELAY_DATABASE_URL="sqlite:$run/cloud.db" RELAY_DATA_DIR="$run" \
  RELAY_ADMIN_TOKEN="$admin" RELAY_PUBLIC_URL="$cloud" bin/cloud serve >>"$run/cloud.log" 2>&1 &
pids+=($!)
wait_for cloud "$!" RELAY_DEMO_PORT "$run/cloud.log" curl -fs -o /dev/null "$cloud/readyz"
echo "==> cloud listening on $cloud (SQLite at $run/cloud.db, log $run/cloud.log)"

api() { # method path [json]
  curl -fsS -X "$1" "$cloud$2" -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' ${3:+-d "$3"}
}

if [ ! -f "$run/host/credentials.json" ]; then
  created=$(api POST /api/hosts '{"name":"demo"}')
  host_id=$(jq -r .id <<<"$created")
  code=$(jq -r .claim_code <<<"$created")
  head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$run/github-secret"
  api PUT "/api/hosts/$host_id/sources/github" \
    "$(jq -n --arg s "$(cat "$run/github-secret")" '{provider:"github", secrets:[$s], options:{replay_guard:"off"}}')" >/dev/null
  echo "==> host 'demo' created ($host_id) with a github source; claiming it"
  bin/host claim --cloud "$cloud" --code "$code" --state "$run/host" >/dev/null
fi
host_id=$(jq -r .host_id "$run/host/credentials.json")

cat >"$run/host-config.json" <<JSON
{"cloud_url": "$cloud",
 "heartbeat_interval_s": 2,
 "webhooks": {"github": {"enabled": true, "forward": "http://127.0.0.1:$rport/github"}}}
JSON

bin/demo-receiver -listen "127.0.0.1:$rport" &
pids+=($!)
# It says "demo receiver listening on …" itself once it listens.
wait_for "demo receiver" "$!" RELAY_DEMO_RECEIVER_PORT /dev/null listening "$rport"

RELAY_HOST_STATE="$run/host" RELAY_HOST_LISTEN="127.0.0.1:$hport" \
  bin/host run --config "$run/host-config.json" >>"$run/host.log" 2>&1 &
pids+=($!)
heartbeated() { curl -fs "http://127.0.0.1:$hport/healthz" 2>/dev/null | jq -e '.last_heartbeat_at != null' >/dev/null; }
wait_for host "$!" RELAY_DEMO_HOST_PORT "$run/host.log" heartbeated
echo "==> host $host_id connected (local API on http://127.0.0.1:$hport, log $run/host.log)"

cat <<MSG

The relay is running.

    console:   $cloud/console/  (log in with the admin token in $run/admin-token)
    host page: http://127.0.0.1:$hport/

In another terminal, send a signed GitHub webhook:

    bin/send-sample -cloud $cloud -host $host_id -secret-file $run/github-secret

The receiver below prints it, byte-exact, once. Then look around:

    curl -s -H "Authorization: Bearer \$(cat $run/admin-token)" $cloud/api/hosts/$host_id/webhooks | jq
    curl -s http://127.0.0.1:$hport/webhooks/ledger | jq

Ctrl-C stops everything.
MSG
set +e
wait -n "${pids[@]}"
echo "run: a process exited; see $run/cloud.log and $run/host.log" >&2
exit 1
