#!/usr/bin/env bash
# One entry point for developers and CI.
#   ./dev.sh demo    install what is missing, bring the local stack up, run the demo pipeline
#   ./dev.sh test    install what is missing, bring the local stack up, run the whole test suite
#   ./dev.sh setup   only install (Debian packages, the Python package, the jars)
# Everything is idempotent: a second run skips what is already there.
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES=(postgresql redis-server redis-tools openjdk-17-jre-headless maven)
# The interpreter that creates the project's virtual environment. Everything is installed into
# .venv (POSTBOX_VENV moves it), never into this interpreter: Debian's and Ubuntu's python3 are
# externally managed (PEP 668) and refuse `pip install` outside a venv.
PYTHON=${PYTHON:-python3}
VENV=${POSTBOX_VENV:-.venv}
VPY="$VENV/bin/python"

# The CLI through the venv's interpreter: works before a shell has picked up the console script.
postbox() { "$VPY" -m postbox "$@"; }

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

missing_debian_packages() {
  local pkg missing=()
  for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  echo "${missing[@]:-}"
}

install_debian_packages() {
  local missing
  missing=$(missing_debian_packages)
  [ -z "$missing" ] && return 0
  if ! command -v apt-get >/dev/null; then
    log "missing packages: $missing (install them with your package manager)"; exit 1
  fi
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  log "installing Debian packages: $missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # Debian starts a system Redis and PostgreSQL on the default ports; the local stack runs its own.
  $sudo systemctl disable --now redis-server >/dev/null 2>&1 || $sudo service redis-server stop >/dev/null 2>&1 || true
  $sudo pg_ctlcluster --force 15 main stop >/dev/null 2>&1 || true
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
  log "installing the postbox Python package into $VENV with its test extras (pinned by constraints.txt)"
  "$VPY" -m pip install --quiet --disable-pip-version-check -e '.[test]' -c constraints.txt
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
    stack_up
    shift
    log "schema compatibility"
    postbox schemas check
    log "tests"
    "$VPY" -m pytest "$@" ;;
  *)
    echo "usage: ./dev.sh demo|test|setup [args]" >&2; exit 2 ;;
esac
