#!/usr/bin/env bash
# Installs the Debian packages salus needs to build, test and run the demo;
# only what is missing, so a second run costs one dpkg query.
#   scripts/install-deps.sh          build, test, demo
#   scripts/install-deps.sh bench    the same plus what the benchmarks need
#                                    (PyTorch for bench/train_vs_torch)
#   scripts/install-deps.sh deploy   the same plus what the deployment tests
#                                    run (test/deploy: Slurm, podman, systemd,
#                                    the Kubernetes models)
#   scripts/install-deps.sh onnx     the same plus PyTorch and torchvision for
#                                    the ONNX export tests (scripts/run test)
#   scripts/install-deps.sh observe  the same plus the observability tests'
#                                    tools (test/observe: Prometheus and
#                                    promtool, headless Chromium, groff)
#   scripts/install-deps.sh --state GROUP...
#                                    installs nothing: prints each package of
#                                    those groups with its installed version
#                                    ("-" when absent), for scripts/run to
#                                    tell whether a build folder was
#                                    configured with other packages than now
set -euo pipefail
state=false
if [ "${1:-}" = --state ]; then
  state=true
  shift
fi

packages=(
  meson ninja-build cmake pkg-config gcc clang clang-format libclang-rt-14-dev
  libnng-dev nng-utils libprotobuf-c-dev protobuf-c-compiler
  libcmocka-dev zlib1g-dev libopenblas-dev libdnnl-dev valgrind python3
  python3-dev python3-cffi python3-numpy python3-pytest # the Python binding (python/) and its tests
  dataset-fashion-mnist
  openssl # test certificates for tls+tcp:// (test/integration/test_isolation.c)
  gnuplot-nox # eval/run's PNG plots (eval/plots; the eval tests draw them when present)
  libonnx-dev libonnx-testdata # onnx.proto (ONNX import and export, client/) and the conformance suite (test/onnx)
  python3-onnx python3-numpy # test_autodiff checks exported ONNX files (onnx_eval.py)
)
for group in "$@"; do
  case "$group" in
  bench) # bench/train_vs_torch trains the same models in PyTorch (/usr/bin/python3)
    packages+=(python3-torch python3-numpy python3-torchvision) ;;
  deploy) # test/deploy: the Slurm plugin and a real slurmctld/slurmd/munged,
    # containers (podman with runc; mmdebstrap makes the base image), the
    # systemd unit check, the Kubernetes manifests' models. Not
    # kubernetes-client: kubectl cannot validate offline anyway.
    packages+=(slurm-wlm munge libslurm-dev podman runc mmdebstrap systemd
      python3-kubernetes python3-yaml iproute2) ;;
  observe) # test/observe: promtool and a real Prometheus scraping salusd, the
    # timeline page in headless Chromium, the man pages through groff
    packages+=(prometheus chromium groff-base) ;;
  onnx) # test/onnx's torch-models and the Python binding's ONNX tests and examples
    # (python/tests): PyTorch and torchvision models exported to ONNX; the
    # GPT example's corpus (examples/python/gpt_finetune.py)
    packages+=(python3-torch python3-torchvision python3-numpy fortunes) ;;
  *)
    echo "install-deps.sh: unknown group '$group' (known: bench, deploy, observe, onnx)" >&2
    exit 2 ;;
  esac
done

if $state; then
  for p in "${packages[@]}"; do
    v=$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null || true)
    case "$v" in
    "install ok installed "*) echo "$p ${v#install ok installed }" ;;
    *) echo "$p -" ;;
    esac
  done | sort -u
  exit 0
fi

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
