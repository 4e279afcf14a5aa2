#!/usr/bin/env bash
# A bounded run of every cargo-fuzz target in fuzz/ (docs/fuzzing.md), on the stable toolchain:
# installs cargo-fuzz if missing, builds the targets without a sanitizer (`-s none`: safe Rust,
# and -Zsanitizer would need nightly), then fuzzes each for FUZZ_SECONDS (default 60) from the
# checked-in seeds. Fails on the first crash, leak of the RSS limit or per-input timeout; the
# input is left in fuzz/artifacts/<target>/ and printed (base64) by libFuzzer.
#   FUZZ_SECONDS=600 bash hack/fuzz.sh            # longer
#   bash hack/fuzz.sh manifest_decode             # one target
# New inputs found go to a scratch corpus (FUZZ_WORK, default a temp directory), not into the
# checked-in seeds: add one to fuzz/corpus/<target>/ only when it is worth keeping.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"

seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(manifest_decode cri_to_docker)
target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version '^0.13'
fi

# The dev profile (instrumented, unoptimized) by default: it builds in a fraction of the
# release build's time, which a 60 s run does not win back. FUZZ_RELEASE=1 for long runs.
profile=(--dev)
[ "${FUZZ_RELEASE:-0}" = 1 ] && profile=(--release)
fuzz() { cargo fuzz "$1" -s none "${profile[@]}" --target-dir "$target_dir" "${@:2}"; }

start=$(date +%s)
fuzz build
echo "fuzz: targets built in $(($(date +%s) - start))s" >&2

work="${FUZZ_WORK:-$(mktemp -d)}"
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "fuzz/artifacts/$t"
  args=(-max_total_time="$seconds" -rss_limit_mb=1024 -timeout=10 -print_final_stats=1)
  case "$t" in
    manifest_decode) args+=(-max_len=65536 -dict="$PWD/fuzz/dicts/manifest_decode.dict") ;;
    cri_to_docker) args+=(-max_len=8192) ;;
  esac
  echo "fuzz: $t for ${seconds}s" >&2
  # The first directory receives new inputs; the checked-in seeds are only read.
  fuzz run "$t" "$work/$t" "$PWD/fuzz/corpus/$t" -- "${args[@]}"
done
echo "fuzz: no crash in ${targets[*]} ($(($(date +%s) - start))s in all)" >&2
