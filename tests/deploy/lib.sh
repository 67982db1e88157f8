# shellcheck shell=bash disable=SC2154
# tests/deploy/lib.sh: what the shell tests of tests/deploy and tests/install share (sourced first, never run). It
# defines fail() and step() and starts the clock step() reads; the functions need $build (the build directory):
#   deploy_args "$@"              sets $build, $src (both absolute) and $cpack from a container test's arguments
#                                 BUILD_DIR SOURCE_DIR [CPACK]
#   deploy_engine_or_skip TOOL... exits 77 (ctest: skipped) unless GPUPACK_DOCKER_SOCKET is set, fails unless every
#                                 TOOL is installed, then deploy_docker_cli
#   deploy_docker_cli             sets $docker: a docker CLI that builds with BuildKit, or fails
#   deploy_package WORK CPACK     sets $deb: the Debian package of this build (cpack -G DEB into WORK/pkg)
#   deploy_base WORK EXTRA...     sets $base_image: a Debian 12 image with the package's dependencies and EXTRA
#                                 packages, made with debootstrap and cached (below)

# fail: says why on stderr and ends the test with status 1.
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# step: a heading, with the seconds since the test started.
step() { echo "== $* ($((SECONDS - started)) s)"; }
started=$SECONDS

deploy_args() {
  local usage="usage: ${0##*/} BUILD_DIR SOURCE_DIR CPACK"
  build=${1:?$usage}
  src=${2:?$usage}
  cpack=${3:-cpack}
  build=$(cd "$build" && pwd)
  src=$(cd "$src" && pwd)
}

deploy_engine_or_skip() {
  local tool
  if [[ -z ${GPUPACK_DOCKER_SOCKET:-} ]]; then
    echo "SKIP: set GPUPACK_DOCKER_SOCKET (scripts/docker-engine.sh start DIR prints it) to run this"
    exit 77
  fi
  for tool in "$@"; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
  done
  deploy_docker_cli
}

# deploy_docker_cli: one with the buildx plugin, else a client of 18.09 to 22.x, which carries BuildKit's client
# itself (Debian 12's docker.io). Only BuildKit skips deploy/Dockerfile's unused compile stage.
deploy_docker_cli() {
  local cli major
  export DOCKER_HOST=unix://$GPUPACK_DOCKER_SOCKET
  docker=
  for cli in "$(command -v docker || true)" /usr/bin/docker; do
    [[ -n $cli && -x $cli ]] || continue
    if "$cli" buildx version >/dev/null 2>&1; then
      docker=$cli
      break
    fi
    major=$("$cli" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1 || true)
    if [[ $major =~ ^[0-9]+$ ]] && ((major >= 18 && major < 23)); then
      docker=$cli
      break
    fi
  done
  [[ -n $docker ]] ||
    fail "no docker CLI with BuildKit (buildx, or Debian 12's docker.io): $(command -v docker || echo none)"
  "$docker" version >/dev/null 2>&1 || fail "no engine answers at $GPUPACK_DOCKER_SOCKET"
  echo "   docker CLI $docker ($("$docker" version --format '{{.Client.Version}}')), engine $("$docker" version --format '{{.Server.Version}}')"
}

# deploy_package WORK CPACK: nothing is recompiled; cpack packages this build's binary.
deploy_package() {
  local work=$1 cpack=$2 debs
  (cd "$build" && "$cpack" -G DEB -B "$work/pkg") >"$work/cpack.log" 2>&1 || {
    cat "$work/cpack.log"
    fail "cpack failed"
  }
  debs=("$work"/pkg/gpupack_*.deb)
  [[ -f ${debs[0]} ]] || fail "cpack made no gpupack_*.deb: $(ls "$work/pkg")"
  deb=${debs[0]}
  echo "   $(basename "$deb"): $(stat -c %s "$deb") bytes; Depends: $(dpkg-deb -f "$deb" Depends)"
}

# deploy_real_package NAME: a virtual package (libspdlog1.10-fmt9) as the real one that provides it: debootstrap
# resolves no virtual names. The installed packages answer first (this build's libraries are installed here),
# then apt's lists.
deploy_real_package() {
  local name=$1 provider='' status policy
  status=$(dpkg-query -W -f '${Status}' "$name" 2>/dev/null || true)
  if [[ $status != *" installed" ]]; then
    provider=$(dpkg-query -W -f '${Status} ${Package} ${Provides}\n' 2>/dev/null |
      awk -v n="$name" '$3 == "installed" { for (i = 5; i <= NF; i++) { p = $i; sub(/,$/, "", p); if (p == n) { print $4; exit } } }')
    if [[ -z $provider ]]; then
      # Captured first: `apt-cache ... | grep -q` fails under pipefail when grep stops reading early.
      policy=$(apt-cache policy "$name" 2>/dev/null || true)
      if grep -q 'Candidate: (none)' <<<"$policy"; then
        provider=$(apt-cache showpkg "$name" | sed -n '/^Reverse Provides:/,$p' | sed -n '2p' | awk '{print $1}')
      fi
    fi
  fi
  echo "${provider:-$name}"
}

# deploy_base WORK EXTRA...: `debootstrap --variant=minbase` of Debian 12 from the mirror apt is configured with,
# including one package per Depends group of $deb (for "systemd | adduser" adduser: the server image runs no
# systemd) and EXTRA, then `docker import`. The root's tarball is cached per machine, as ccache caches objects,
# in $GPUPACK_IMAGE_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/gpupack/deploy-image-cache), keyed by mirror and
# package list, with the downloaded .debs beside it (debootstrap --cache-dir), so a rerun, and a fresh clone on a
# machine that ran the tests before, only imports the tarball (a cold debootstrap takes 5 to 6 minutes on 2
# busy cores), and another package list downloads only what it adds; a tarball no run has used for 30 days is
# deleted. Two runs that make the same tarball at once each write their own and rename it into place.
deploy_base() {
  local work=$1 group groups alternative alternatives name pick mirror include_list key cache base_tar t0
  shift
  local include=()
  IFS=',' read -ra groups <<<"$(dpkg-deb -f "$deb" Depends)"
  for group in "${groups[@]}"; do
    pick=
    IFS='|' read -ra alternatives <<<"$group"
    for alternative in "${alternatives[@]}"; do
      name=$(awk '{print $1}' <<<"$alternative")
      name=${name%%:*}
      [[ -z $pick || $name == adduser ]] && pick=$name
    done
    [[ -n $pick ]] && include+=("$(deploy_real_package "$pick")")
  done
  include+=("$@")
  # Debian 12's main suite as apt's sources name it (never a host named here); $(...) is apt's format.
  # shellcheck disable=SC2016
  mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' 'Codename: bookworm' 2>/dev/null |
    sort -u | sed -n 1p)
  include_list=$(IFS=,; echo "${include[*]}")
  key=$(printf 'bookworm minbase %s %s v1' "$mirror" "$include_list" | sha256sum | cut -c1-16)
  cache=${GPUPACK_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupack/deploy-image-cache}
  base_tar=$cache/debian12-$key.tar
  base_image=gpupack-test/debian12:$key
  if "$docker" image inspect "$base_image" >/dev/null 2>&1; then
    echo "   $base_image is in the engine already"
    return 0
  fi
  if [[ ! -f $base_tar ]]; then
    # shellcheck disable=SC2016
    [[ -n $mirror ]] ||
      fail "apt has no source for Debian 12 (bookworm) main: $(apt-get indextargets --format '$(REPO_URI) $(CODENAME)' | sort -u)"
    command -v debootstrap >/dev/null || fail "debootstrap is not installed (scripts/install-deps.sh installs it)"
    [[ $(id -u) -eq 0 ]] || fail "debootstrap needs root for a cold cache ($base_tar is missing)"
    echo "   debootstrap --variant=minbase --include=$include_list bookworm from $mirror"
    t0=$SECONDS
    mkdir -p "$cache/debs"
    debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$include_list" bookworm "$work/root" \
      "$mirror" >"$work/debootstrap.log" 2>&1 || {
      tail -30 "$work/debootstrap.log"
      fail "debootstrap failed"
    }
    tar -C "$work/root" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
      --exclude='./var/cache/apt/archives/*.deb' --exclude='./var/lib/apt/lists/*' -cf "$base_tar.$$.tmp" .
    mv "$base_tar.$$.tmp" "$base_tar"
    rm -rf "$work/root"
    echo "   debootstrapped in $((SECONDS - t0)) s; cached as $base_tar ($(stat -c %s "$base_tar") bytes)"
  else
    echo "   from the cache: $base_tar"
    touch "$base_tar"
  fi
  # Roots of package lists no run has used for 30 days (the package's dependencies changed) go.
  find "$cache" -maxdepth 1 -name 'debian12-*.tar' -mtime +30 -delete 2>/dev/null || true
  "$docker" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$base_tar" "$base_image" >/dev/null || fail "docker import of $base_tar failed"
}
