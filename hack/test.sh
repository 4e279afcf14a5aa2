#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine as root: installs and starts the
# real-runtime test bed (Docker, containerd with CRI, local registries, local images), builds the
# workspace and runs every test. Tests that need the test bed skip loudly only when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"

if [ "$(id -u)" = 0 ]; then
  bash hack/testbed.sh up
  # shellcheck disable=SC1091
  . /run/cri-testbed/env
  export CRI_TESTBED_REQUIRED=1
  # The packaging test (integration/tests/e2e/packages.rs) builds the Debian packages with
  # cargo-deb, pinned in hack/build-debs.sh (a `cargo install`: about 1.5 min on 2 cores), and
  # lints them with lintian (installed by hack/testbed.sh up).
  bash hack/build-debs.sh --install-cargo-deb
else
  echo "WARNING: not root: the test bed cannot be started; real-runtime tests will SKIP" >&2
fi

# A clean build on a CI machine: incremental state would only take disk (see Cargo.toml's
# profile for why the debug info is small).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . | sed 's/^/disk: /' >&2
bash hack/check-layers.sh
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast "$@"
# A bounded fuzzing run of the manifest decoder and the CRI -> Docker translation (the seeds
# themselves are replayed by the unit tests above); docs/fuzzing.md.
FUZZ_SECONDS="${FUZZ_SECONDS:-60}" bash hack/fuzz.sh
