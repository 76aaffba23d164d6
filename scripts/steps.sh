# Sourced by test.sh and quick.sh: times each step and prints, at exit
# (passed or failed), each step's wall time and the slowest tests.
#   step NAME COMMAND...   runs COMMAND, timed as NAME
#   SLOWEST_REPORTS=(...)  nextest JUnit reports whose 20 slowest tests to print
STEP_TIMES=()
STEP_NOW=""
SLOWEST_REPORTS=()

step_us() { local t=${EPOCHREALTIME/./}; echo "$t"; }
STEP_T0=$(step_us)

step_secs() { printf '%d.%d' $(( $1 / 1000000 )) $(( $1 % 1000000 / 100000 )); }

step() {
  local name=$1 t0
  shift
  STEP_NOW=$name
  t0=$(step_us)
  "$@"
  STEP_TIMES+=("$(printf '%-12s %7s s' "$name" "$(step_secs $(( $(step_us) - t0 )))")")
  STEP_NOW=""
}

step_report() {
  local rc=$? t reports=()
  for t in "${SLOWEST_REPORTS[@]}"; do [ -f "$t" ] && reports+=("$t"); done
  if [ ${#reports[@]} -gt 0 ]; then
    echo
    python3 scripts/slowest-tests.py 20 "${reports[@]}" || true
  fi
  echo
  echo "step times:"
  for t in "${STEP_TIMES[@]}"; do echo "  $t"; done
  [ -z "$STEP_NOW" ] || echo "  $STEP_NOW: failed (exit $rc)"
  printf '  %-12s %7s s\n' total "$(step_secs $(( $(step_us) - STEP_T0 )))"
}
trap step_report EXIT
