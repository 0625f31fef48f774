#!/usr/bin/env bash
# Runs nightshift end to end on the bundled example, offline, for two nights:
#   - a small Rust project (examples/demo/project) with its own tests,
#   - a local bare repository as its remote,
#   - a local GitHub-compatible server over it (examples/demo_forge.rs, the
#     one the tests use): PRs, reviews and `mergeable` computed by git,
#     and its CI: a required `lint` check on every pushed commit,
#   - scripted writer/reviewer agents (examples/demo/agents),
#   - the embedded database (a private PostgreSQL cluster; no URL needed).
# Night 1 opens PRs; one of them goes red on `lint` (a needless `return`
# the gate's `cargo test` does not mind), and one fix round repairs it on
# the same PR. It prints the morning report. Then the script plays
# the person of the morning: it merges one PR (so a sibling conflicts with
# the new main and another must be brought onto it) and requests a change
# on another. Night 2 tends those PRs: it resolves the conflict, does the
# requested change, runs the gate and the reviewer, pushes to the same PRs
# and answers once on each.
# Usage: bash examples/demo/run.sh [--one-night]   (from the repository root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

need_pg() {
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then return 0; fi
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing the PostgreSQL server binaries (apt-get install postgresql)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "The embedded database needs the PostgreSQL server binaries (initdb, pg_ctl)." >&2
    echo "Install them:  sudo apt-get install postgresql   (then run this script again)" >&2
    exit 2
  fi
}
need_pg

echo "== building nightshift and the demo's local GitHub (the first build takes several minutes)"
cargo build --manifest-path "$root/Cargo.toml" --bin nightshift --example demo_forge
target="${CARGO_TARGET_DIR:-$root/target}"
ns="$target/debug/nightshift"

work=$(mktemp -d "${TMPDIR:-/tmp}/nightshift-demo.XXXXXX")
echo "== workspace: $work"
git init -q --bare -b main "$work/remote.git"
cp -r "$here/project" "$work/calc"
cd "$work/calc"
git init -q -b main
git -c user.name=demo -c user.email=demo@example.invalid add -A
git -c user.name=demo -c user.email=demo@example.invalid commit -q -m "calc: add and divide"
git remote add origin "$work/remote.git"
git push -q origin main

"$ns" init >/dev/null
# As root (a fresh machine, a container) the demo's own scripted agents run
# as root too: the config says so explicitly (docs/security.md); a real
# night sets `agent_user` instead.
as_root=""
[ "$(id -u)" = 0 ] && as_root="agents_as_root = true"
# The gate runs `cargo test` in the sandbox (docs/security.md#the-sandbox),
# which shows only the system directories, the checkout and what
# `[sandbox] read` adds: a rustup toolchain lives in your home.
toolchain=""
for d in "${CARGO_HOME:-$HOME/.cargo}" "${RUSTUP_HOME:-$HOME/.rustup}"; do
  [ -d "$d" ] && toolchain="$toolchain${toolchain:+, }\"$d\""
done
# The demo's CI answers within a second of a push, so a PR's checks are
# waited for at most 5 minutes (default 45m).
cat > .nightshift/config.toml <<TOML
verify = ["cargo test --quiet"]
deadline = "23:59"
$as_root

[limits]
ci_wait = "5m"

[writer]
kind = "command"
command = ["$here/agents/writer.sh"]

[reviewer]
kind = "command"
command = ["$here/agents/reviewer.sh"]

[sandbox]
read = [$toolchain]
TOML

# The demo uses the embedded database, never a server from the environment.
# Each checkout builds in its own target directory (nightshift sets
# CARGO_TARGET_DIR per slot: docs/loop.md#build-output-per-slot).
unset DATABASE_URL NIGHTSHIFT_DATABASE_URL GH_TOKEN
# The demo's CI is local and instant: look at a PR's checks every second,
# not every 30 s as against GitHub (docs/github.md#ci).
export NIGHTSHIFT_CI_POLL_MS=1000

# The local GitHub: its API address and its control port (played by the
# "person of the morning" below) come in forge.info once it listens.
"$target/debug/examples/demo_forge" "$work/remote.git" "$work/forge.info" > "$work/forge.log" 2>&1 &
forge_pid=$!
trap 'kill $forge_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$work/forge.info" ] && break; sleep 0.1; done
[ -s "$work/forge.info" ] || { echo "the demo's GitHub did not start: $(cat "$work/forge.log")" >&2; exit 1; }
export GITHUB_API_URL=$(sed -n 's/^api=//p' "$work/forge.info")
control=$(sed -n 's/^control=//p' "$work/forge.info")
export GH_REPO=owner/repo GITHUB_TOKEN=ghp_demo0token0not0a0real0one0000000000
echo "== the demo's GitHub: $GITHUB_API_URL (owner/repo)"

# One command to the demo's GitHub, its answer printed.
forge() {
  exec 3<>"/dev/tcp/127.0.0.1/$control"
  printf '%s\n' "$*" >&3
  read -r answer <&3
  exec 3>&-
  case "$answer" in ok*) echo "${answer#ok }" ;; *) echo "$answer" >&2; return 1 ;; esac
}
# The branch of the PR whose branch name contains $1.
branch_of() {
  git --git-dir="$work/remote.git" for-each-ref --format='%(refname:short)' 'refs/heads/nightshift/' | grep -- "$1" | head -1
}

# One night: plan, approve the plan's SHA, drain ($1 says what exit to expect).
night() {
  "$ns" plan
  sha=$("$ns" plan --json | sed -n 's/.*"plan_sha": "\([0-9a-f]*\)".*/\1/p')
  echo "== nightshift approve $sha"
  "$ns" approve "$sha"
  echo "== nightshift drain --deadline 23:59 ($1)"
  set +e
  "$ns" drain --deadline 23:59
  code=$?
  set -e
  echo "== drain exited with $code"
}

echo "== night 1: nightshift plan"
night "exit code 1 expected: one item fails its gate on purpose"
echo "== nightshift report --show-body"
"$ns" report --show-body
echo
echo "== nightshift report --html (the night as one page)"
"$ns" report --html
echo "== PRs on the demo's GitHub (number branch state):"
forge prs | tr ';' '\n'
echo "== the demo GitHub's CI: the required \`lint\` check on each pushed commit (commit check conclusion):"
forge checks | tr ';' '\n'
sub=$(branch_of subtract)
echo "== the subtract PR ($sub): red on its first push, one fix round, the same PR green:"
git --git-dir="$work/remote.git" log --format='   %h %s' "main..$sub"

if [ "${1:-}" != --one-night ]; then
  echo
  echo "== the morning: a person merges the subtract PR into main ..."
  git clone -q "$work/remote.git" "$work/person"
  git -C "$work/person" -c user.name=person -c user.email=person@example.invalid \
    merge -q --no-ff -m "Merge $sub" "origin/$sub"
  git -C "$work/person" push -q origin main
  forge merged "$sub"
  echo "== ... and asks for a change on the divide PR"
  forge review "$(branch_of divide)" alice src/lib.rs 25 Please also check that divide"(0, 5)" is Some"(0)".
  echo "== night 2: nightshift plan (the PRs to tend are cards too)"
  night "exit code 1 expected: the failing item is tried again"
  echo "== nightshift report"
  "$ns" report
  echo "== PRs on the demo's GitHub after night 2 (the same PRs, none opened again):"
  forge prs | tr ';' '\n'
fi
echo "== branches pushed to the local remote:"
git --git-dir="$work/remote.git" branch --list 'nightshift/*'
echo "== the demo project is $work/calc: run \`$ns report\`, \`$ns status\` or \`$ns serve\` (the board of the last night, http://127.0.0.1:7420/) there"
echo "== the embedded database keeps running for the next run: \`$ns db stop\` stops it"
echo "== remove $work when done"
