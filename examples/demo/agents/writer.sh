#!/bin/sh
# A scripted writer for the demo: it speaks nightshift's `command` agent
# protocol (README, "Custom agents") and makes real edits with sed, keyed by the item title.
# Real nights use `claude` or `codex`; this script needs no network.
set -eu
title=$(sed -n 's/.*"title":"\([^"]*\)".*/\1/p' "$NIGHTSHIFT_CONTRACT_FILE")
round=$NIGHTSHIFT_ROUND
feedback=$(cat "$NIGHTSHIFT_FEEDBACK_FILE")
# The second night (tending a PR): a conflict with the new main is
# resolved keeping both sides; a reviewer's request is done as asked.
# A conflict: keep what is on main (the side before =======), then redo
# this item's change on top of it below, as the prompt asks.
redo=""
if grep -q '^<<<<<<< ' src/lib.rs; then
  awk '/^<<<<<<< /{skip=0; next} /^=======$/{skip=1; next} /^>>>>>>> /{skip=0; next} !skip' src/lib.rs > src/lib.rs.resolved
  mv src/lib.rs.resolved src/lib.rs
  echo "Kept main's side of the conflict in src/lib.rs; redoing this item's change on top of it."
  redo=1
fi
# A fix round (docs/github.md#fix-rounds): the repository's CI (the demo
# GitHub's `lint` check, clippy) failed on the pushed PR; its job log, in
# the feedback, names a needless `return`. Remove it.
if printf '%s\n' "$feedback" | grep -q 'unneeded `return` statement'; then
  sed -i 's/^\( *\)return \(.*\);$/\1\2/' src/lib.rs
  echo "The CI's lint job (clippy) rejected a needless \`return\` in src/lib.rs; removed it."
  exit 0
fi
if printf '%s\n' "$feedback" | grep -q 'divide(0, 5)'; then
  sed -i 's|^\( *\)assert_eq!(divide(1, 0), None);|&\n\1assert_eq!(divide(0, 5), Some(0));|' src/lib.rs
  echo "Added the assertion the reviewer asked for: divide(0, 5) is Some(0)."
  exit 0
fi
case "$title" in
  *subtract*)
    # A needless `return`: `cargo test` (the gate) passes, the repository's
    # lint CI on GitHub (clippy -D warnings) does not; a fix round repairs it.
    cat >> src/lib.rs <<'RS'

/// Subtracts `b` from `a`.
pub fn subtract(a: i64, b: i64) -> i64 {
    return a - b;
}

#[cfg(test)]
mod subtract_tests {
    #[test]
    fn subtracts() {
        assert_eq!(super::subtract(5, 3), 2);
    }
}
RS
    echo "Added subtract with a test."
    ;;
  *divide*)
    sed -i 's|/// Divides `a` by `b`.|/// Divides `a` by `b`; `None` when `b` is zero.|; s|pub fn divide(a: i64, b: i64) -> i64 {|pub fn divide(a: i64, b: i64) -> Option<i64> {|; s|^    a / b$|    if b == 0 { None } else { Some(a / b) }|; s|assert_eq!(divide(6, 3), 2);|assert_eq!(divide(6, 3), Some(2));\n        assert_eq!(divide(1, 0), None);|' src/lib.rs
    echo "divide now returns Option."
    printf '\nFINDINGS:\n- divide now returns Option: a breaking change of the public API, so the crate version needs a major bump\n\n'
    ;;
  *power*)
    if [ "$round" = 1 ] || [ -n "$redo" ]; then
      cat >> src/lib.rs <<'RS'

/// Raises `a` to the power `b`.
pub fn power(a: i64, b: u32) -> i64 {
    a.pow(b)
}
RS
      echo "Added power."
    fi
    if [ "$round" != 1 ] || [ -n "$redo" ]; then
      # The reviewer asked for a test in round 1 (or the branch had one
      # before its conflict): add it.
      if [ -n "$redo" ] || printf '%s\n' "$feedback" | grep -q "test"; then cat >> src/lib.rs <<'RS'

#[cfg(test)]
mod power_tests {
    #[test]
    fn powers() {
        assert_eq!(super::power(2, 10), 1024);
    }
}
RS
      fi
      echo "Added the test the reviewer asked for."
    fi
    ;;
  *modulo*)
    grep -q 'pub fn modulo' src/lib.rs && { echo "modulo is there; I cannot see why its test fails."; exit 0; }
    cat >> src/lib.rs <<'RS'

/// Remainder of `a` divided by `b`.
pub fn modulo(a: i64, b: i64) -> i64 {
    a % b
}

#[cfg(test)]
mod modulo_tests {
    #[test]
    fn modulo() {
        assert_eq!(super::modulo(7, 3), 2, "this demo item fails on purpose");
        assert_eq!(super::modulo(7, 3), 3, "this demo item fails on purpose");
    }
}
RS
    echo "Added modulo."
    ;;
  *)
    echo "I do not know how to do: $title"
    ;;
esac
