#!/usr/bin/env bash
# The developer's quick loop: builds what the tests need (a no-op when
# nothing changed), then runs the unit tests and the fast integration tests
# (nextest profile `quick`: no Redis Cluster, no scale test). About two
# minutes on a warm build; ./test.sh runs everything. Extra arguments go to
# nextest (a filter: scripts/quick.sh -E 'test(/^access::/)').
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/steps.sh
SLOWEST_REPORTS=(target/nextest/quick/junit.xml)
rm -f "${SLOWEST_REPORTS[@]}"
step build cargo nextest run --workspace --all-targets --no-run
step tests cargo nextest run --workspace --all-targets --profile quick "$@"
