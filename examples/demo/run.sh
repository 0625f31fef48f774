#!/usr/bin/env bash
# Runs nightshift end to end on the bundled example, offline:
#   - a small Rust project (examples/demo/project) with its own tests,
#   - a local bare repository as its GitHub-less remote,
#   - scripted writer/reviewer agents (examples/demo/agents),
#   - the embedded database (a private PostgreSQL cluster; no URL needed),
# then prints the morning report with the bodies of the PRs it would open.
# Usage: bash examples/demo/run.sh   (from the repository root)
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

echo "== building nightshift (the first build takes several minutes)"
cargo build --manifest-path "$root/Cargo.toml" --bin nightshift
ns="$root/target/debug/nightshift"

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
cat > .nightshift/config.toml <<TOML
verify = ["cargo test --quiet"]
deadline = "23:59"
$as_root

[writer]
kind = "command"
command = ["$here/agents/writer.sh"]

[reviewer]
kind = "command"
command = ["$here/agents/reviewer.sh"]
TOML

# The demo uses the embedded database, never a server from the environment.
# Each checkout builds in its own target directory (nightshift sets
# CARGO_TARGET_DIR per slot: docs/loop.md#build-output-per-slot).
unset DATABASE_URL NIGHTSHIFT_DATABASE_URL GITHUB_TOKEN GH_TOKEN

echo "== nightshift plan"
"$ns" plan
sha=$("$ns" plan --json | sed -n 's/.*"plan_sha": "\([0-9a-f]*\)".*/\1/p')
echo "== nightshift approve $sha"
"$ns" approve "$sha"
echo "== nightshift drain --deadline 23:59 (exit code 1 expected: one item fails its gate on purpose)"
set +e
"$ns" drain --deadline 23:59
code=$?
set -e
echo "== drain exited with $code"
echo "== nightshift report --show-body"
"$ns" report --show-body
echo
echo "== nightshift report --html (the night as one page)"
"$ns" report --html
echo "== branches pushed to the local remote:"
git --git-dir="$work/remote.git" branch --list 'nightshift/*'
echo "== the demo project is $work/calc: run \`$ns report\` or \`$ns status\` there"
echo "== the embedded database keeps running for the next run: \`$ns db stop\` stops it"
echo "== remove $work when done"
