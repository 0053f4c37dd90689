#!/bin/sh
# Exports the PyTorch models into a fresh folder and checks them through
# salusd: torch_models.sh PYTHON torch_export.py onnx_torch_check
# SKIP (77) when PyTorch or torchvision is missing; any other failure of the
# export fails the test.
set -u
dir=$(mktemp -d /tmp/salus-onnx-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
"$1" "$2" "$dir" >"$dir/export.log" 2>&1
rc=$?
grep -v -i warning "$dir/export.log"
if [ "$rc" -eq 77 ]; then
    exit 77
fi
if [ "$rc" -ne 0 ]; then
    echo "torch_export.py failed (exit $rc)"
    exit 1
fi
"$3" "$dir"
