#!/usr/bin/env bash
# The demo: one salusd on the cpu backend, two training jobs sharing it.
set -euo pipefail
build=${1:-build}
dir=$(mktemp -d /tmp/salus-demo-XXXXXX)
url="ipc://$dir/salus.sock"
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT

"$build/server/salusd" --listen "$url" --memory-limit 512M --policy fair &
server=$!
for _ in $(seq 100); do "$build/client/salusctl" --url "$url" status >/dev/null 2>&1 && break; sleep 0.05; done

echo "== two jobs train a 2-layer MLP each through one salusd"
"$build/examples/mlp_regression" --url "$url" --name job-a --seed 1 --steps 600 --every 100 --check &
a=$!
"$build/examples/mlp_regression" --url "$url" --name job-b --seed 2 --steps 600 --every 100 --hidden 128 --check &
b=$!
sleep 0.3
echo "== salusctl status while both train"
"$build/client/salusctl" --url "$url" status
wait $a
wait $b
echo "== salusctl status at the end"
"$build/client/salusctl" --url "$url" status
kill -TERM $server
wait $server
