#!/usr/bin/env bash
# One entry point for developers and CI.
#   ./dev.sh demo    install what is missing, bring the local stack up, run the demo pipeline
#   ./dev.sh test    install what is missing, bring the local stack up, run the whole test suite
#   ./dev.sh setup   only install (Debian packages, the Python package, the jars)
# Everything is idempotent: a second run skips what is already there.
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES=(postgresql redis-server redis-tools openjdk-17-jre-headless maven)
PYTHON=${PYTHON:-python3}

# The CLI through the interpreter: works before a shell (or pyenv) has picked up the console script.
postbox() { "$PYTHON" -m postbox "$@"; }

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

install_python_package() {
  local stamp=.postbox/pip-stamp wanted
  wanted=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && "$PYTHON" -c "import postbox" 2>/dev/null; then
    return 0
  fi
  log "installing the postbox Python package with its test extras (pinned by constraints.txt)"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check -e '.[test]' -c constraints.txt
  mkdir -p .postbox && echo "$wanted" > "$stamp"
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
    "$PYTHON" -m pytest "$@" ;;
  *)
    echo "usage: ./dev.sh demo|test|setup [args]" >&2; exit 2 ;;
esac
