#!/usr/bin/env bash
# scripts/install-deps.sh: installs what gpupack needs to build and test on Debian 12, and nothing when it is
# all there already (so repeated runs take a second).
#
#   scripts/install-deps.sh            build deps, the test deps (Node.js + npm, Debian's AWS CLI, boto3, curl,
#                                      chromium, promtool), and the SDK and console tests' node_modules (npm ci)
#   scripts/install-deps.sh --no-node  build deps only (enough to build and run gpupack)
#
# Debian packages only (see README.md); the npm packages are @aws-sdk/client-ecs, pinned by
# tests/sdk/package-lock.json, and puppeteer-core (no browser of its own), pinned by tests/console/package-lock.json. Runs apt-get as root, or through sudo.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
with_node=1
for arg in "$@"; do
  case "$arg" in
    --no-node) with_node=0 ;;
    -h | --help)
      sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "install-deps.sh: unknown argument '$arg' (see --help)" >&2
      exit 2
      ;;
  esac
done

# pkg-config finds libpq (storage/CMakeLists.txt); lld is the linker (CMakeLists.txt, GPUPACK_USE_LLD).
# systemd (systemd-analyze, -sysusers, -tmpfiles), dpkg-dev and file (cpack's dpkg-shlibdeps step) are for the
# install test (tests/install/install_test.sh).
build_packages=(cmake ninja-build g++ libboost-dev nlohmann-json3-dev libsqlite3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev libcli11-dev ccache lld libpq-dev pkg-config
  systemd dpkg-dev file)

installed() { [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]; }

# The tests run the AWS CLI (/usr/bin/aws) and boto3 (/usr/bin/python3) that Debian ships, as users get them,
# and the README's curl commands; the console test (tests/console) drives Debian's headless chromium;
# prometheus gives promtool, which checks /metrics and deploy/prometheus/ (metrics_test,
# tests/integration/metrics_promtool.test.mjs); postgresql: the PostgreSQL store's tests start private servers
# from its binaries (/usr/lib/postgresql/N/bin; never its system service); debootstrap makes the Debian 12 base
# image the container image test builds deploy/Dockerfile on (tests/deploy/image_test.sh).
test_packages=(awscli python3-boto3 curl chromium prometheus postgresql debootstrap)

missing=()
for p in "${build_packages[@]}"; do installed "$p" || missing+=("$p"); done
if ((with_node)); then
  for p in "${test_packages[@]}"; do installed "$p" || missing+=("$p"); done
  # Node.js may come from elsewhere (e.g. a nodesource build that bundles npm): the commands are what count.
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "install-deps: need root (or sudo) to apt-get install ${missing[*]}" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

# npm_ci DIR PACKAGE: `npm ci` in DIR unless its node_modules already matches its package-lock.json.
npm_ci() {
  local dir="$root/$1" stamp want
  stamp="$dir/node_modules/.gpupack-lock.sha256"
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$dir/node_modules/$2" ]]; then
    echo "install-deps: $1/node_modules up to date"
  else
    echo "install-deps: npm ci in $1"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
  fi
}

if ((with_node)); then
  npm_ci tests/sdk @aws-sdk/client-ecs
  npm_ci tests/console puppeteer-core
fi
