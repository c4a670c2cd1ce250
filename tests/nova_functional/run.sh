#!/usr/bin/env bash
# Nova 34's 56 accelerator functional tests against the real acceld (README.md here).
#
#   tests/nova_functional/run.sh [stestr filters...]
#
# Nova's own environment (Nova 34.0.0 from its sdist with its test-requirements, stestr,
# openstack-placement 16.0.0, SQLAlchemy 2.0, acceld's dependencies; versions fixed by
# constraints.txt) is built once per content under the cache directory and reused.
# acceld itself comes from this checkout at every run: its source is copied and installed
# into a per-run directory (nothing is written into the checkout). Exits 0 only when
# exactly Nova's 56 tests ran and all passed (with filters given, the check is skipped
# and stestr's status is returned).
#
# Environment: PYTHON (python3), ACCELD_NOVA_CACHE (cache dir, default
# ${XDG_CACHE_HOME:-~/.cache}/acceld/nova-functional), ACCELD_NOVA_CONCURRENCY (2),
# ACCELD_NOVA_KEEP=1 (keep the run directory).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
NOVA_VERSION=34.0.0
EXTRA_REQS=(stestr "openstack-placement==16.0.0" "SQLAlchemy<2.1" "setuptools>=70.1")
CACHE=${ACCELD_NOVA_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/acceld/nova-functional}
CONCURRENCY=${ACCELD_NOVA_CONCURRENCY:-2}

say() { printf '[nova-functional] %s\n' "$*" >&2; }
now() { date +%s; }

acceld_requirements() {  # acceld's runtime dependencies, from the checkout's pyproject.toml
  "$PYTHON" - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
EOF
}

# -- the environment, keyed by everything it is built from ------------------------------
KEY=$( {
  "$PYTHON" -c 'import sys; print(sys.version)'
  echo "nova==$NOVA_VERSION sdist + test-requirements; ${EXTRA_REQS[*]}"
  cat "$HERE/constraints.txt"
  acceld_requirements
} | sha256sum | cut -c1-16)
ENV_DIR=$CACHE/env-$KEY
VENV=$ENV_DIR/venv

build_env() {
  local t0 sdist
  t0=$(now)
  say "building Nova's environment in $ENV_DIR (once per content)"
  rm -rf "$ENV_DIR"
  mkdir -p "$ENV_DIR/sdist"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip
  "$VENV/bin/pip" download -q --no-deps --no-binary :all: "nova==$NOVA_VERSION" \
    -d "$ENV_DIR/sdist"
  sdist=$(ls "$ENV_DIR"/sdist/nova-"$NOVA_VERSION".tar.gz)
  tar -xzf "$sdist" -C "$ENV_DIR"
  acceld_requirements > "$ENV_DIR/acceld-requirements.txt"
  # Nova editable from its sdist tree: its tests find etc/nova/api-paste.ini there
  "$VENV/bin/pip" install -q -c "$HERE/constraints.txt" \
    -e "$ENV_DIR/nova-$NOVA_VERSION" -r "$ENV_DIR/nova-$NOVA_VERSION/test-requirements.txt" \
    -r "$ENV_DIR/acceld-requirements.txt" "${EXTRA_REQS[@]}"
  "$VENV/bin/pip" check
  touch "$ENV_DIR/.complete"
  say "environment built in $(( $(now) - t0 )) s"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock-$KEY"
flock 9
[ -e "$ENV_DIR/.complete" ] || build_env
flock -u 9
say "environment: $ENV_DIR"

# -- this checkout's acceld and tests, in a run directory ---------------------------------
RUN=$(mktemp -d "${TMPDIR:-/tmp}/acceld-nova.XXXXXX")
cleanup() {
  if [ "${ACCELD_NOVA_KEEP:-0}" = 1 ]; then say "run directory kept: $RUN"; else rm -rf "$RUN"; fi
}
trap cleanup EXIT
mkdir -p "$RUN/src" "$RUN/stage/tests/nova_functional" "$RUN/tmp"
tar -C "$REPO" --exclude=__pycache__ -cf - pyproject.toml README.md acceld | tar -C "$RUN/src" -xf -
"$VENV/bin/pip" install -q --no-deps --no-build-isolation --target "$RUN/site" "$RUN/src"
cp "$REPO"/tests/{__init__,stack,helpers}.py "$RUN/stage/tests/"
cp "$HERE"/*.py "$RUN/stage/tests/nova_functional/"
printf '[DEFAULT]\ntest_path=./tests/nova_functional\ntop_dir=./\n' > "$RUN/stage/.stestr.conf"

# -- the run: Nova's tox functional environment ------------------------------------------
cd "$RUN/stage"
export PATH="$VENV/bin:$PATH" PYTHONPATH="$RUN/site" TMPDIR="$RUN/tmp"
export LANGUAGE=en_US LC_ALL=C.UTF-8 OS_STDOUT_CAPTURE=1 OS_STDERR_CAPTURE=1 \
  OS_TEST_TIMEOUT=160 PYTHONDONTWRITEBYTECODE=1 NOVA_RAISE_ON_GREENLET_LEAK=True \
  OS_NOVA_DISABLE_EVENTLET_PATCHING=False
t0=$(now)
rc=0
stestr run --concurrency "$CONCURRENCY" "$@" || rc=$?
say "stestr finished in $(( $(now) - t0 )) s (exit $rc)"
if [ $# -gt 0 ]; then
  exit "$rc"
fi
stestr last --subunit > "$RUN/results.subunit"
python "$RUN/stage/tests/nova_functional/check_results.py" "$RUN/results.subunit" || rc=1
exit "$rc"
