#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: a data directory of its own, a Unix socket in it
# and no TCP at all, a database, a writer role and a read-only role.
#
#   eval "$(tools/pg_test_server.sh start)"    # prints the exports below, starts the server
#   ... TUNECACHE_TEST_PG_URL / TUNECACHE_TEST_PG_RO_URL point at it ...
#   tools/pg_test_server.sh stop               # stops it, removes the directory
#
# `start` installs Debian's postgresql package with apt-get where no server binaries are found
# (that needs root). Run as root, the server runs as the `postgres` system user (initdb refuses
# root); run as anyone else, it runs as that user. `stop` takes the directory as its argument,
# or from TUNECACHE_TEST_PG_DIR, which `start` exports.
#
# The roles log in with passwords (scram-sha-256) made up at each start: the URLs carry
# credentials, as a real fleet store's do, so the tests can check that none is ever printed.
# The superuser logs in only by peer authentication, as the OS user that runs the server.
set -euo pipefail

DB=tunecache_test
WRITER=tunecache_writer
READER=tunecache_reader

die() {
  echo "pg_test_server: $*" >&2
  exit 1
}

# The folder of initdb, pg_ctl and postgres: on PATH, else Debian's newest version folder
# (Debian keeps them off PATH, behind its own pg_ctlcluster wrappers).
# (Nothing here writes to /dev/null: no tunecache tool writes to a shared device.)
find_bin() {
  local ctl found=""
  ctl=$(command -v pg_ctl || true)
  if [ -n "$ctl" ] && [ -n "$(command -v initdb || true)" ]; then
    dirname "$(readlink -f "$ctl")"
    return
  fi
  for candidate in /usr/lib/postgresql/*/bin; do
    [ -x "$candidate/initdb" ] && found=$(printf '%s\n%s\n' "$found" "$candidate" | sort -V | tail -n 1)
  done
  [ -n "$found" ] && echo "$found"
}

install_server() {
  [ "$(id -u)" = 0 ] || die "no PostgreSQL server binaries found, and only root can apt-get install them"
  echo "pg_test_server: installing Debian's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # --no-install-recommends: the server and its client, not a cluster Debian would start itself.
  apt-get install -y -qq --no-install-recommends postgresql postgresql-client >&2
}

# Run a command as the user the server runs as.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    # From /, not the caller's folder, which the postgres user may not enter.
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

password() {
  # Letters and digits only: nothing a URL or a shell would have to quote.
  head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'
}

start() {
  local bin dir super
  bin=$(find_bin || true)
  if [ -z "$bin" ]; then
    install_server
    bin=$(find_bin || true)
    [ -n "$bin" ] || die "the postgresql package installed no server binaries"
  fi
  # /tmp, not a deeper folder: a Unix socket's path is limited to about 100 bytes.
  dir=$(mktemp -d /tmp/tc-pg.XXXXXX)
  if [ "$(id -u)" = 0 ]; then
    [ -n "$(getent passwd postgres || true)" ] || die "no postgres system user to run the server as"
    chown postgres: "$dir"
    super=postgres
  else
    super=$(id -un)
  fi
  chmod 755 "$dir"
  as_owner "$bin/initdb" -D "$dir/data" -U "$super" --auth-local=peer --auth-host=reject \
    -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    die "initdb failed"
  }
  # Only the socket, only in this folder; passwords for everyone but the superuser.
  cat >"$dir/data/pg_hba.conf" <<EOF
local all $super peer
local all all scram-sha-256
EOF
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off" start >&2 || {
    cat "$dir/server.log" >&2
    die "the server did not start"
  }
  local wpass rpass
  wpass=$(password)
  rpass=$(password)
  as_owner psql -q -X -v ON_ERROR_STOP=1 -h "$dir" -U "$super" -d postgres >&2 <<EOF
CREATE ROLE $WRITER LOGIN PASSWORD '$wpass';
CREATE ROLE $READER LOGIN PASSWORD '$rpass';
CREATE DATABASE $DB OWNER $WRITER;
\connect $DB
-- The reader may look, never change: USAGE on every schema the writer makes (the tests make
-- one each) and SELECT on every table and view in them, present and future.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO $READER;
ALTER DEFAULT PRIVILEGES FOR ROLE $WRITER GRANT USAGE ON SCHEMAS TO $READER;
ALTER DEFAULT PRIVILEGES FOR ROLE $WRITER GRANT SELECT ON TABLES TO $READER;
EOF
  echo "export TUNECACHE_TEST_PG_DIR='$dir'"
  echo "export TUNECACHE_TEST_PG_URL='postgresql+psycopg://$WRITER:$wpass@/$DB?host=$dir'"
  echo "export TUNECACHE_TEST_PG_RO_URL='postgresql+psycopg://$READER:$rpass@/$DB?host=$dir'"
}

stop() {
  local dir=${1:-${TUNECACHE_TEST_PG_DIR:-}}
  [ -n "$dir" ] || die "stop: which server? give its folder, or set TUNECACHE_TEST_PG_DIR"
  [ -d "$dir/data" ] || die "stop: $dir is not a folder this script started a server in"
  local bin
  bin=$(find_bin || true)
  if [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) die "usage: $0 start | stop [FOLDER]" ;;
esac
