#!/usr/bin/env bash
# The compose test: deploy/docker-compose.yml run for real in Docker, with its test override
# deploy/docker-compose.test.yml (locally built images, host network, free loopback ports).
#
#   scripts/compose_test.sh                  # set up, build, run the tests, clean up
#   scripts/compose_test.sh --build-only     # only set up the engine and build the images
#   scripts/compose_test.sh --keep-images    # keep the built images as a build cache (./test.sh does):
#                                            # the next run rebuilds only what changed
#   scripts/compose_test.sh --secure         # the secured stack instead (docker-compose.secure.yml)
#   scripts/compose_test.sh -k planner       # other arguments go to pytest
#
# Steps (every one is skipped when already done):
#   1. docker.io, docker-compose and debootstrap from Debian, when missing (needs root);
#   2. a Docker engine: when none answers, `dockerd` is started in the background (as root) and
#      stopped again at the end (DANUBE_KEEP_DOCKERD=1 leaves it running);
#   3. the base image danube-base:bookworm, made once from Debian packages
#      (debootstrap --variant=minbase bookworm, then docker import) and kept: nothing is pulled
#      from an image registry;
#   4. FROM it, with --network host, the three side by side: danube-test-etcd:bookworm
#      (Debian's etcd-server), danube-test-moto:bookworm (moto_server, standing in for MinIO)
#      and danube-py:test (deploy/Dockerfile);
#   5. pytest -m "compose and not compose_secure": tests/e2e/test_compose.py (the whole compose
#      deployment) and the testcontainers branch of tests/support/containers.py; then
#      tests/contract with DANUBE_TEST_CONTAINERS=1 (etcd and S3 in containers; not when pytest
#      arguments are given). With --secure instead: pytest -m compose_secure, the secured stack
#      (docker-compose.yml + .test.yml + .secure.yml + .secure-test.yml) in tests/e2e/test_compose.py;
#   6. clean-up: no container, network or volume of the run is left; the three built images are
#      removed unless --keep-images (danube-base:bookworm stays, as a cache). With --keep-images,
#      the images they replace (left untagged by the rebuild) are removed instead: only those
#      built here, found by the label org.danube.compose-test.
#
# When no engine can be had (no root, dockerd does not start), step 5 still runs and the tests
# are skipped with the reason, as a pytest warning; a failed image build fails the script.
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian) for debootstrap;
# DANUBE_COMPOSE="docker-compose" to force compose v1 (default: `docker compose` if present).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASE_IMAGE=danube-base:bookworm
ETCD_IMAGE=danube-test-etcd:bookworm
MOTO_IMAGE=danube-test-moto:bookworm
PROJECT_IMAGE=danube-py:test
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
STATE=${TMPDIR:-/tmp}/danube-compose-test
BIN=.venv/bin

build_only=0
keep_images=0
secure=0
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --keep-images) keep_images=1 ;;
    --secure) secure=1 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

say() { printf '==> compose_test: %s\n' "$*"; }
warn() { printf '==> compose_test: WARNING: %s\n' "$*" >&2; }
now() { date +%s; }
started_at=$(now)
mkdir -p "$STATE"

is_root=0
[ "$(id -u)" -eq 0 ] && is_root=1
apt_updated=0
apt_install() {
  if [ "$is_root" -ne 1 ]; then
    warn "cannot install $* (not root)"
    return 1
  fi
  if [ "$apt_updated" -eq 0 ]; then
    apt-get update -qq || return 1
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >"$STATE/apt.log" 2>&1 || {
    tail -n 20 "$STATE/apt.log" >&2
    return 1
  }
}

# ---- 1 + 2: tools and the engine --------------------------------------------------------------
engine_answers() { timeout 20 docker info >/dev/null 2>&1; }
dockerd_pid=""
stop_dockerd() {
  [ -n "$dockerd_pid" ] || return 0
  if [ "${DANUBE_KEEP_DOCKERD:-0}" = "1" ]; then
    say "leaving dockerd (pid $dockerd_pid) running (DANUBE_KEEP_DOCKERD=1)"
    return 0
  fi
  say "stopping the dockerd this script started (pid $dockerd_pid)"
  kill -TERM "$dockerd_pid" 2>/dev/null
  for _ in $(seq 1 60); do
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -0 "$dockerd_pid" 2>/dev/null && kill -KILL "$dockerd_pid" 2>/dev/null
  dockerd_pid=""
}

# Returns 0 when an engine answers; otherwise sets $problem to why not, in words to act on.
problem=""
setup_engine() {
  if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
    apt_install docker.io || {
      problem="docker.io is not installed and could not be installed (apt-get install docker.io, as root)"
      return 1
    }
  fi
  if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
    apt_install docker-compose || {
      problem="neither \`docker compose\` nor docker-compose is installed (apt-get install docker-compose)"
      return 1
    }
  fi
  engine_answers && return 0
  if [ "$is_root" -ne 1 ]; then
    problem="no Docker engine answers and starting one (dockerd) needs root"
    return 1
  fi
  say "starting dockerd (log: $STATE/dockerd.log)"
  dockerd >"$STATE/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 120); do
    engine_answers && return 0
    if ! kill -0 "$dockerd_pid" 2>/dev/null; then
      dockerd_pid=""
      problem="dockerd exited at start: $(grep -E 'level=(error|fatal)|failed' "$STATE/dockerd.log" | tail -n 1)"
      return 1
    fi
    sleep 0.5
  done
  stop_dockerd
  problem="dockerd did not answer within 60s (log: $STATE/dockerd.log)"
  return 1
}

# Removes what a run whose pytest process is gone left behind (after a crash or a timeout):
# containers of the test servers (label org.danube.test-server=PID) and containers, volumes and
# networks of compose projects named danube-test-PID-...; then images no tag refers to any more.
stale() { # PID -> true when that process is gone
  [ -n "$1" ] && ! kill -0 "$1" 2>/dev/null
}
sweep() {
  local ids="" id pid project kind name
  while read -r id pid; do
    [ -n "$id" ] && stale "$pid" && ids="$ids $id"
  done < <(docker ps -a --filter label=org.danube.test-server \
    --format '{{.ID}} {{.Label "org.danube.test-server"}}')
  while read -r id project; do
    [[ "$project" =~ ^danube-test-([0-9]+)- ]] && stale "${BASH_REMATCH[1]}" && ids="$ids $id"
  done < <(docker ps -a --filter label=com.docker.compose.project \
    --format '{{.ID}} {{.Label "com.docker.compose.project"}}')
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    docker rm -f -v $ids >/dev/null && say "removed leftover containers:$ids"
  fi
  for kind in volume network; do
    ids=""
    while read -r name project; do
      [[ "$project" =~ ^danube-test-([0-9]+)- ]] && stale "${BASH_REMATCH[1]}" && ids="$ids $name"
    done < <(docker "$kind" ls --filter label=com.docker.compose.project \
      --format '{{.Name}} {{.Label "com.docker.compose.project"}}')
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086
      docker "$kind" rm $ids >/dev/null && say "removed leftover ${kind}s:$ids"
    fi
  done
  docker image prune -f >/dev/null
}

# ---- 3 + 4: images ----------------------------------------------------------------------------
# PEM certificates this machine trusts beyond the system's (a TLS-inspecting proxy between it
# and the package registries): the builds trust them too.
extra_ca_certs() {
  local f
  for f in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$f" ] && cat "$f"
  done
}

build_base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "$BASE_IMAGE: cached"
    return 0
  fi
  if [ "$is_root" -ne 1 ]; then
    warn "$BASE_IMAGE is missing and debootstrap needs root"
    return 1
  fi
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap || return 1
  local root="$STATE/rootfs"
  rm -rf "$root"
  say "debootstrap --variant=minbase bookworm ($MIRROR)"
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$STATE/debootstrap.log" 2>&1 || {
    tail -n 20 "$STATE/debootstrap.log" >&2
    rm -rf "$root"
    return 1
  }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$BASE_IMAGE" >/dev/null
  local rc=$?
  rm -rf "$root"
  [ "$rc" -eq 0 ] && say "$BASE_IMAGE: imported"
  return "$rc"
}

build_image() { # TAG DOCKERFILE CONTEXT
  local tag=$1 dockerfile=$2 context=$3 start
  start=$(now)
  say "docker build $tag (log: $STATE/build-${tag%%:*}.log)"
  docker build --network host --label org.danube.compose-test=1 --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --build-arg "EXTRA_CA_CERTS=$(extra_ca_certs)" \
    -f "$dockerfile" -t "$tag" "$context" >"$STATE/build-${tag%%:*}.log" 2>&1 || {
    tail -n 40 "$STATE/build-${tag%%:*}.log" >&2
    warn "building $tag failed"
    return 1
  }
  say "$tag built in $(($(now) - start))s"
}

# The three images only share the base: built side by side, their downloads (apt, pip) and
# unpacking overlap instead of queueing. Each one's log is its own file; any failure fails all.
build_images() {
  local pids=() pid failed=0
  build_image "$ETCD_IMAGE" deploy/test/etcd.Dockerfile deploy/test &
  pids+=($!)
  build_image "$MOTO_IMAGE" deploy/test/moto.Dockerfile deploy/test &
  pids+=($!)
  build_image "$PROJECT_IMAGE" deploy/Dockerfile . &
  pids+=($!)
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  return "$failed"
}

remove_images() {
  if [ "$keep_images" -eq 1 ]; then
    # The images a rebuild replaced (untagged now), and only ours.
    docker image prune --force --filter label=org.danube.compose-test=1 >/dev/null 2>&1
    say "keeping $ETCD_IMAGE $MOTO_IMAGE $PROJECT_IMAGE as a build cache (--keep-images)"
    return 0
  fi
  docker image rm "$ETCD_IMAGE" "$MOTO_IMAGE" "$PROJECT_IMAGE" >/dev/null 2>&1
  say "removed $ETCD_IMAGE $MOTO_IMAGE $PROJECT_IMAGE ($BASE_IMAGE is kept as a cache)"
}

# ---- run --------------------------------------------------------------------------------------
rc=0
engine_ok=0
trap 'stop_dockerd' EXIT
trap 'exit 130' INT TERM
setup_engine && engine_ok=1

if [ "$engine_ok" -eq 1 ]; then
  say "Docker engine $(docker info --format '{{.ServerVersion}}' 2>/dev/null) answers ($(($(now) - started_at))s)"
  sweep
  build_start=$(now)
  if build_base && build_images; then
    say "images ready in $(($(now) - build_start))s"
  else
    rc=1
  fi
else
  warn "no Docker engine: $problem"
  warn "the compose tests will be SKIPPED"
  export DANUBE_COMPOSE_UNAVAILABLE="$problem"
fi

if [ "$build_only" -eq 1 ]; then
  [ "$engine_ok" -eq 1 ] || rc=1
elif [ "$rc" -eq 0 ]; then
  test_start=$(now)
  # With the engine up and the images built, a skip would hide a broken deployment: fail instead.
  [ "$engine_ok" -eq 1 ] && export DANUBE_COMPOSE_REQUIRE=1
  if [ "$secure" -eq 1 ]; then
    "$BIN/pytest" -q -p no:cacheprovider -m compose_secure --timeout=900 --basetemp="$STATE/pytest" \
      tests/e2e/test_compose.py "${pytest_args[@]}" || rc=$?
    say "secure compose tests took $(($(now) - test_start))s"
  else
    "$BIN/pytest" -q -p no:cacheprovider -m "compose and not compose_secure" --timeout=900 \
      --basetemp="$STATE/pytest" tests/e2e/test_compose.py tests/integration/test_server_backends.py \
      "${pytest_args[@]}" || rc=$?
    say "compose tests took $(($(now) - test_start))s"
  fi
  if [ "$engine_ok" -eq 1 ] && [ "$secure" -eq 0 ] && [ "${#pytest_args[@]}" -eq 0 ]; then
    # The contract suites (the code against real etcd and S3) with the test servers in
    # containers: the DANUBE_TEST_CONTAINERS=1 path of tests/support/containers.py, for real.
    test_start=$(now)
    DANUBE_TEST_CONTAINERS=1 "$BIN/pytest" -q -p no:cacheprovider --timeout=120 tests/contract || rc=$?
    say "tests/contract with DANUBE_TEST_CONTAINERS=1 took $(($(now) - test_start))s"
  fi
fi

if [ "$engine_ok" -eq 1 ]; then
  sweep
  [ "$build_only" -eq 1 ] || remove_images
fi
say "done in $(($(now) - started_at))s (exit $rc)"
exit "$rc"
