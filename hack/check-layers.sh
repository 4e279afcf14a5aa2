#!/usr/bin/env bash
# The layering check: no import cycle between the top-level modules of any crate of the
# workspace (hack/module_cycles.py says how modules are folded and what counts as an import).
# Prints each crate's layers; exits non-zero, naming the cycle and the files that close it, when
# one appears. Run by hack/test.sh before the build.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for crate in kubelet:kubelet/src dockershim:dockershim/src integration:integration/src \
  cri_proto:proto/src node_common:common/src; do
  python3 hack/module_cycles.py "${crate%%:*}" "${crate#*:}" || status=1
done
exit "$status"
