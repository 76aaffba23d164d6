#!/usr/bin/env bash
# Links target/release/oxidepm-logwriter statically against glibc, not
# position-independent. One writer runs per app: static, it costs about
# 80 KiB PSS instead of about 150 KiB (the dynamic loader's and libc's
# private pages and the relocated data of a PIE are per process). Run it
# after `cargo build --release`; a later `cargo build --release` links the
# writer dynamically again, which works the same, only bigger.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo rustc --release -q -p oxidepm-logwriter --bin oxidepm-logwriter -- \
    -C target-feature=+crt-static -C relocation-model=static
