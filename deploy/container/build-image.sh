#!/usr/bin/env bash
# Builds the salus container image from Debian packages and a build folder:
#   deploy/container/build-image.sh BUILD_DIR [TAG]      (as root; podman)
# 1. the base: `mmdebstrap --variant=minbase` of bookworm with salusd's
#    run-time libraries, imported with `podman import` as
#    localhost/salus-base:bookworm-<hash of the package list>; kept in
#    podman's storage, so later builds skip this step (about 40 s, needs the
#    Debian mirror);
# 2. salusd without CUDA (the base has no CUDA runtime): BUILD_DIR's own
#    when it links none, else one built in BUILD_DIR/deploy-container
#    (meson -Dcuda=disabled, kept for later builds);
# 3. the image TAG (default localhost/salus:latest) from Containerfile.
# Set CONTAINERS_CONF to a containers.conf holding `[containers]
# default_ulimits = []` where podman's default ulimits fail (these VMs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: build-image.sh BUILD_DIR [TAG]}" && pwd)
tag=${2:-localhost/salus:latest}
packages=libnng1,libprotobuf-c1,libopenblas0-pthread,libdnnl2,libgomp1
base=localhost/salus-base:bookworm-$(echo "$packages" | sha256sum | cut -c1-12)

if ! podman image exists "$base"; then
  echo "build-image: making $base with mmdebstrap (once)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mmdebstrap --quiet --variant=minbase --mode=root --include="$packages" \
    --aptopt='Acquire::Retries "3"' bookworm "$work/rootfs.tar"
  podman import --quiet --change 'CMD ["/bin/sh"]' "$work/rootfs.tar" "$base" >/dev/null
  rm -f "$work/rootfs.tar"
fi

salusd="$build/server/salusd"
# (not `ldd | grep -q`: grep stopping early fails ldd with SIGPIPE under pipefail)
if grep -q 'libcu' <<<"$(ldd "$salusd")"; then
  cbuild="$build/deploy-container"
  if [ ! -f "$cbuild/build.ninja" ]; then
    echo "build-image: salusd without CUDA in $cbuild (once)" >&2
    meson setup "$cbuild" "$src" -Dcuda=disabled >/dev/null
  fi
  ninja -C "$cbuild" server/salusd >/dev/null
  salusd="$cbuild/server/salusd"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx" ${work:+"$work"}' EXIT
mkdir -p "$ctx/bin" "$ctx/lib"
cp "$salusd" "$build/client/salusctl" "$build/examples/resilient_train" \
  "$build/examples/mlp_regression" "$ctx/bin/"
cp -L "$build/client/libsalusclient.so.0" "$ctx/lib/"
podman build --quiet --build-arg BASE="$base" -f "$here/Containerfile" -t "$tag" "$ctx" >/dev/null
echo "$tag"
