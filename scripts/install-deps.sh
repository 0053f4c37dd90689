#!/usr/bin/env bash
# Installs the Debian packages salus needs to build, test and run the demo;
# only what is missing, so a second run costs one dpkg query.
#   scripts/install-deps.sh          build, test, demo
#   scripts/install-deps.sh bench    the same plus what the benchmarks need
#                                    (PyTorch for bench/train_vs_torch)
#   scripts/install-deps.sh observe  the same plus the observability tests'
#                                    tools (test/observe: Prometheus and
#                                    promtool, headless Chromium, groff)
set -euo pipefail

packages=(
  meson ninja-build cmake pkg-config gcc clang clang-format libclang-rt-14-dev
  libnng-dev nng-utils libprotobuf-c-dev protobuf-c-compiler
  libcmocka-dev zlib1g-dev libopenblas-dev libdnnl-dev valgrind python3
  dataset-fashion-mnist
  openssl # test certificates for tls+tcp:// (test/integration/test_isolation.c)
  gnuplot-nox # eval/run's PNG plots (eval/plots; the eval tests draw them when present)
)
for group in "$@"; do
  case "$group" in
  bench) # bench/train_vs_torch trains the same models in PyTorch (/usr/bin/python3)
    packages+=(python3-torch python3-numpy) ;;
  observe) # test/observe: promtool and a real Prometheus scraping salusd, the
    # timeline page in headless Chromium, the man pages through groff
    packages+=(prometheus chromium groff-base) ;;
  *)
    echo "install-deps.sh: unknown group '$group' (known: bench, observe)" >&2
    exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "salus: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
