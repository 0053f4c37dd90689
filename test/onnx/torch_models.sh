#!/bin/sh
# Exports the PyTorch models into a fresh folder and checks them through
# salusd: torch_models.sh PYTHON torch_export.py onnx_torch_check
set -u
dir=$(mktemp -d /tmp/salus-onnx-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
"$1" "$2" "$dir" 2>&1 | grep -v -i warning
rc=$(cat "$dir/.rc" 2>/dev/null || true)
if [ ! -s "$dir/models.txt" ]; then
    echo "SKIP: the export made no models (is python3-torch installed?)"
    exit 77
fi
"$3" "$dir"
