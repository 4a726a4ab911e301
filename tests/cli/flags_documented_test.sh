#!/usr/bin/env bash
# Every flag of every dspark command is documented: each long option that `dspark CMD --help`
# lists appears (as `--flag`, in backquotes or in a command synopsis) in the command's doc page,
# docs/cli.md (docs/server.md for `serve`).
#   bash tests/cli/flags_documented_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
ROOT=$2
FAILED=0
commands=$("$DSPARK" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}')
[ -n "$commands" ] || { echo "FAIL: no subcommands in dspark --help"; exit 1; }
checked=0
for cmd in $commands; do
  doc=$ROOT/docs/cli.md
  [ "$cmd" = serve ] && doc=$ROOT/docs/server.md
  help=$("$DSPARK" "$cmd" --help) || { echo "FAIL: dspark $cmd --help exits non-zero"; FAILED=1; continue; }
  for flag in $(printf '%s\n' "$help" | grep -oE '^ +(-[A-Za-z0-9],)?--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+'); do
    [ "$flag" = --help ] && continue
    checked=$((checked + 1))
    # `--flag` in a table or text, or `[--flag` / ` --flag ` in a synopsis line.
    if ! grep -qE -- "(\`|\[|, | )$flag([^a-z0-9-]|$)" "$doc"; then
      echo "FAIL: dspark $cmd $flag is not documented in ${doc#"$ROOT"/}"
      FAILED=1
    fi
  done
done
[ "$checked" -gt 50 ] || { echo "FAIL: only $checked flags found in the help texts"; FAILED=1; }
[ $FAILED -eq 0 ] && echo "PASS: $checked flags of $(echo $commands | wc -w) commands documented"
exit $FAILED
