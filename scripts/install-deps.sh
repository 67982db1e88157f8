#!/usr/bin/env bash
# scripts/install-deps.sh: installs what gpupack needs to build and test on Debian 12, and nothing when it is
# all there already (so repeated runs take a second).
#
#   scripts/install-deps.sh            build deps, the test deps (Node.js + npm, Debian's AWS CLI, boto3, curl), and
#                                      the SDK test's node_modules (npm ci)
#   scripts/install-deps.sh --no-node  build deps only (enough to build and run gpupack)
#
# Debian packages only (see README.md); the one npm package is @aws-sdk/client-ecs, pinned by
# tests/sdk/package-lock.json. Runs apt-get as root, or through sudo.
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

# systemd (systemd-analyze, -sysusers, -tmpfiles), dpkg-dev and file (cpack's dpkg-shlibdeps step) are for the
# install test (tests/install/install_test.sh).
build_packages=(cmake ninja-build g++ libboost-dev nlohmann-json3-dev libsqlite3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev libcli11-dev ccache libpq-dev
  systemd dpkg-dev file)

installed() { [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]; }

# The tests run the AWS CLI (/usr/bin/aws) and boto3 (/usr/bin/python3) that Debian ships, as users get them,
# and the README's curl commands. postgresql: the PostgreSQL store's tests start private servers from its
# binaries (/usr/lib/postgresql/N/bin; never its system service).
test_packages=(awscli python3-boto3 curl postgresql)

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

if ((with_node)); then
  sdk="$root/tests/sdk"
  stamp="$sdk/node_modules/.gpupack-lock.sha256"
  want=$(sha256sum "$sdk/package-lock.json" | cut -d' ' -f1)
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$sdk/node_modules/@aws-sdk/client-ecs" ]]; then
    echo "install-deps: tests/sdk/node_modules up to date"
  else
    echo "install-deps: npm ci in tests/sdk"
    (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
  fi
fi
