#!/usr/bin/env bash
# Create .venv with the pinned dependencies and generate the gRPC code.
# Idempotent: re-runs only what changed (a stamp holds the requirements' hash).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.movepred-stamp
want=$(cat requirements.txt scripts/setup_env.sh | sha256sum | cut -d' ' -f1)

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade "pip==26.3"
  # torch==2.13.0 resolves to the CPU build on this machine's disk; an unpinned torch would pull CUDA.
  "$VENV/bin/python" -m pip install -q -r requirements.txt
  # The Triton server binary ships inside nvidia-pytriton. Its metadata pins numpy<2 and other
  # packages we do not use (we launch the binary, not the pytriton Python API): install it alone.
  "$VENV/bin/python" -m pip install -q --no-deps "nvidia-pytriton==0.7.0"
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
  echo "$want" > "$STAMP"
fi
"$VENV/bin/python" -m services.api.generate

# The buf CLI (`make lint`: buf lint and buf breaking of proto/), pinned in
# scripts/buf/package-lock.json and installed into scripts/buf/node_modules: a native binary
# in an npm package, which then runs offline.
BUF_DIR=scripts/buf
BUF_VERSION=$(sed -n 's/.*"@bufbuild\/buf": "\([^"]*\)".*/\1/p' "$BUF_DIR/package.json")
if [ "$("$BUF_DIR/node_modules/.bin/buf" --version 2>/dev/null)" != "$BUF_VERSION" ]; then
  if ! command -v npm >/dev/null; then
    echo "error: npm not found: install Node.js (18 or later) for the buf CLI that make lint runs" >&2
    exit 1
  fi
  npm ci --prefix "$BUF_DIR" --ignore-scripts --no-audit --no-fund --loglevel=error
fi
