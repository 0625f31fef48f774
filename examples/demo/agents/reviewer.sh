#!/bin/sh
# A scripted reviewer for the demo (`command` protocol, README "Custom agents"): it reads the
# diff and prints its verdict as the last JSON line. Read-only: it changes
# nothing in the checkout.
set -eu
diff=$(git diff HEAD)
if printf '%s' "$diff" | grep -q 'pub fn power' && ! printf '%s' "$diff" | grep -q 'fn powers'; then
  echo "power has no test."
  echo '{"verdict":"request_changes","findings":["add a test for power(2, 10) == 1024"]}'
  exit 0
fi
# Each numbered acceptance condition of the prompt, judged met, with the
# tests the diff adds as its evidence.
tests=$(printf '%s\n' "$diff" | sed -n 's/^+ *fn \([a-z_0-9]*\)().*/\1/p' | tr '\n' ' ' | sed 's/ *$//')
if [ -z "$tests" ]; then
  # No new test function: the assertions added to existing tests.
  tests=$(printf '%s\n' "$diff" | sed -n 's/^+ *\(assert[a-z_]*!(.*)\);$/\1/p' | head -3 | tr '\n' ';' | sed 's/;$//; s/;/; /g; s/"/'"'"'/g')
fi
n=$(sed -n '/^## Acceptance conditions/,/^$/p' "$NIGHTSHIFT_PROMPT_FILE" | grep -c '^[0-9][0-9]*\. ' || true)
conditions=""
i=1
while [ "$i" -le "$n" ]; do
  [ -n "$conditions" ] && conditions="$conditions,"
  conditions="$conditions{\"index\":$i,\"met\":true,\"evidence\":\"src/lib.rs: ${tests:-no test added}\"}"
  i=$((i + 1))
done
echo "The change does what the item asks and has tests."
echo "{\"verdict\":\"approve\",\"findings\":[],\"conditions\":[$conditions]}"
