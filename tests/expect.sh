# expect.sh — sourced by the shell tests: fail() and expect().
#   expect CODE PATTERN -- command...   runs it; fails unless it exits CODE and its
#                                       output matches PATTERN (kept in $out)
fail() { echo "FAIL: $*" >&2; exit 1; }
out=""
expect() {
  local code=$1 pattern=$2; shift 3
  local rc=0
  out=$("$@" 2>&1) || rc=$?
  [ "$rc" -eq "$code" ] || { echo "$out" | tail -n 40; fail "exit $rc, expected $code: $*"; }
  grep -qE -- "$pattern" <<<"$out" || { echo "$out" | tail -n 40; fail "no /$pattern/ in the output of: $*"; }
  echo "ok: $* (exit $rc)"
}
