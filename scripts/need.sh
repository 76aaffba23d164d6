# Sourced by run.sh and test.sh: installs what is missing.
#   need_packages CMD:PACKAGE...   Debian packages, for commands not on PATH
#   need_python MODULE...          Python modules (PyPI), for python3
#   need_npm DIR NAME@MAJOR...     node packages (npm), into DIR/node_modules
need_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "installing ${missing[*]} (Debian packages)" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

need_python() {
  local m
  for m in "$@"; do
    python3 -c "import $m" >/dev/null 2>&1 && continue
    echo "installing $m for python3 (PyPI)" >&2
    python3 -m pip install --quiet "$m" 2>/dev/null || python3 -m pip install --quiet --break-system-packages "$m"
  done
}

# need_rust_components NAME...   rustup components (rustfmt, clippy), when rustup is there
need_rust_components() {
  command -v rustup >/dev/null 2>&1 || return 0
  local c installed
  installed=$(rustup component list --installed 2>/dev/null)
  for c in "$@"; do
    grep -q "^$c" <<<"$installed" || rustup component add "$c" >&2
  done
}

# need_npm DIR NAME@VERSION...   npm packages installed into DIR/node_modules
# (a cache the tests look in), each only when it is not there yet.
need_npm() {
  local dir=$1 spec missing=()
  shift
  for spec in "$@"; do
    # The name is what precedes the last '@' (a scoped name starts with one).
    [ -f "$dir/node_modules/${spec%@*}/package.json" ] || missing+=("$spec")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "installing ${missing[*]} into $dir (npm)" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --silent "${missing[@]}" >&2
}

# need_nextest   cargo-nextest, which runs the suite (built from crates.io
# when the machine does not have it)
need_nextest() {
  cargo nextest --version >/dev/null 2>&1 && return 0
  echo "installing cargo-nextest (crates.io)" >&2
  cargo install --locked --quiet cargo-nextest
}
