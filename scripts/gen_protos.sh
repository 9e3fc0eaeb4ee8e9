#!/usr/bin/env bash
# Regenerate the Python code of the falcon.v1 gRPC API from protos/falcon/v1/*.proto.
#
# Usage: scripts/gen_protos.sh [OUT_DIR]     (default: falcon_proto)
#
# The output is committed. protoc writes `from falcon.v1 import x_pb2` when protos import each
# other, which would need `gen/` on sys.path; the imports are rewritten to relative ones
# (`from . import x_pb2`) so the package imports as `falcon_proto.falcon.v1` with no
# sys.path changes. experiments/tests/test_grpc.py checks that this script reproduces the
# committed files byte for byte, so edit the .proto files and rerun this, never the output.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/falcon_proto}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

cd "$ROOT"
rm -rf "$OUT/falcon"
mkdir -p "$OUT/falcon/v1"
"$PYTHON" -m grpc_tools.protoc -I protos \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  protos/falcon/v1/*.proto

for f in "$OUT"/falcon/v1/*.py "$OUT"/falcon/v1/*.pyi; do
  sed -i -E 's/^from falcon\.v1 import /from . import /' "$f"
done

printf '"""Generated code of the Falcon gRPC API (scripts/gen_protos.sh); do not edit."""\n' \
  > "$OUT/__init__.py"
printf '"""Generated package `falcon` (proto package root); do not edit."""\n' \
  > "$OUT/falcon/__init__.py"
printf '"""Generated package `falcon.v1` (protos/falcon/v1); do not edit."""\n' \
  > "$OUT/falcon/v1/__init__.py"
