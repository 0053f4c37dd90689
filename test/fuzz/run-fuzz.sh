#!/usr/bin/env bash
# run-fuzz.sh TARGET SEED_CORPUS SECONDS: one bounded libFuzzer run over a
# scratch copy of the seed corpus (the committed seeds are never modified).
# Prints "fuzz NAME: executions=N ..."; fails on a crash, leak, UB, timeout
# or out-of-memory, printing the report and the crashing input (base64).
# FUZZ_SECONDS overrides SECONDS.
set -uo pipefail
target=$1
seeds=$2
secs=${FUZZ_SECONDS:-$3}
name=$(basename "$target")
work=$(mktemp -d "${TMPDIR:-/tmp}/salus-$name-XXXXXX")
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/" 2>/dev/null || true
"$target" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2560 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1
rc=$?
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$')
speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$work/log" | grep -o '[0-9]*$')
cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1 | grep -o '[0-9]*')
echo "fuzz $name: executions=${execs:-0} exec_per_s=${speed:-0} coverage=${cov:-0}" \
  "seconds=$secs corpus=$(ls "$work/corpus" | wc -l) rc=$rc"
if [ "$rc" -ne 0 ]; then
  tail -n 80 "$work/log"
  for f in "$work"/artifacts/*; do
    [ -f "$f" ] || continue
    echo "input $f (base64; replay: base64 -d > x && $target x):"
    base64 -w 0 "$f" | head -c 16384
    echo
  done
  echo "kept in $work"
  exit 1
fi
rm -rf "$work"
