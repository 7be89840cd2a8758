# Sourced by the deploy/ scripts: quiet Flower, find its executables, small helpers.
export FLWR_TELEMETRY_ENABLED="${FLWR_TELEMETRY_ENABLED:-0}"
export FLWR_DISABLE_UPDATE_CHECK="${FLWR_DISABLE_UPDATE_CHECK:-1}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="${FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION:-1}"
DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROJECT_DIR="$(dirname "$DEPLOY_DIR")"

die() { echo "error: $*" >&2; exit 2; }

# An executable of the Python environment fedsuite is installed in: $FEDSUITE_VENV/bin, the active venv, PATH.
flower_bin() {
    local name="$1" dir
    for dir in "${FEDSUITE_VENV:+$FEDSUITE_VENV/bin}" "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin}"; do
        [ -n "$dir" ] && [ -x "$dir/$name" ] && { echo "$dir/$name"; return; }
    done
    command -v "$name" || die "$name not found: activate the environment fedsuite is installed in (or set FEDSUITE_VENV)"
}

warn_insecure() {
    echo "WARNING: $1 runs WITHOUT TLS$2: traffic is unencrypted and unauthenticated. Use this only on a" \
         "trusted network or for debugging; drop --insecure for a real deployment." >&2
}
