#!/usr/bin/env bash
# hack/build-debs.sh - the Debian packages `dockershim` and `kubelet`, made by cargo-deb (the
# version pinned below, installed with `cargo install` when another or none is there) from the
# [package.metadata.deb] tables of dockershim/Cargo.toml and kubelet/Cargo.toml, into
# <cargo target dir>/debian/ (or $DEB_OUTPUT_DIR). Prints the paths of the two .deb files, one
# a line, on stdout.
#
# Usage: hack/build-debs.sh [cargo-deb options...]
#        hack/build-debs.sh --install-cargo-deb   (only install cargo-deb; hack/test.sh)
#   no options: release builds (what to install on a node).
#   --profile dev --no-build: package the debug binaries `cargo build` already made (the e2e
#     test integration/tests/e2e/packages.rs does this; cargo-deb warns that it is meant for
#     release builds).
#
# Debian wants a maintainer and a changelog entry, signed by a person: they are the packager's,
# taken as Debian's own tools take them (dch): DEBFULLNAME and DEBEMAIL, else git's user.name
# and user.email, else the author of the commit being packaged. The changelog is written to
# packaging/deb/changelog (not tracked), dated with the commit.
set -euo pipefail
CARGO_DEB_VERSION=3.8.0
cd "$(dirname "$0")/.."
[ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"

say() { echo "build-debs: $*" >&2; }

if [ "$(cargo deb --version 2>/dev/null || true)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
    say "installing cargo-deb $CARGO_DEB_VERSION (cargo install, a few minutes)"
    nice -n 10 cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION" >&2
fi
[ "${1:-}" = --install-cargo-deb ] && exit 0

git_() { git -C . "$@" 2>/dev/null; }
name=${DEBFULLNAME:-$(git_ config user.name || git_ log -1 --format=%an || true)}
email=${DEBEMAIL:-$(git_ config user.email || git_ log -1 --format=%ae || true)}
if [ -z "$name" ] || [ -z "$email" ]; then
    say "ERROR: no packager: set DEBFULLNAME and DEBEMAIL (Debian's Maintainer field needs them)"
    exit 1
fi
maintainer="$name <$email>"

metadata=$(cargo metadata --format-version 1 --no-deps)
target_dir=$(printf '%s' "$metadata" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
version=$(printf '%s' "$metadata" |
    grep -o '"name":"kubelet","version":"[^"]*"' | sed 's/.*"version":"\([^"]*\)"/\1/')
[ -n "$target_dir" ] && [ -n "$version" ] || { say "ERROR: cannot read cargo metadata"; exit 1; }

commit=$(git_ rev-parse --short=12 HEAD || echo unknown)
date=$(git_ log -1 --format=%cD || date -R)
# cargo-deb's default revision is 1: the changelog's version is the packages'.
cat > packaging/deb/changelog <<EOF
kubelet-rs ($version-1) unstable; urgency=medium

  * dockershim and kubelet $version, built from commit $commit.

 -- $maintainer  $date
EOF

out=${DEB_OUTPUT_DIR:-$target_dir/debian}
mkdir -p "$out"
for pkg in dockershim kubelet; do
    say "packaging $pkg"
    nice -n 10 cargo deb -p "$pkg" --maintainer "$maintainer" -o "$out/" "$@" >&2
    ls "$out/${pkg}_${version}-1_"*.deb
done
