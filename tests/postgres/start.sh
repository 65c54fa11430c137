#!/usr/bin/env bash
# Start a private PostgreSQL server for the tests (once: a second call finds it running) and
# print its URL. The server lives in $RUNNER_TEST_PGDATA (default /tmp/runner-test-pg), listens
# on 127.0.0.1:$RUNNER_TEST_PGPORT (default 54329) only, and trusts local connections; the tests
# create a database of their own in it for each test. Exit 1, saying why, when no server can be
# started (PostgreSQL not installed).
set -euo pipefail
data=${RUNNER_TEST_PGDATA:-/tmp/runner-test-pg}
port=${RUNNER_TEST_PGPORT:-54329}
url="postgres://runner@127.0.0.1:$port/postgres"

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "no PostgreSQL server installed (Debian: apt-get install postgresql)" >&2
  exit 1
fi
# The server refuses to run as root: as root, it runs as the postgres user.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [ -x "$bin/pg_isready" ] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
  echo "$url"
  exit 0
fi
# One starter at a time per server (the lock is the data folder's: a second server of a test's
# own starts beside the first).
exec 9> "$data.lock"
flock 9
if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
  if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data"
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres "$data"
    as_owner "$bin/initdb" -D "$data" -U runner --auth=trust -E UTF8 >/dev/null
  fi
  as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$data -c fsync=off -c max_connections=200" \
    start >/dev/null 9>&-
fi
echo "$url"
