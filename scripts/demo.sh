#!/usr/bin/env bash
# The demo: one salusd on the cpu backend, two training jobs sharing it.
# salusctl status is taken once while both jobs are training (polled until
# both sessions are open, since how fast each job starts and trains depends
# on the machine's load), and once after they finished.
set -euo pipefail
build=${1:-build}
steps=${SALUS_DEMO_STEPS:-3000}
dir=$(mktemp -d /tmp/salus-demo-XXXXXX)
url="ipc://$dir/salus.sock"
server='' a='' b=''
trap 'kill $a $b $server 2>/dev/null || true; rm -rf "$dir"' EXIT

status() { "$build/client/salusctl" --url "$url" status; }

# as root (the demo's usual set-up) salusd must be told it may stay root:
# the jobs run as root too, and shared memory only works between one user
as_root=()
[ "$(id -u)" = 0 ] && as_root=(--allow-root)
"$build/server/salusd" --listen "$url" --memory-limit 512M --policy fair "${as_root[@]}" &
server=$!
for _ in $(seq 100); do status >/dev/null 2>&1 && break; sleep 0.05; done

echo "== two jobs train a 2-layer MLP each through one salusd ($steps steps each)"
"$build/examples/mlp_regression" --url "$url" --name job-a --seed 1 --steps "$steps" \
  --every 500 --check &
a=$!
"$build/examples/mlp_regression" --url "$url" --name job-b --seed 2 --steps "$steps" \
  --every 500 --hidden 128 --check &
b=$!

# Both jobs training: two sessions listed, each with iterations done (its
# tensors created and its graph registered, so its lane and memory show).
# The iterations are the 10th field of a session row (names without spaces:
# id, name, lane, prio, weight, persistent and peak with their units).
training() {
  grep -q '^2 sessions' <<<"$1" &&
    [ "$(awk '/^ +id name/ { rows = 1; next } rows && $10 > 0 { n++ } END { print n + 0 }' \
      <<<"$1")" -eq 2 ]
}
snapshot=''
for _ in $(seq 300); do # 30 s
  snapshot=$(status 2>/dev/null || true)
  training "$snapshot" && break
  sleep 0.1
done
echo "== salusctl status while both train"
if training "$snapshot"; then
  echo "$snapshot"
else
  echo "(the two jobs did not train at the same time within 30 s; status now:)"
  status
fi

wait $a
wait $b
a='' b=''
echo "== salusctl status at the end"
status
kill -TERM $server
wait $server
server=''
