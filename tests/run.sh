#!/usr/bin/env bash
# The full test suite, as the README's Quick start and CI run it.
# First it checks formatting (cargo fmt --check). Then, while one build
# compiles every target and lints it (cargo test --no-run --all-targets with
# clippy as this crate's compiler and -D warnings, with the [lints] of
# Cargo.toml, in the background; see "One build" below), it installs or
# starts what the tests need (mostly downloads, which wait on the network,
# not the CPU):
#   - cargo-nextest, which runs the tests (each in a process of its own,
#     timed): its prebuilt binary, else built with cargo install;
#   - the PostgreSQL server binaries (initdb, pg_ctl), for the embedded-cluster tests;
#   - the pinned Claude Code CLI (npm) under target/agent-clis/, for the agent_claude tests;
#   - a PostgreSQL server for the ledger tests: $DATABASE_URL if set, else the
#     local server on 127.0.0.1:5432, else a private throwaway cluster it
#     starts (without fsync: its data lives as long as the run);
#   - the real Codex CLI (npm @openai/codex, pinned) under target/agent-clis-codex/;
#   - Chromium (Debian's package), for the HTML report's browser test.
# A lint failure fails the run before the long test build. Then it runs every
# test with cargo nextest (the library's unit tests and the one
# integration-test binary, tests/it/, built above; the examples are
# benchmarks, linted but not built here; settings in .config/nextest.toml,
# the `ci` profile when CI=true), prints the ten slowest tests, and runs the
# doc tests with cargo test --doc if the library has any.
# NIGHTSHIFT_TEST_THREADS sets how many tests run at once (default: the
# profile's test-threads).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# CI builds once: incremental data would only take disk. It builds
# nightshift unoptimized: on a clean clone opt-level 1 (Cargo.toml
# [profile.dev]) costs more build time than it saves in the tests. And
# without line tables (a panic still names its file and line; a backtrace
# does not): nightshift's own targets then build in 45 s instead of 54 s.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_OPT_LEVEL=0 CARGO_PROFILE_DEV_DEBUG=0
fi

for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "tests/run.sh needs cargo $tool: rustup component add rustfmt clippy" >&2
    exit 2
  fi
done
echo "== cargo fmt --check"
if ! cargo fmt --check; then
  echo "tests/run.sh: the code is not formatted as rustfmt would (diff above): run 'cargo fmt' and commit the result" >&2
  exit 1
fi

# A clean build of every test target takes about 2.5 GB under target/
# (less with CARGO_INCREMENTAL=0, which CI sets: it builds once).
mkdir -p target
free_mb=$(df -Pm target | awk 'NR==2 {print $4}')
if [ -n "$free_mb" ] && [ "$free_mb" -lt 3072 ]; then
  if [ ! -d target/debug/deps ]; then
    echo "tests need about 3 GB free for the build under $root/target; only ${free_mb} MB are free on its disk" >&2
    exit 2
  fi
  echo "== warning: only ${free_mb} MB free under $root/target; the build may run out of space" >&2
fi

# One build: the lints and the test build are one compilation. `cargo
# clippy` is `cargo check` with clippy-driver as the workspace's compiler;
# run beside a test build it would compile every dependency twice (once as
# metadata for the lints, once as code for the tests), the longest part of
# a clean clone's run. Here clippy-driver (rustc with clippy's lints) is the
# workspace's compiler for the test build itself (RUSTC_WORKSPACE_WRAPPER;
# CLIPPY_ARGS carries `-D warnings` as `cargo clippy -- -D warnings` would),
# so the dependencies are compiled once, by rustc, and this crate's every
# target (lib, bin, tests, examples: clippy's --all-targets) is linted while
# it is built. The same variables stay set for nextest below, so its own
# build step finds everything fresh. (A later plain `cargo nextest run`
# recompiles this crate, not its dependencies.)
# The build runs in the background while the rest of the set-up (mostly
# downloads and installs) goes on; its output is shown when the set-up is
# done.
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS=-Dwarnings
echo "== cargo test --no-run --all-targets, linted by clippy -D warnings (in the background; the output follows the set-up)"
clippy_log=$(mktemp /tmp/nightshift-clippy.XXXXXX)
(
  cargo test --no-run --all-targets >"$clippy_log" 2>&1 || exit 3
) &
clippy_pid=$!
pgdir=
as=()
scratch=
cleanup() {
  [ -n "$clippy_pid" ] && kill "$clippy_pid" 2>/dev/null
  rm -f "$clippy_log"
  if [ -n "$pgdir" ]; then
    "${as[@]}" "$bindir/pg_ctl" -D "$pgdir/data" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$pgdir"
  fi
  [ -n "$scratch" ] && rm -rf "$scratch"
}
trap cleanup EXIT

# The tests' files (their repositories, slots, clones, data directories:
# TMPDIR for the tests and everything they start) and the private
# PostgreSQL cluster below live in one scratch directory, on a memory
# filesystem (/dev/shm) when it has 4 GB free (a run holds a few hundred
# MB at its peak), removed when the run ends. The tests create and delete
# hundreds of thousands of files; on this project's machines the disk is
# ext4 without a journal, where every new file's inode search skips the
# inodes freed in the last seconds, and that search was a tenth of the
# suite's CPU (perf, 2026-12-06: 224 s of tests on the disk, 170 s here).
# NIGHTSHIFT_TEST_TMP=disk keeps them under the system's temporary directory.
scratch_parent=${TMPDIR:-/tmp}
if [ "${NIGHTSHIFT_TEST_TMP:-}" != disk ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  shm_free_mb=$(df -Pm /dev/shm | awk 'NR==2 {print $4}')
  [ -n "$shm_free_mb" ] && [ "$shm_free_mb" -ge 4096 ] && scratch_parent=/dev/shm
fi
scratch=$(mktemp -d "$scratch_parent/nightshift-tests.XXXXXX")
chmod 755 "$scratch"
mkdir "$scratch/tmp"
finish_clippy() {
  local status=0
  wait "$clippy_pid" || status=$?
  clippy_pid=
  echo "== cargo test --no-run --all-targets (linted): $([ "$status" = 0 ] && echo done || echo failed)"
  grep -v '^\s*\(Compiling\|Checking\|Downloaded\|Downloading\) ' "$clippy_log" || true
  if [ "$status" != 0 ]; then
    echo "tests/run.sh: the build failed, or clippy or the compiler warns (above; the lints are set in Cargo.toml [lints]): fix the code, or argue for a lint change in Cargo.toml" >&2
    exit 1
  fi
}

# cargo-nextest runs the tests (each in a process of its own, with its time).
# Its prebuilt binary (https://nexte.st/docs/installation/pre-built-binaries/)
# takes seconds where building it takes minutes of both cores.
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
  echo "== installing cargo-nextest into $cargo_bin (the prebuilt binary, else cargo install cargo-nextest --locked)"
  mkdir -p "$cargo_bin"
  if [ "$(uname -sm)" = "Linux x86_64" ] && command -v curl >/dev/null 2>&1 \
     && curl -fsSL --max-time 120 https://get.nexte.st/latest/linux | tar xzf - -C "$cargo_bin" \
     && cargo nextest --version >/dev/null 2>&1; then
    :
  elif ! cargo install cargo-nextest --locked >/dev/null; then
    echo "tests/run.sh needs cargo-nextest, and installing it failed: run 'cargo install cargo-nextest --locked' (or see https://nexte.st/docs/installation/)" >&2
    exit 2
  fi
fi

have_pg_bins() {
  { command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; } || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
if ! have_pg_bins; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing the PostgreSQL server binaries (apt-get install postgresql)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-client >/dev/null
  else
    echo "tests need the PostgreSQL server binaries: sudo apt-get install postgresql" >&2
    exit 2
  fi
fi
bindir=$( (pg_config --bindir 2>/dev/null) || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
export PATH="$PATH:$bindir"

# $DATABASE_URL if set; else a private throwaway server (below);
# NIGHTSHIFT_TEST_PG=local takes the machine's own server on 127.0.0.1:5432
# instead (as user postgres, no password). The private one is faster: its
# files are in the scratch directory (memory), without fsync, and no
# template database is left on the machine's server (2026-12-06: 182 s of
# tests against the local server, 170 s against the private one).
if [ -z "${DATABASE_URL:-}" ]; then
  if [ "${NIGHTSHIFT_TEST_PG:-}" = local ] && "$bindir/pg_isready" -q -h 127.0.0.1 -p 5432 -t 3 \
     && "$bindir/psql" -qAt "postgres://postgres@127.0.0.1:5432/postgres" -c 'select 1' >/dev/null 2>&1; then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres"
  else
    # A private throwaway server on a free loopback port for this test run,
    # removed when the run ends.
    pgdir="$scratch/pg"
    mkdir "$pgdir"
    port=55432
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    if [ "$(id -u)" = 0 ]; then chown postgres "$pgdir"; as=(runuser -u postgres --); fi
    echo "== starting a private PostgreSQL on 127.0.0.1:$port ($pgdir)"
    "${as[@]}" "$bindir/initdb" -D "$pgdir/data" -U postgres --auth=trust >"$pgdir/initdb.log" 2>&1 \
      || { cat "$pgdir/initdb.log" >&2; echo "initdb failed (log above)" >&2; exit 2; }
    # No fsync: a crash loses nothing the run needs. Every test's database
    # is dropped when it ends, and a drop is a checkpoint.
    "${as[@]}" "$bindir/pg_ctl" -D "$pgdir/data" -w -t 60 -l "$pgdir/log" \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $pgdir -c fsync=off -c synchronous_commit=off -c full_page_writes=off" start >/dev/null \
      || { cat "$pgdir/log" >&2; echo "the private PostgreSQL did not start (log above)" >&2; exit 2; }
    export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
  fi
fi
echo "== tests use $DATABASE_URL"

# The real Claude Code CLI for the agent_claude tests, pinned in
# tests/fakes/claude-code.version, installed once under target/agent-clis/
# (the tests look for it there; they run it offline against a local fake API).
claude_version=$(tr -d '[:space:]' < tests/fakes/claude-code.version)
clis="$root/target/agent-clis"
if [ ! -x "$clis/node_modules/.bin/claude" ] || ! grep -qs "\"version\": \"$claude_version\"" "$clis/node_modules/@anthropic-ai/claude-code/package.json"; then
  if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "== installing npm (apt-get install npm)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
    else
      echo "tests need npm to install @anthropic-ai/claude-code@$claude_version: sudo apt-get install npm" >&2
      exit 2
    fi
  fi
  echo "== installing @anthropic-ai/claude-code@$claude_version into target/agent-clis"
  mkdir -p "$clis"
  flock "$clis.lock" npm install --no-audit --no-fund --prefix "$clis" "@anthropic-ai/claude-code@$claude_version" >/dev/null
fi

# --- codex: the real Codex CLI for the agent_codex tests (npm @openai/codex, pinned) ---
# Installed once into target/agent-clis-codex/; the tests find it there (or
# install it themselves with the same command under a file lock).
codex_version=0.169.0
codex_prefix="$root/target/agent-clis-codex"
codex_installed=$(node -p "require('$codex_prefix/node_modules/@openai/codex/package.json').version" 2>/dev/null || true)
if [ "$codex_installed" != "$codex_version" ] || [ ! -x "$codex_prefix/node_modules/.bin/codex" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "tests need npm (Node.js) to install the Codex CLI: sudo apt-get install nodejs npm" >&2
    exit 2
  fi
  echo "== installing @openai/codex@$codex_version into $codex_prefix"
  mkdir -p "$codex_prefix"
  timeout 900 npm install --prefix "$codex_prefix" --no-audit --no-fund --loglevel=error "@openai/codex@$codex_version" >/dev/null
fi
echo "== codex CLI: $("$codex_prefix/node_modules/.bin/codex" --version)"
# --- end codex ---

# Chromium (Debian's package) for the HTML report's browser test in
# tests/it/morning.rs: the page is loaded headless, offline.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing Chromium (apt-get install chromium)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "tests need Chromium for the HTML report's browser test: sudo apt-get install chromium" >&2
    exit 2
  fi
fi

# faketime (Debian's package) for the clock tests in tests/it/clock.rs: a
# worker's host clock set hours off the ledger server's.
if ! command -v faketime >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing faketime (apt-get install faketime)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null
  else
    echo "tests need faketime for the clock tests: sudo apt-get install faketime" >&2
    exit 2
  fi
fi

finish_clippy

profile=default
[ "${CI:-}" = true ] && profile=ci
threads=()
[ -n "${NIGHTSHIFT_TEST_THREADS:-}" ] && threads=(--test-threads "$NIGHTSHIFT_TEST_THREADS")
echo "== cargo nextest run --tests --profile $profile ${threads[*]} (TMPDIR=$scratch/tmp)"
status=0
TMPDIR="$scratch/tmp" cargo nextest run --tests --profile "$profile" "${threads[@]}" || status=$?

# The ten slowest tests of this run, from nextest's JUnit report. awk reads
# to the end rather than `head` stopping early: under pipefail, sort killed
# by SIGPIPE would end the whole script with 141 after a green run.
junit="$root/target/nextest/$profile/junit.xml"
if [ -f "$junit" ]; then
  echo "== the ten slowest tests (seconds; all times in $junit)"
  grep -o '<testcase [^>]*>' "$junit" \
    | sed -E 's/.* name="([^"]*)".* classname="([^"]*)".* time="([0-9.]+)".*/\3 \2 \1/' \
    | sort -rn \
    | awk 'NR <= 10 { printf "%8.1f  %s %s\n", $1, $2, $3 }'
fi

# Doc tests (nextest does not run them): only if a doc comment opens a Rust
# code block (a fence with no language, or `rust`); today every block is text.
if awk 'FNR == 1 { fence = 0 }
        /^[[:space:]]*\/\/[\/!][[:space:]]*```/ {
          lang = $0; sub(/^[[:space:]]*\/\/[\/!][[:space:]]*```+/, "", lang)
          if (!fence && (lang == "" || lang ~ /^(rust|should_panic|no_run|ignore|compile_fail|edition)/)) found = 1
          fence = !fence
        }
        END { exit !found }' $(find src -name '*.rs'); then
  echo "== cargo test --doc"
  cargo test --doc || status=$?
fi
exit "$status"
