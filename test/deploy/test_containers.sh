#!/usr/bin/env bash
# The sidecar pattern with real containers (podman, runc): salusd in one
# container, a training job in another, sharing salusd's ipc:// socket
# through a volume; then salusd's container is restarted (SIGTERM drains it)
# and the job must resume in a new session and finish its training.
# Checks, besides both containers' exit codes: the job's session is listed
# by salusd as the trainer's uid (peer credentials cross containers), the
# job logs a resume, and salusd drained (exit 0) and started again.
# The image comes from deploy/container/build-image.sh: its Debian base is
# made once (mmdebstrap, ~40 s) and kept in podman's storage; each run
# rebuilds only the top layer (seconds). Exits 77 (SKIP) only where
# containers cannot start here, and fails there under CI.
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
  for c in "$srv" "$job"; do echo "--- podman logs $c"; podman logs "$c" 2>&1 | tail -n 20; done >&2
  exit 1
}
[ "$(id -u)" = 0 ] || skip "needs root (rootful podman)"
for p in podman runc mmdebstrap; do
  command -v "$p" >/dev/null || skip "$p not installed (scripts/install-deps.sh deploy)"
done
build=${BUILD_ROOT:?}
tmp=$(mktemp -d)
srv=salus-test-srv-$$ job=salus-test-job-$$ vol=salus-test-run-$$
cleanup() {
  podman rm -f -t 0 "$srv" "$job" >/dev/null 2>&1
  podman volume rm -f "$vol" >/dev/null 2>&1
  # the top layer goes (remade each run); the Debian base stays cached
  [ -n "${image:-}" ] && podman rmi -f "$image" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
# crun fails on these machines and podman's default ulimits cannot be set
printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n' >"$tmp/containers.conf"
export CONTAINERS_CONF="$tmp/containers.conf"
podman info >/dev/null 2>&1 || skip "podman does not work here: $(podman info 2>&1 | tail -1)"

t0=$(date +%s)
image=localhost/salus:test-$$
if ! out=$("${DEPLOY_DIR:?}/container/build-image.sh" "$build" "$image" 2>&1); then
  echo "$out" >&2
  # no mirror or no storage: containers cannot be made here
  grep -qiE 'mmdebstrap|apt|Temporary failure|could not resolve' <<<"$out" &&
    skip "the base image cannot be made here (Debian mirror?)"
  fail "build-image.sh failed"
fi
echo "image built in $(($(date +%s) - t0)) s"

podman volume create "$vol" >/dev/null || fail "podman volume create"
hardening=(--read-only --cap-drop=all --security-opt=no-new-privileges)
# :U hands the volume to salusd's uid: it refuses a socket folder others can write
podman run -d --name "$srv" "${hardening[@]}" -v "$vol:/run/salus:U" "$image" \
  salusd --listen ipc:///run/salus/salus.sock --ipc-mode 0666 --memory-limit 512M >/dev/null ||
  skip "a container cannot start here: $(podman logs "$srv" 2>&1 | tail -2)"
ok=0
for _ in $(seq 50); do
  podman exec "$srv" salusctl health >/dev/null 2>&1 && { ok=1; break; }
  sleep 0.2
done
[ $ok = 1 ] || fail "salusd in its container never became healthy"

# the job runs as another uid: a tenant of salusd, not an operator
podman run -d --name "$job" "${hardening[@]}" --user 20001:20001 -v "$vol:/run/salus" "$image" \
  resilient_train --steps 500 --step-ms 10 --checkpoint-every 20 --wait-s 60 >/dev/null ||
  fail "the job's container did not start"
for _ in $(seq 100); do
  grep -q 'step  100' <<<"$(podman logs "$job" 2>&1)" && break
  sleep 0.2
done
grep -q 'step  100' <<<"$(podman logs "$job" 2>&1)" || fail "the job did not reach step 100"
status=$(podman exec "$srv" salusctl status)
grep -E '^ +[0-9]+ resilient .* uid 20001$' <<<"$status" ||
  fail "salusd does not list the job's session as uid 20001: $status"

echo "== restarting salusd's container"
podman restart -t 30 "$srv" >/dev/null || fail "podman restart"
code=$(timeout 120 podman wait "$job") || fail "the job did not finish"
podman logs "$job" 2>&1 | tail -n 4
[ "$code" = 0 ] || fail "the job exited $code"
grep -q '^\[resilient\] resumed at step' <<<"$(podman logs "$job" 2>&1)" || fail "the job never resumed"
grep -q 'resumed 1 times' <<<"$(podman logs "$job" 2>&1)" || fail "the job did not resume exactly once"
grep -q 'srv.exit drained' <<<"$(podman logs "$srv" 2>&1)" || fail "salusd did not drain on the restart"
[ "$(grep -c 'srv.ready' <<<"$(podman logs "$srv" 2>&1)")" = 2 ] || fail "salusd did not start again"
podman exec "$srv" salusctl health >/dev/null || fail "salusd unhealthy after the restart"
echo "PASS: sidecar through a volume, job resumed after a salusd restart ($(($(date +%s) - t0)) s)"
