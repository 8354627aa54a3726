#!/usr/bin/env bash
# One entry point for developers and CI.
#   ./dev.sh demo    install what is missing, bring the local stack up, run the demo pipeline
#   ./dev.sh test    install what is missing, lint and type-check, bring the local stack up, run the whole test suite
#   ./dev.sh setup   only install (Debian packages, the Python package, the jars)
# Everything is idempotent: a second run skips what is already there.
set -euo pipefail
cd "$(dirname "$0")"

# What the local stack needs, and the Debian/Ubuntu package that provides it when it is missing.
# Any installed Java >= 17 and PostgreSQL >= 14 serve (the stack finds them the same way:
# src/postbox/stack/prereqs.py); otherwise the distribution's default version is installed.
MIN_JAVA=17
MIN_POSTGRES=14
# The interpreter that creates the project's virtual environment. Everything is installed into
# .venv (POSTBOX_VENV moves it), never into this interpreter: Debian's and Ubuntu's python3 are
# externally managed (PEP 668) and refuse `pip install` outside a venv.
PYTHON=${PYTHON:-python3}
VENV=${POSTBOX_VENV:-.venv}
VPY="$VENV/bin/python"

# The CLI through the venv's interpreter: works before a shell has picked up the console script.
postbox() { "$VPY" -m postbox "$@"; }

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

java_major() {  # the major version of the java binary $1 ("1.8" counts as 8), or 0
  "$1" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\)\(\.\([0-9][0-9]*\)\)\{0,1\}.*/\1 \3/p' | head -1 \
    | awk '{ print ($1 == 1 ? $2 : $1) + 0 }'
}

have_java() {
  local java
  for java in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} $(command -v java 2>/dev/null) /usr/lib/jvm/*/bin/java; do
    [ -x "$java" ] && [ "$(java_major "$java")" -ge "$MIN_JAVA" ] && return 0
  done
  return 1
}

have_postgres() {
  local bin version
  [ -n "${POSTBOX_PG_BIN:-}" ] && [ -x "$POSTBOX_PG_BIN/postgres" ] && return 0
  for bin in /usr/lib/postgresql/*/bin; do
    version=$(basename "$(dirname "$bin")")
    [[ "$version" =~ ^[0-9]+$ ]] && [ "$version" -ge "$MIN_POSTGRES" ] && [ -x "$bin/postgres" ] && [ -x "$bin/initdb" ] && return 0
  done
  return 1
}

missing_debian_packages() {
  local missing=()
  have_postgres || missing+=(postgresql)
  have_java || missing+=(default-jre-headless)
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v redis-cli >/dev/null || missing+=(redis-tools)
  command -v redis-sentinel >/dev/null || missing+=(redis-sentinel)  # the Redis failover scenarios
  command -v mvn >/dev/null || missing+=(maven)
  echo "${missing[@]:-}"
}

stop_system_services() {
  # Debian starts a system Redis and PostgreSQL on the default ports; the local stack runs its own.
  local sudo=$1 cluster
  $sudo systemctl disable --now redis-server >/dev/null 2>&1 || $sudo service redis-server stop >/dev/null 2>&1 || true
  $sudo systemctl disable --now redis-sentinel >/dev/null 2>&1 || $sudo service redis-sentinel stop >/dev/null 2>&1 || true
  command -v pg_lsclusters >/dev/null || return 0
  for cluster in $(pg_lsclusters -h 2>/dev/null | awk '{ print $1 "/" $2 }'); do
    $sudo pg_ctlcluster --force "${cluster%%/*}" "${cluster#*/}" stop >/dev/null 2>&1 || true
  done
}

install_debian_packages() {
  local missing
  missing=$(missing_debian_packages)
  [ -z "$missing" ] && return 0
  if ! command -v apt-get >/dev/null; then
    log "missing: $missing (install them with your package manager: Java >= $MIN_JAVA, PostgreSQL >= $MIN_POSTGRES)"; exit 1
  fi
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  log "installing Debian packages: $missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
  stop_system_services "$sudo"
}

ensure_venv() {
  [ -x "$VPY" ] && "$VPY" -c "import sys" 2>/dev/null && return 0
  log "creating the project's virtual environment $VENV with $PYTHON"
  rm -rf "$VENV"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian/Ubuntu ship venv (and ensurepip) in a separate package.
    local sudo="" version
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    command -v apt-get >/dev/null || { log "$PYTHON cannot create a venv; install its venv module"; exit 1; }
    log "installing python${version}-venv"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "python${version}-venv" >/dev/null \
      || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
  fi
}

install_python_package() {
  ensure_venv
  local stamp="$VENV/.postbox-stamp" wanted
  wanted=$( (cat pyproject.toml constraints.txt; "$VPY" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && "$VPY" -c "import postbox" 2>/dev/null; then
    return 0
  fi
  # Every extra (the CLI, the consumer, the tests) plus psycopg's binary build, so no libpq
  # headers or compiler are needed.
  log "installing postbox-cdc[all,test,binary] into $VENV (pinned by constraints.txt)"
  # The distribution was called `postbox` before it became postbox-cdc: drop the old one's files.
  if "$VPY" -m pip show --quiet postbox >/dev/null 2>&1; then
    "$VPY" -m pip uninstall --quiet --yes postbox
  fi
  "$VPY" -m pip install --quiet --disable-pip-version-check -e '.[all,test,binary]' -c constraints.txt
  echo "$wanted" > "$stamp"
}

setup() {
  install_debian_packages
  install_python_package
}

stack_up() {
  log "postbox up"
  local start=$SECONDS
  postbox up
  log "postbox up took $((SECONDS - start)) s"
}

run_tests() {
  # With arguments: exactly the pytest run asked for. Without: the whole suite in three runs. The
  # unit tests (CPU-bound, independent: ~100 s of CPU) on two pytest-xdist workers; the tests of the
  # stack that only use it as clients do (their own topics, groups and keys) on two workers too, a
  # file per worker at a time (they mostly wait for the services: half the wall time); then the
  # `disruptive` ones (they stop, restart or reconfigure a shared service, or read or reset
  # stack-wide state) alone, one after the other. Every run always runs; any failing fails.
  if [ $# -gt 0 ]; then
    "$VPY" -m pytest "$@"
    return
  fi
  local status=0
  "$VPY" -m pytest tests/unit -n 2 || status=$?
  "$VPY" -m pytest --ignore=tests/unit -m "not disruptive" -n 2 --dist loadfile || status=$?
  "$VPY" -m pytest --ignore=tests/unit -m disruptive || status=$?
  return "$status"
}

case "${1:-}" in
  setup)
    setup ;;
  demo)
    setup
    stack_up
    shift
    postbox demo "$@" ;;
  test)
    setup
    log "lint (ruff) and types (mypy --strict on the public modules; both configured in pyproject.toml)"
    "$VPY" -m ruff check .
    "$VPY" -m mypy
    log "radon complexity below 15 in the library (tools/complexity_allowlist.txt: still to split) and no import circle"
    "$VPY" tools/complexity_check.py
    "$VPY" tools/import_cycles.py
    stack_up
    shift
    log "schema compatibility"
    postbox schemas check
    log "tests"
    run_tests "$@" ;;
  *)
    echo "usage: ./dev.sh demo|test|setup [args]" >&2; exit 2 ;;
esac
