#!/usr/bin/env bash
# Runs the example pods in examples/ on the local Docker host: the kubelet with its embedded
# dockershim reads them as static pods from a manifest directory. `up` (default) starts the
# kubelet in the background, waits until every pod is Running and prints them from GET /pods;
# `down` removes the manifests, waits until the kubelet removed the pods, and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d "$HOME/.cargo/bin" ] && PATH="$HOME/.cargo/bin:$PATH"

STATE=/var/lib/kubelet-examples
MANIFESTS="$STATE/manifests"
PORT=${KUBELET_EXAMPLES_PORT:-10255}
PIDFILE="$STATE/kubelet.pid"
LOG="$STATE/kubelet.log"

pods_json() { curl -fsS "http://127.0.0.1:$PORT/pods" 2>/dev/null || true; }

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

summary() {
  python3 -c '
import json, sys
data = sys.stdin.read()
pods = json.loads(data).get("items", []) if data.strip() else []
want = int(sys.argv[1])
print("%-10s %-28s %-10s %-6s %-8s %s" % ("NAMESPACE", "NAME", "PHASE", "READY", "RESTARTS", "IP"))
ok = 0
for p in pods:
    st = p.get("status", {})
    cs = st.get("containerStatuses", [])
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in cs)
    phase = st.get("phase", "")
    ok += phase == "Running" and ready == len(cs) and len(cs) > 0
    md = p.get("metadata", {})
    print("%-10s %-28s %-10s %-6s %-8s %s" % (md.get("namespace", ""), md.get("name", ""), phase, "%d/%d" % (ready, len(cs)), restarts, st.get("podIP", "")))
sys.exit(0 if ok == want else 1)
' "$1"
}

down() {
  if running; then
    rm -f "$MANIFESTS"/*.yaml
    # The pods leave /pods at once; wait until the kubelet has also removed their containers
    # and sandboxes from Docker.
    for _ in $(seq 90); do
      [ -z "$(docker ps -aq --filter label=io.kubernetes.pod.namespace=examples)" ] && break
      sleep 1
    done
    kill "$(cat "$PIDFILE")" 2>/dev/null || true
    rm -f "$PIDFILE"
    echo "example pods removed, kubelet stopped"
  else
    echo "the examples kubelet is not running"
  fi
}

up() {
  [ "$(id -u)" = 0 ] || { echo "run as root (the kubelet manages containers)" >&2; exit 1; }
  bash hack/testbed.sh up >/dev/null
  command -v curl >/dev/null || apt-get install -y -qq curl >/dev/null
  cargo build --workspace --quiet
  mkdir -p "$MANIFESTS"
  cp examples/*.yaml "$MANIFESTS"/
  if ! running; then
    nohup target/debug/kubelet \
      --pod-manifest-path "$MANIFESTS" \
      --root-dir "$STATE/root" \
      --read-only-port "$PORT" \
      --file-check-frequency 5s \
      -v 1 >"$LOG" 2>&1 &
    echo $! >"$PIDFILE"
  fi
  want=$(ls examples/*.yaml | wc -l)
  for _ in $(seq 180); do
    if pods_json | summary "$want" >/dev/null 2>&1; then
      pods_json | summary "$want"
      echo
      echo "all $want example pods are Running (kubelet log: $LOG; stop with: hack/run-examples.sh down)"
      return 0
    fi
    running || { echo "the kubelet exited; its log ($LOG):" >&2; tail -30 "$LOG" >&2; exit 1; }
    sleep 1
  done
  pods_json | summary "$want" || true
  echo "example pods did not all reach Running in 180 s; kubelet log: $LOG" >&2
  tail -30 "$LOG" >&2
  exit 1
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
