#!/bin/sh
# A scripted reviewer for the demo (`command` protocol, SPEC §6): it reads the
# diff and prints its verdict as the last JSON line. Read-only: it changes
# nothing in the checkout.
set -eu
diff=$(git diff HEAD)
if printf '%s' "$diff" | grep -q 'pub fn power' && ! printf '%s' "$diff" | grep -q 'fn powers'; then
  echo "power has no test."
  echo '{"verdict":"request_changes","findings":["add a test for power(2, 10) == 1024"]}'
  exit 0
fi
echo "The change does what the item asks and has tests."
echo '{"verdict":"approve","findings":[]}'
