#!/usr/bin/env bash
# layering.sh — the floors of spikehunt, bottom to top: base, scenarios,
# harness, generators, cli (and the public headers in include/spikehunt/ over
# them, the Python package's C++ side, python/, over those, and tests/,
# bench/ and fuzz/ over everything). An include may go down a floor or stay on
# its own, never up: this checks every C++ header and source of those folders.
# Usage: tests/layering.sh SOURCE_DIR [--graph]   (--graph: print the include graph per folder)
set -euo pipefail
src=$(cd "${1:-.}" && pwd)
cd "$src"
floor() {
  case "$1" in
    base) echo 0 ;; scenarios) echo 1 ;; harness) echo 2 ;; generators) echo 3 ;; cli) echo 4 ;; spikehunt) echo 5 ;; python) echo 6 ;;
    tests|bench|fuzz) echo 7 ;;  # over everything: they may include any floor, and no floor includes them
    *) echo -1 ;;
  esac
}
bad=0
declare -A edges=()
shopt -s nullglob
for f in base/*.h base/*.cpp scenarios/*.h scenarios/*.cpp harness/*.h harness/*.cpp harness/*/*.h harness/*/*.cpp \
         generators/*.h generators/*.cpp cli/*.h cli/*.cpp include/spikehunt/*.h python/*.cpp python/*.h \
         tests/*.h tests/*.cpp bench/*.h bench/*.cpp bench/*/*.h bench/*/*.cpp fuzz/*.h fuzz/*.cpp; do
  from=${f%%/*}
  [ "$from" = include ] && from=spikehunt
  from_floor=$(floor "$from")
  while IFS= read -r target; do
    to=${target%%/*}
    to_floor=$(floor "$to")
    [ "$to_floor" -lt 0 ] && continue  # a file of the same folder without its folder, or a library's header
    # version.h is the one public header below everything: the version every floor records.
    [ "$target" = spikehunt/version.h ] && to_floor=0
    edges["$from -> $to"]=$(( ${edges["$from -> $to"]:-0} + 1 ))
    # The judges (the doctor, calibrate, guard) are the top of harness/: the rest of it never includes them.
    if [ "$from" = harness ] && [[ ! "$f" =~ ^harness/(doctor/|calibrate\.|guard\.) ]] &&
       [[ "$target" =~ ^harness/(doctor/|calibrate\.h|guard\.h) ]]; then
      echo "layering: $f includes $target: the judges (doctor, calibrate, guard) are harness's top; the rest of harness/ does not include them"
      bad=1
    fi
    if [ "$to_floor" -gt "$from_floor" ]; then
      echo "layering: $f includes $target: $from may include only its own floor and those below it"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
if [ "${2:-}" = --graph ]; then
  for e in "${!edges[@]}"; do echo "$e: ${edges[$e]}"; done | sort
fi
[ $bad -eq 0 ] && echo "layering: every include goes down a floor or stays on its own"
exit $bad
