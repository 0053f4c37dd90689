#!/usr/bin/env bash
# Slurm integration, for real: munged, slurmctld and slurmd on this machine
# with a generated configuration (a node with a gpu and 8 shards on
# /dev/null, as deploy/slurm/ describes), the salus SPANK plugin, a salusd,
# and `srun --salus` jobs of two users running job_client. Checks:
#   quota      a job holding 2 shards gets 2 x shard_memory and no more;
#              with shard_memory = memory limit / 8 (plugstack.conf's
#              advice: one shard's quota is one default lane), a 1-shard
#              job whose session declares nothing trains
#   priority   --nice lowers the sessions' priority, --salus=priority=N asks less
#   isolation  a job of another user, knowing a session's id and token,
#              cannot use it, change it or see it
#   scancel    a session left behind by a cancelled job (a daemon outside
#              the step's process tree, still connected) is closed
#   outsider   a process of the job's user outside Slurm (no SALUS_JOB)
#              is the user's own tenant: not counted under the running
#              step, and not closed when the step ends
#   down       with salusd down, `srun --salus` runs nothing, says why
#              (naming the socket) and exits non-zero
# Needs root (slurmd runs jobs as other users, munged runs as munge).
# Exits 77 (SKIP) only where Slurm cannot start here, and fails there under CI.
# (no pipefail: `grep -q` ends a pipe early on purpose)
set -u

# Under CI (CI=true) a test that cannot run fails: only the gpu suite may
# skip there (scripts/testsummary).
skip() {
  case "${CI:-}" in 1 | true | yes) echo "FAIL (CI, where this test must run): $*" >&2; exit 1 ;; esac
  echo "SKIP: $*" >&2
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  ps -eo pid,ppid,sid,stat,user,args | grep -E "job_client|slurmstepd|sleep 600" | grep -v grep >&2
  for f in "$tmp"/log/*; do echo "--- $f"; tail -n 25 "$f"; done >&2
  exit 1
}
[ -n "${SALUS_SPANK:-}" ] ||
  skip "the Slurm plugin was not built: libslurm-dev was missing when this build folder was configured (scripts/install-deps.sh deploy, then meson setup --wipe)"
[ "$(id -u)" = 0 ] || skip "needs root: slurmd runs jobs as other users and munged as munge"
for p in munged mungekey slurmctld slurmd srun squeue scancel runuser; do
  command -v "$p" >/dev/null || skip "$p not installed (scripts/install-deps.sh deploy)"
done
id munge >/dev/null 2>&1 || skip "no munge user"
for v in SALUSD SALUSCTL JOB_CLIENT SALUS_SPANK; do
  [ -n "${!v:-}" ] || { echo "FAIL: $v not set (run through meson test)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/salus-slurm.XXXXXX)
chmod 755 "$tmp"
pids=()
# every process of slurmd's tree (slurmstepd, epilogs), to stop it all
descendants() {
  local p
  for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done
}
cleanup() {
  local hpid slurmd_tree=()
  for f in a b; do
    hpid=$(cut -d' ' -f1 "$tmp/hold/$f" 2>/dev/null)
    [[ "$hpid" =~ ^[0-9]+$ ]] && kill "$hpid" 2>/dev/null
  done
  if [ -f "$tmp/slurmd.pid" ]; then
    slurmd_tree=($(cat "$tmp/slurmd.pid") $(descendants "$(cat "$tmp/slurmd.pid")"))
    # slurmstepd of a step reparents to init when slurmd forks it
    for p in $(pgrep -x slurmstepd); do
      ls -l "/proc/$p/fd" 2>/dev/null | grep -q "$tmp" && slurmd_tree+=("$p")
    done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for f in slurmd slurmctld munge/munged; do
    [ -f "$tmp/$f.pid" ] && kill "$(cat "$tmp/$f.pid")" 2>/dev/null
  done
  sleep 1
  for p in "${slurmd_tree[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp"/{state,spool,log,munge,msock,salus,hold}
chmod 1777 "$tmp/hold"
chown munge:munge "$tmp/munge" "$tmp/msock"
chmod 700 "$tmp/munge"
chmod 755 "$tmp/msock"

# two free ports next to each other
port=0
for try in $(shuf -i 20000-60000 -n 20); do
  if ! ss -ltn | grep -qE ":($try|$((try + 1)))\b"; then port=$try; break; fi
done
[ "$port" != 0 ] || skip "no free port pair found"

echo "== munged"
runuser -u munge -- mungekey -c -k "$tmp/munge/munge.key" || skip "mungekey -c failed"
runuser -u munge -- munged -S "$tmp/msock/munge.sock" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/seed" -f || skip "munged does not start here: $(tail -3 "$tmp/munge/munged.log")"

echo "== salusd"
sock="$tmp/salus/salus.sock"
"$SALUSD" --allow-root --listen "ipc://$sock" --ipc-mode 0666 --memory-limit 1G \
  >"$tmp/log/salusd.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || fail "salusd did not start"

host=$(hostname -s)
shard_memory=$(((1 << 30) / 8)) # --memory-limit / 8 shards, as plugstack.conf advises
cat >"$tmp/plugstack.conf" <<CONF
required $SALUS_SPANK url=ipc://$sock shard_memory=$shard_memory qos=normal:0
CONF
sed -e "s|@HOST@|$host|g" -e "s|@DIR@|$tmp|g" -e "s|@PORT@|$port|g" \
  -e "s|@PORT1@|$((port + 1))|g" <<'CONF' >"$tmp/slurm.conf"
ClusterName=salustest
SlurmctldHost=@HOST@(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=@PORT@
SlurmdPort=@PORT1@
AuthType=auth/munge
AuthInfo=socket=@DIR@/msock/munge.sock
CredType=cred/munge
StateSaveLocation=@DIR@/state
SlurmdSpoolDir=@DIR@/spool
SlurmctldPidFile=@DIR@/slurmctld.pid
SlurmdPidFile=@DIR@/slurmd.pid
SlurmctldLogFile=@DIR@/log/slurmctld.log
SlurmdLogFile=@DIR@/log/slurmd.log
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=@DIR@/plugstack.conf
KillWait=5
NodeName=@HOST@ NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:1,shard:8 State=UNKNOWN
PartitionName=debug Nodes=@HOST@ Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4
CONF
# deploy/slurm/gres.conf's set-up, on /dev/null: this node has no GPU
printf 'Name=gpu File=/dev/null\nName=shard Count=8 File=/dev/null\n' >"$tmp/gres.conf"
export SLURM_CONF="$tmp/slurm.conf"

echo "== slurmctld, slurmd"
slurmctld -f "$SLURM_CONF" || skip "slurmctld does not start here"
slurmd -f "$SLURM_CONF" || skip "slurmd does not start here"
up=0
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then up=1; break; fi
  sleep 0.5
done
[ $up = 1 ] || skip "the node did not come up: $(sinfo -h 2>&1 | head -1)"

run_as() { # user, srun args... (30 s at most)
  local user=$1; shift
  timeout 60 runuser -u "$user" -- srun --chdir=/ -n1 "$@"
}

echo "== quota: 2 shards = $((2 * shard_memory)) bytes"
out=$(run_as nobody --salus --gres=shard:2 "$JOB_CLIENT" open 200000000 200000000 2>&1)
echo "$out"
[ "$(grep -c '^open ' <<<"$out")" = 1 ] || fail "expected exactly one session to fit the quota"
grep -q '^refused 3: memory quota of job [0-9]*\.0: .*srun --gres=shard:N' <<<"$out" ||
  fail "the second session was not refused for the job's quota, saying what to do"
! grep -q '^refused.*--tenant-limits' <<<"$out" ||
  fail "the refusal points at a salusd flag that does not apply to a job"
grep -q 'job-client .*job [0-9]*\.0' <<<"$out" || fail "status does not show the session as the job's"

echo "== quota: 1 shard = $shard_memory bytes, one default lane"
out=$(run_as nobody --salus --gres=shard:1 "$JOB_CLIENT" train 5 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] && grep -qx 'trained 5' <<<"$out" || fail "a 1-shard job did not run (exit $rc)"

echo "== without --salus the step gets no SALUS_URL"
out=$(run_as nobody --gres=shard:1 env 2>&1)
! grep -q '^SALUS_\(URL\|JOB\)=' <<<"$out" || fail "a step without --salus was connected"

echo "== priority: --nice=7 lowers it to -7"
out=$(run_as nobody --salus --nice=7 --gres=shard:1 "$JOB_CLIENT" open 1000000 2>&1)
echo "$out" | grep job-client
awk '/job-client/ {print $4}' <<<"$out" | grep -qx -- -7 || fail "session priority is not -7"

echo "== priority: --salus=priority=-3 asks for less"
out=$(run_as nobody --salus=priority=-3 --gres=shard:1 "$JOB_CLIENT" open 1000000 2>&1)
awk '/job-client/ {print $4}' <<<"$out" | grep -qx -- -3 || fail "session priority is not -3: $out"
out=$(run_as nobody --salus=priority=lots true 2>&1)
grep -q 'expected priority=N' <<<"$out" || fail "a bad --salus value was taken: $out"

echo "== isolation and scancel"
rm -f "$tmp/hold/a" "$tmp/hold/a.end"
runuser -u nobody -- srun --chdir=/ -n1 --salus --gres=shard:1 -J holder \
  bash -c "\"$JOB_CLIENT\" hold \"$tmp/hold/a\" && exec sleep 600" >"$tmp/log/holder.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/hold/a" ] && break; sleep 0.2; done
[ -s "$tmp/hold/a" ] || fail "the holder job did not open its session"
read -r hpid hid htoken <"$tmp/hold/a" || true
[[ "$hpid" =~ ^[0-9]+$ && -n "${htoken:-}" ]] || fail "holder: $(cat "$tmp/hold/a")"
echo "holder pid $hpid session $hid"

out=$(run_as daemon --salus --gres=shard:1 "$JOB_CLIENT" probe "$hid" "$htoken" 2>&1)
echo "$out"
grep -q '^tensor 5: session .* belongs to another user' <<<"$out" ||
  fail "another job's user used the session"
grep -q '^set 5: ' <<<"$out" || fail "another job's user changed the session's priority"
grep -qx 'visible 0' <<<"$out" || fail "another job's user sees the session in status"

jobid=$(squeue -h -n holder -o %i | head -1)
[ -n "$jobid" ] || fail "holder job not in squeue"

echo "== a process of the job's user outside Slurm is the user's own tenant"
outside() { runuser -u nobody -- env -u SALUS_JOB SALUS_URL="ipc://$sock" "$JOB_CLIENT" "$@"; }
out=$(outside open 1000000 2>&1)
oid=$(awk '/^open / {print $2}' <<<"$out")
[ -n "$oid" ] || fail "a session outside the job did not open: $out"
grep -E "^ *$oid " <<<"$out"
grep -E "^ *$oid .* uid 65534$" <<<"$out" >/dev/null ||
  fail "a session outside the job was not its user's own: $(grep -E "^ *$oid " <<<"$out")"
rm -f "$tmp/hold/b" "$tmp/hold/b.end"
outside hold "$tmp/hold/b" >"$tmp/log/outsider.out" 2>&1
for _ in $(seq 100); do [ -s "$tmp/hold/b" ] && break; sleep 0.2; done
[ -s "$tmp/hold/b" ] || fail "the process outside the job did not open its session"

scancel "$jobid"
for _ in $(seq 100); do [ -s "$tmp/hold/a.end" ] && break; sleep 0.2; done
[ -s "$tmp/hold/a.end" ] || {
  kill -0 "$hpid" 2>/dev/null || fail "the holder was killed with the job: nothing was left behind to clean up"
  fail "the session left behind by job $jobid was not closed after scancel"
}
cat "$tmp/hold/a.end"
grep -q '^lost 14' "$tmp/hold/a.end" || fail "the holder saw $(cat "$tmp/hold/a.end"), not SESSION_LOST"
grep -q "job step $jobid.0 ended: 1 sessions closed\|job $jobid ended: .* 1 sessions closed" \
  "$tmp/log/salusd.log" || fail "salusd did not log closing the job's session"
# the job epilog closes every step of the job once more (for a slurmstepd
# that died before its step's end)
for _ in $(seq 50); do grep -q "job $jobid ended" "$tmp/log/salusd.log" && break; sleep 0.2; done
grep -q "job $jobid ended: 0 steps forgotten, 0 sessions closed" "$tmp/log/salusd.log" ||
  fail "the job epilog did not close job $jobid"
status=$(SALUS_URL="ipc://$sock" "$SALUSCTL" status)
! grep -qE "^ *$hid " <<<"$status" || fail "salusd still lists the session: $status"
# the session outside the job lives on
read -r bpid bid _ <"$tmp/hold/b" || true
[ ! -s "$tmp/hold/b.end" ] || fail "the session outside the job ended with it: $(cat "$tmp/hold/b.end")"
grep -qE "^ *$bid .* uid 65534$" <<<"$status" || fail "salusd lost the session outside the job: $status"
kill "$bpid" 2>/dev/null
grep -E "job\.(register|close)" "$tmp/log/salusd.log" | grep -E "job (step )?$jobid[ .]" | sed 's/^[^ ]* //'

echo "== a step asking for salus where salusd is down does not start, and srun fails"
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null
out=$(run_as nobody --salus echo started 2>&1)
rc=$?
echo "$out" | tail -n 4
! grep -qx started <<<"$out" || fail "the step ran without salusd"
[ $rc != 0 ] || fail "srun exited 0 for a step that did not run"
[ $rc != 124 ] || fail "srun hung with salusd down"
grep -q "salus: job step [0-9.]*: cannot reach salusd at ipc://$sock" <<<"$out" ||
  fail "srun's output does not say which socket could not be reached"
grep -q 'start salusd on this node' <<<"$out" || fail "srun's output does not say what to do"
echo "srun exited $rc"

echo "PASS: quota (2 shards, 1 shard), priority, isolation, scancel cleanup, outsider, refusal through srun --salus"
exit 0
