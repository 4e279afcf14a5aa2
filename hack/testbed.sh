#!/usr/bin/env bash
# hack/testbed.sh - the real-runtime test bed for the kubelet/dockershim
# rewrite: dockerd, a standalone containerd with the CRI plugin, two local
# registries, CNI configs and reproducible test images.
#
# Usage: hack/testbed.sh up|down|status|env
#
# Needs root. No systemd: daemons are started in the background with
# setsid/nohup, with pid files in /run/cri-testbed and logs in
# /var/log/cri-testbed. Everything listens on loopback only.
# See docs/testbed.md for the constants other code relies on.
set -euo pipefail
umask 022
export LC_ALL=C

# --- constants (other code depends on these exact values) -----------------
DOCKER_SOCK=/var/run/docker.sock
DOCKER_HOST_URL=unix://$DOCKER_SOCK
DOCKER_BIN=/usr/bin/docker          # /usr/local/bin/docker may be another CLI

ETC_DIR=/etc/cri-testbed
LIB_DIR=/var/lib/cri-testbed
RUN_DIR=/run/cri-testbed
LOG_DIR=/var/log/cri-testbed

CTD_CONFIG=$ETC_DIR/containerd/config.toml
CTD_ROOT=$LIB_DIR/containerd
CTD_STATE=$RUN_DIR/containerd/state
CTD_SOCK=$RUN_DIR/containerd/containerd.sock
CTD_LOG=$LOG_DIR/containerd.log
CTD_NETD=$ETC_DIR/containerd/net.d
CTD_CERTSD=$ETC_DIR/containerd/certs.d
CTD_NET_NAME=cri-testbed-containerd
CTD_BRIDGE=cni-ctd0
CTD_SUBNET=10.88.0.0/16
K8S_NS=k8s.io

SHIM_NETD=$ETC_DIR/dockershim/net.d
SHIM_CNI_CACHE=$LIB_DIR/dockershim/cni-cache
SHIM_NET_NAME=cri-testbed-dockershim
SHIM_BRIDGE=cni-shim0
SHIM_SUBNET=10.89.0.0/16

CNI_BIN_DIR=/usr/lib/cni
CNI_VERSION=1.0.0

REGISTRY=127.0.0.1:5000
AUTH_REGISTRY=127.0.0.1:5001
AUTH_USER=testuser
AUTH_PASSWORD=testpassword
REGISTRY_ETC=$ETC_DIR/registry
REGISTRY_STORAGE=$LIB_DIR/registry
HTPASSWD=$REGISTRY_ETC/htpasswd

PAUSE_IMAGE=registry.k8s.io/pause:3.9
BUSYBOX_IMAGE=$REGISTRY/busybox:latest
IMAGES_DIR=$LIB_DIR/images

HOSTLIMITS=$RUN_DIR/hostlimits
ENV_FILE=$RUN_DIR/env

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- helpers -----------------------------------------------------------------
say() { echo "testbed: $*" >&2; }
die() { echo "testbed: ERROR: $*" >&2; exit 1; }

# fail COMPONENT LOGFILE MESSAGE: explain, show the log tail, exit non-zero.
fail() {
    local comp=$1 log=$2; shift 2
    echo "testbed: ERROR: $comp: $*" >&2
    if [ -n "$log" ]; then
        echo "testbed: see $log; last lines:" >&2
        tail -n 25 "$log" 2>/dev/null | sed 's/^/    | /' >&2 || true
    fi
    exit 1
}

docker_() { DOCKER_HOST=$DOCKER_HOST_URL "$DOCKER_BIN" "$@"; }
ctr_() { timeout 60 ctr --address "$CTD_SOCK" "$@"; }

# write_file PATH MODE: write stdin to PATH if the content differs.
# Returns 0 if the file changed, 1 if it was already up to date.
write_file() {
    local path=$1 mode=$2 tmp
    mkdir -p "$(dirname "$path")"
    tmp=$(mktemp "$path.XXXXXX")
    cat > "$tmp"
    chmod "$mode" "$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"; return 1
    fi
    mv "$tmp" "$path"; return 0
}

# pid_alive PIDFILE NEEDLE: the pid in PIDFILE runs a command line containing NEEDLE.
pid_alive() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$2"
}

# find_pid NEEDLE: pid of a process whose command line contains NEEDLE
# (NEEDLE is always one of our own unique config paths).
find_pid() {
    local p
    for p in /proc/[0-9]*; do
        [ -r "$p/cmdline" ] || continue
        if tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -qF -- "$1"; then
            echo "${p#/proc/}"; return 0
        fi
    done
    return 1
}

# start_daemon PIDFILE LOG CMD...: start CMD in its own session.
start_daemon() {
    local pidfile=$1 log=$2; shift 2
    mkdir -p "$(dirname "$log")" "$(dirname "$pidfile")"
    echo "=== $(date -u +%FT%TZ) testbed starting: $*" >> "$log"
    # 9>&-: do not hand our lock fd to the daemon.
    setsid nohup "$@" >> "$log" 2>&1 < /dev/null 9>&- &
    echo $! > "$pidfile"
}

# stop_pid PID NAME: TERM, wait up to 20s, then KILL.
stop_pid() {
    local pid=$1 name=$2 i
    kill -0 "$pid" 2>/dev/null || return 0
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    say "$name did not exit after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# wait_for SECONDS CMD...: retry CMD until it succeeds.
wait_for() {
    local secs=$1 i; shift
    for i in $(seq 1 $((secs * 4))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    return 1
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# --- packages ----------------------------------------------------------------
static_busybox_ok() {
    local out
    [ -x /bin/busybox ] || return 1
    out=$(ldd /bin/busybox 2>&1 || true)
    case $out in *"not a dynamic executable"*) return 0 ;; esac
    return 1
}

ensure_packages() {
    local -a missing=()
    local entry
    # "check|package": check is a path that must exist, or a command name.
    for entry in \
        /usr/sbin/dockerd'|docker.io' "$DOCKER_BIN"'|docker.io' \
        /usr/bin/containerd'|containerd' /usr/bin/ctr'|containerd' \
        runc'|runc' "$CNI_BIN_DIR/bridge"'|containernetworking-plugins' \
        "$CNI_BIN_DIR/portmap"'|containernetworking-plugins' \
        "$CNI_BIN_DIR/host-local"'|containernetworking-plugins' \
        "$CNI_BIN_DIR/loopback"'|containernetworking-plugins' \
        /usr/bin/docker-registry'|docker-registry' iptables'|iptables' \
        htpasswd'|apache2-utils' gcc'|gcc' curl'|curl' ip'|iproute2' \
        strip'|binutils' tar'|tar' flock'|util-linux' \
        systemd-socket-activate'|systemd' dbus-daemon'|dbus-daemon' go'|golang-go' \
        lintian'|lintian' dpkg-deb'|dpkg' promtool'|prometheus' /usr/bin/prometheus'|prometheus' \
        /usr/share/gocode/src/google.golang.org/grpc'|golang-google-grpc-dev' \
        /usr/share/gocode/src/google.golang.org/protobuf'|golang-google-protobuf-dev'; do
        local check=${entry%%|*} pkg=${entry#*|}
        if [ "${check#/}" != "$check" ]; then
            [ -e "$check" ] && continue
        else
            command -v "$check" >/dev/null 2>&1 && continue
        fi
        missing+=("$pkg")
    done
    static_busybox_ok || missing+=(busybox-static)
    [ -e /usr/lib/x86_64-linux-gnu/libc.a ] || missing+=(libc6-dev)
    [ ${#missing[@]} -eq 0 ] && return 0
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    say "installing missing packages: ${missing[*]} (log: $LOG_DIR/apt.log)"
    mkdir -p "$LOG_DIR"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >> "$LOG_DIR/apt.log" 2>&1 || fail apt "$LOG_DIR/apt.log" "apt-get update failed"
    apt-get install -y --no-install-recommends "${missing[@]}" >> "$LOG_DIR/apt.log" 2>&1 ||
        fail apt "$LOG_DIR/apt.log" "apt-get install ${missing[*]} failed"
    static_busybox_ok || fail apt "" "/bin/busybox is not the static busybox (install busybox-static)"
}

# The real gRPC clients the tests use besides Go's (above): grpcio from PyPI, for the python3
# the tests run.
ensure_python_grpc() {
    python3 -c 'import grpc' >/dev/null 2>&1 && return 0
    say "installing grpcio from PyPI (log: $LOG_DIR/pip.log)"
    mkdir -p "$LOG_DIR"
    python3 -m pip install --quiet grpcio >> "$LOG_DIR/pip.log" 2>&1 ||
        fail pip "$LOG_DIR/pip.log" "pip install grpcio failed"
}

# --- kernel networking -------------------------------------------------------
ensure_kernel() {
    sysctl -qw net.ipv4.ip_forward=1 || fail kernel "" "cannot set net.ipv4.ip_forward=1"
    if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && command -v modprobe >/dev/null; then
        modprobe br_netfilter 2>/dev/null || true
    fi
    if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
        sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
    else
        say "warning: br_netfilter not available (best effort; bridge traffic skips iptables)"
    fi
}

# --- configuration files -----------------------------------------------------
CTD_CONFIG_CHANGED=false
REGISTRY_CONFIG_CHANGED=false

bridge_conflist() { # NAME BRIDGE SUBNET
    cat <<EOF
{
  "cniVersion": "$CNI_VERSION",
  "name": "$1",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$2",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$3" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    }
  ]
}
EOF
}

registry_config() { # ADDR STORAGE [HTPASSWD]
    cat <<EOF
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: $2
  delete:
    enabled: true
http:
  addr: $1
  secret: cri-testbed-not-a-secret
EOF
    if [ -n "${3:-}" ]; then
        cat <<EOF
auth:
  htpasswd:
    realm: cri-testbed
    path: $3
EOF
    fi
}

write_configs() {
    mkdir -p "$ETC_DIR" "$LIB_DIR" "$RUN_DIR" "$LOG_DIR" "$CTD_ROOT" "$CTD_STATE" \
        "$SHIM_CNI_CACHE" "$REGISTRY_STORAGE/5000" "$REGISTRY_STORAGE/5001" "$IMAGES_DIR"

    if write_file "$CTD_CONFIG" 0644 <<EOF
# Generated by hack/testbed.sh - do not edit.
version = 2
root = "$CTD_ROOT"
state = "$CTD_STATE"
oom_score = 0

[grpc]
  address = "$CTD_SOCK"

[ttrpc]
  address = "$CTD_SOCK.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN_DIR/containerd/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CTD_NETD"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$CTD_CERTSD"
EOF
    then CTD_CONFIG_CHANGED=true; fi

    local reg
    for reg in "$REGISTRY" "$AUTH_REGISTRY"; do
        if write_file "$CTD_CERTSD/$reg/hosts.toml" 0644 <<EOF
# Generated by hack/testbed.sh: pull $reg over plain http.
server = "http://$reg"

[host."http://$reg"]
  capabilities = ["pull", "resolve", "push"]
EOF
        then CTD_CONFIG_CHANGED=true; fi
    done
    # critest's images keep their upstream names (images/critest-images.sh pushes them to
    # $REGISTRY under the same paths): containerd pulls those registries from $REGISTRY.
    for reg in registry.k8s.io gcr.io; do
        write_file "$CTD_CERTSD/$reg/hosts.toml" 0644 <<EOF || true
# Generated by hack/testbed.sh: $reg is served by the local registry (no internet here).
server = "https://$reg"

[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
    done

    # containerd re-reads net.d by itself; no restart needed for these.
    bridge_conflist "$CTD_NET_NAME" "$CTD_BRIDGE" "$CTD_SUBNET" |
        write_file "$CTD_NETD/10-$CTD_NET_NAME.conflist" 0644 || true
    bridge_conflist "$SHIM_NET_NAME" "$SHIM_BRIDGE" "$SHIM_SUBNET" |
        write_file "$SHIM_NETD/10-$SHIM_NET_NAME.conflist" 0644 || true

    # htpasswd: bcrypt salts are random, so only rewrite when it does not verify.
    if ! { [ -s "$HTPASSWD" ] && htpasswd -vb "$HTPASSWD" "$AUTH_USER" "$AUTH_PASSWORD" >/dev/null 2>&1; }; then
        mkdir -p "$REGISTRY_ETC"
        htpasswd -Bbc "$HTPASSWD" "$AUTH_USER" "$AUTH_PASSWORD" >/dev/null 2>&1 ||
            fail registry "" "htpasswd -B failed"
        REGISTRY_CONFIG_CHANGED=true
    fi
    registry_config "$REGISTRY" "$REGISTRY_STORAGE/5000" |
        write_file "$REGISTRY_ETC/registry-5000.yml" 0644 && REGISTRY_CONFIG_CHANGED=true
    registry_config "$AUTH_REGISTRY" "$REGISTRY_STORAGE/5001" "$HTPASSWD" |
        write_file "$REGISTRY_ETC/registry-5001.yml" 0644 && REGISTRY_CONFIG_CHANGED=true
    return 0
}

# --- dockerd -----------------------------------------------------------------
docker_answers() { timeout 10 "$DOCKER_BIN" -H "$DOCKER_HOST_URL" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_dockerd() {
    if docker_answers; then
        pid_alive "$RUN_DIR/dockerd.pid" dockerd || rm -f "$RUN_DIR/dockerd.pid"
        return 0
    fi
    say "starting dockerd (log: $LOG_DIR/dockerd.log)"
    start_daemon "$RUN_DIR/dockerd.pid" "$LOG_DIR/dockerd.log" \
        /usr/sbin/dockerd --host "$DOCKER_HOST_URL"
    if ! wait_for 60 docker_answers; then
        pid_alive "$RUN_DIR/dockerd.pid" dockerd || rm -f "$RUN_DIR/dockerd.pid"
        fail dockerd "$LOG_DIR/dockerd.log" "dockerd does not answer on $DOCKER_HOST_URL"
    fi
}

# --- containerd --------------------------------------------------------------
ctd_answers() { timeout 5 ctr --address "$CTD_SOCK" version >/dev/null 2>&1; }
cri_status() {
    timeout 10 ctr --address "$CTD_SOCK" plugins ls 2>/dev/null |
        awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" { print $NF }'
}
ctd_pid() {
    if pid_alive "$RUN_DIR/containerd.pid" "$CTD_CONFIG"; then cat "$RUN_DIR/containerd.pid"; return 0; fi
    find_pid "containerd --config $CTD_CONFIG"
}

ensure_containerd() {
    local pid
    if ctd_answers; then
        if $CTD_CONFIG_CHANGED && pid=$(ctd_pid); then
            say "containerd config changed; restarting containerd"
            stop_pid "$pid" containerd
        elif [ "$(cri_status)" = ok ]; then
            pid=$(ctd_pid) && echo "$pid" > "$RUN_DIR/containerd.pid"
            return 0
        elif pid=$(ctd_pid); then
            say "containerd answers but its CRI plugin is not ok; restarting it"
            stop_pid "$pid" containerd
        else
            fail containerd "$CTD_LOG" "something answers on $CTD_SOCK but its CRI plugin is not ok and it was not started by this script"
        fi
    fi
    say "starting containerd (log: $CTD_LOG)"
    rm -f "$CTD_SOCK" "$CTD_SOCK.ttrpc"
    start_daemon "$RUN_DIR/containerd.pid" "$CTD_LOG" \
        /usr/bin/containerd --config "$CTD_CONFIG" --log-level info
    wait_for 30 ctd_answers || fail containerd "$CTD_LOG" "containerd does not answer on $CTD_SOCK"
    local st=""
    wait_for 10 test "$(cri_status)" = ok || st=$(cri_status)
    [ -z "$st" ] || [ "$st" = ok ] ||
        fail containerd "$CTD_LOG" "CRI plugin io.containerd.grpc.v1.cri status is '${st:-missing}', not ok (ctr --address $CTD_SOCK plugins ls -d)"
    [ "$(cri_status)" = ok ] ||
        fail containerd "$CTD_LOG" "CRI plugin io.containerd.grpc.v1.cri did not load (ctr --address $CTD_SOCK plugins ls -d)"
}

# --- registries --------------------------------------------------------------
reg_answers() { # ADDR [USER:PASS]
    if [ -n "${2:-}" ]; then
        curl -fsS -m 5 -u "$2" "http://$1/v2/" >/dev/null 2>&1
    else
        curl -fsS -m 5 "http://$1/v2/" >/dev/null 2>&1
    fi
}
reg_http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "http://$1/v2/" 2>/dev/null || true; }

ensure_registry() { # PORT ADDR [USER:PASS]
    local port=$1 addr=$2 creds=${3:-} pidf=$RUN_DIR/registry-$1.pid log=$LOG_DIR/registry-$1.log
    local cfg=$REGISTRY_ETC/registry-$port.yml pid
    if pid_alive "$pidf" "$cfg" && $REGISTRY_CONFIG_CHANGED; then
        say "registry $addr config changed; restarting it"
        stop_pid "$(cat "$pidf")" "registry $addr"
    fi
    if reg_answers "$addr" "$creds"; then
        pid_alive "$pidf" "$cfg" || { pid=$(find_pid "$cfg") && echo "$pid" > "$pidf"; } || true
        return 0
    fi
    if pid_alive "$pidf" "$cfg"; then
        stop_pid "$(cat "$pidf")" "registry $addr (not answering)"
    fi
    say "starting registry on $addr (log: $log)"
    start_daemon "$pidf" "$log" /usr/bin/docker-registry serve "$cfg"
    wait_for 20 reg_answers "$addr" "$creds" ||
        fail "registry $addr" "$log" "registry does not answer on http://$addr/v2/ (port taken by something else?)"
    if [ -n "$creds" ]; then
        local code; code=$(reg_http_code "$addr")
        [ "$code" = 401 ] || fail "registry $addr" "$log" "expected 401 without credentials, got $code"
    fi
}

# --- images ------------------------------------------------------------------
registry_has() { # REF IMAGE_ID [USER:PASS]
    local ref=$1 id=${2#sha256:} host repo tag
    host=${ref%%/*}; repo=${ref#*/}; tag=${repo##*:}; repo=${repo%:*}
    local -a auth=()
    [ -z "${3:-}" ] || auth=(-u "$3")
    curl -fsS -m 10 "${auth[@]}" \
        -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$host/v2/$repo/manifests/$tag" 2>/dev/null | grep -qF "$id"
}

# normalize_ref REF: the fully qualified name containerd stores (busybox:latest
# is docker.io/library/busybox:latest).
normalize_ref() {
    local first=${1%%/*}
    if [ "$first" = "$1" ]; then
        echo "docker.io/library/$1"
    elif [[ $first == *.* || $first == *:* || $first == localhost ]]; then
        echo "$1"
    else
        echo "docker.io/$1"
    fi
}

ctd_has() { # REF IMAGE_ID
    local digest
    digest=$(ctr_ -n "$K8S_NS" images ls "name==$(normalize_ref "$1")" 2>/dev/null | awk 'NR == 2 { print $3 }')
    [ -n "$digest" ] || return 1
    ctr_ -n "$K8S_NS" content get "$digest" 2>/dev/null | grep -qF "${2#sha256:}"
}

DOCKER_LOGIN_DIR=""
docker_login_auth() {
    [ -z "$DOCKER_LOGIN_DIR" ] || return 0
    DOCKER_LOGIN_DIR=$(mktemp -d /tmp/cri-testbed-docker-config.XXXXXX)
    trap 'rm -rf "$DOCKER_LOGIN_DIR"' EXIT
    printf '%s' "$AUTH_PASSWORD" | DOCKER_CONFIG=$DOCKER_LOGIN_DIR docker_ login \
        -u "$AUTH_USER" --password-stdin "$AUTH_REGISTRY" >> "$LOG_DIR/images.log" 2>&1 ||
        fail images "$LOG_DIR/images.log" "docker login $AUTH_REGISTRY failed"
}

push_ref() { # REF (already tagged in docker)
    local -a env=()
    case $1 in
    "$AUTH_REGISTRY"/*) docker_login_auth; env=(env DOCKER_CONFIG="$DOCKER_LOGIN_DIR") ;;
    esac
    say "pushing $1"
    "${env[@]}" env DOCKER_HOST="$DOCKER_HOST_URL" "$DOCKER_BIN" push "$1" >> "$LOG_DIR/images.log" 2>&1 ||
        fail images "$LOG_DIR/images.log" "docker push $1 failed"
}

ensure_images() {
    local log=$LOG_DIR/images.log
    bash "$REPO_ROOT/images/build.sh" "$IMAGES_DIR" 2>> "$log" ||
        fail images "$log" "images/build.sh failed"
    local name archive id tags push_only ref
    while IFS=$'\t' read -r name archive id tags push_only; do
        local -a tag_list=() push_list=()
        IFS=, read -r -a tag_list <<< "$tags"
        [ "$push_only" = - ] || IFS=, read -r -a push_list <<< "$push_only"

        # Docker
        for ref in "${tag_list[@]}"; do
            if [ "$(docker_ image inspect --format '{{.Id}}' "$ref" 2>/dev/null)" != "$id" ]; then
                say "loading $name into docker"
                docker_ load -i "$archive" >> "$log" 2>&1 || fail images "$log" "docker load $archive failed"
                break
            fi
        done
        # containerd, k8s.io namespace
        for ref in "${tag_list[@]}"; do
            if ! ctd_has "$ref" "$id"; then
                say "importing $name into containerd ($K8S_NS)"
                ctr_ -n "$K8S_NS" images import "$archive" >> "$log" 2>&1 ||
                    fail images "$log" "ctr images import $archive failed"
                break
            fi
        done
        # registries
        for ref in "${tag_list[@]}"; do
            case $ref in
            "$REGISTRY"/*) registry_has "$ref" "$id" || push_ref "$ref" ;;
            "$AUTH_REGISTRY"/*) registry_has "$ref" "$id" "$AUTH_USER:$AUTH_PASSWORD" || push_ref "$ref" ;;
            esac
        done
        for ref in "${push_list[@]}"; do
            local creds=""
            case $ref in "$AUTH_REGISTRY"/*) creds=$AUTH_USER:$AUTH_PASSWORD ;; esac
            registry_has "$ref" "$id" "$creds" && continue
            docker_ tag "$id" "$ref" >> "$log" 2>&1 || fail images "$log" "docker tag $ref failed"
            push_ref "$ref"
            # Push-only: do not keep it locally, so tests really pull it.
            docker_ rmi "$ref" >> "$log" 2>&1 || true
        done
    done < "$IMAGES_DIR/index"
}

verify_pulls() {
    local log=$LOG_DIR/images.log
    ctr_ -n "$K8S_NS" images pull --plain-http "$BUSYBOX_IMAGE" >> "$log" 2>&1 ||
        fail images "$log" "ctr pull --plain-http $BUSYBOX_IMAGE failed"
    # The auth registry is checked in a scratch namespace so that k8s.io does
    # not get a local copy of $AUTH_REGISTRY/busybox (tests must pull it).
    ctr_ -n cri-testbed-verify images pull --plain-http --user "$AUTH_USER:$AUTH_PASSWORD" \
        "$AUTH_REGISTRY/busybox:latest" >> "$log" 2>&1 ||
        fail images "$log" "ctr pull --plain-http --user ... $AUTH_REGISTRY/busybox:latest failed"
    ctr_ -n cri-testbed-verify images rm --sync "$AUTH_REGISTRY/busybox:latest" >> "$log" 2>&1 || true
}

# --- host limits -------------------------------------------------------------
probe_run() { # ARGS...: run a throwaway container, true if it started and exited 0
    docker_ run --rm --network none --label cri-testbed=probe "$@" busybox:latest true \
        >> "$LOG_DIR/hostlimits.log" 2>&1
}

probe_hostlimits() {
    local log=$LOG_DIR/hostlimits.log oom=false priv=false
    echo "=== $(date -u +%FT%TZ) probe" >> "$log"
    probe_run || fail "host-limit probe" "$log" "docker cannot run a plain busybox container"
    probe_run --oom-score-adj=-998 && oom=true
    probe_run --privileged && priv=true
    write_file "$HOSTLIMITS" 0644 <<EOF || true
CRI_TESTBED_CAN_LOWER_OOM_SCORE_ADJ=$oom
CRI_TESTBED_CAN_RUN_PRIVILEGED=$priv
EOF
}

# --- env ---------------------------------------------------------------------
write_env() {
    local pause_id busybox_id
    pause_id=$(awk -F'\t' '$1 == "pause" { print $3 }' "$IMAGES_DIR/index")
    busybox_id=$(awk -F'\t' '$1 == "busybox" { print $3 }' "$IMAGES_DIR/index")
    {
        echo "export DOCKER_HOST=$DOCKER_HOST_URL"
        echo "export CRI_TESTBED_CONTAINERD_ENDPOINT=unix://$CTD_SOCK"
        echo "export CRI_TESTBED_CONTAINERD_NAMESPACE=$K8S_NS"
        echo "export CRI_TESTBED_REGISTRY=$REGISTRY"
        echo "export CRI_TESTBED_AUTH_REGISTRY=$AUTH_REGISTRY"
        echo "export CRI_TESTBED_AUTH_USER=$AUTH_USER"
        echo "export CRI_TESTBED_AUTH_PASSWORD=$AUTH_PASSWORD"
        echo "export CRI_TESTBED_BUSYBOX_IMAGE=$BUSYBOX_IMAGE"
        echo "export CRI_TESTBED_BUSYBOX_IMAGE_ID=$busybox_id"
        echo "export CRI_TESTBED_PAUSE_IMAGE=$PAUSE_IMAGE"
        echo "export CRI_TESTBED_PAUSE_IMAGE_ID=$pause_id"
        echo "export CRI_TESTBED_DOCKERSHIM_CNI_CONF_DIR=$SHIM_NETD"
        echo "export CRI_TESTBED_DOCKERSHIM_CNI_CACHE_DIR=$SHIM_CNI_CACHE"
        echo "export CRI_TESTBED_CNI_BIN_DIR=$CNI_BIN_DIR"
        sed 's/^/export /' "$HOSTLIMITS"
    } | write_file "$ENV_FILE" 0644 || true
}

# --- commands ----------------------------------------------------------------
cmd_up() {
    local t0=$SECONDS
    ensure_packages
    ensure_python_grpc
    ensure_kernel
    write_configs
    ensure_dockerd
    ensure_containerd
    ensure_registry 5000 "$REGISTRY"
    ensure_registry 5001 "$AUTH_REGISTRY" "$AUTH_USER:$AUTH_PASSWORD"
    ensure_images
    verify_pulls
    probe_hostlimits
    write_env
    say "up in $((SECONDS - t0))s; environment ($ENV_FILE):"
    cat "$ENV_FILE"
}

stop_component() { # NAME PIDFILE NEEDLE
    local pid
    if pid_alive "$2" "$3"; then
        stop_pid "$(cat "$2")" "$1"
    elif pid=$(find_pid "$3"); then
        stop_pid "$pid" "$1"
    fi
    rm -f "$2"
}

cmd_down() {
    local id
    # Testbed containers in Docker: probes and dockershim-made pods/containers.
    if docker_answers; then
        for id in $(docker_ ps -aq --filter label=cri-testbed=probe) \
            $(docker_ ps -aq --filter label=io.kubernetes.docker.type); do
            docker_ rm -f "$id" >/dev/null 2>&1 || true
        done
    fi
    # Containers and sandboxes in our containerd.
    if ctd_answers; then
        for id in $(ctr_ -n "$K8S_NS" tasks ls -q 2>/dev/null); do
            ctr_ -n "$K8S_NS" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
        done
        for id in $(ctr_ -n "$K8S_NS" tasks ls -q 2>/dev/null); do
            ctr_ -n "$K8S_NS" tasks rm -f "$id" >/dev/null 2>&1 || true
        done
        for id in $(ctr_ -n "$K8S_NS" containers ls -q 2>/dev/null); do
            ctr_ -n "$K8S_NS" containers rm "$id" >/dev/null 2>&1 || true
        done
    fi
    stop_component containerd "$RUN_DIR/containerd.pid" "$CTD_CONFIG"
    stop_component "registry $REGISTRY" "$RUN_DIR/registry-5000.pid" "$REGISTRY_ETC/registry-5000.yml"
    stop_component "registry $AUTH_REGISTRY" "$RUN_DIR/registry-5001.pid" "$REGISTRY_ETC/registry-5001.yml"
    if pid_alive "$RUN_DIR/dockerd.pid" dockerd; then
        stop_pid "$(cat "$RUN_DIR/dockerd.pid")" "dockerd (started by testbed)"
    elif docker_answers; then
        say "leaving dockerd running (not started by testbed)"
    fi
    rm -f "$RUN_DIR/dockerd.pid" "$ENV_FILE" "$HOSTLIMITS"
    # Network leftovers of killed pods: bridges and host-local leases.
    ip link del "$CTD_BRIDGE" 2>/dev/null || true
    ip link del "$SHIM_BRIDGE" 2>/dev/null || true
    rm -rf "/var/lib/cni/networks/$CTD_NET_NAME" "/var/lib/cni/networks/$SHIM_NET_NAME"
    say "down"
}

cmd_status() {
    local rc=0 line
    st() { # NAME OK? DETAIL
        if [ "$2" = up ]; then printf '%-22s up    %s\n' "$1" "$3"
        else printf '%-22s down  %s\n' "$1" "$3"; rc=1; fi
    }
    local who="(not started by testbed)"
    pid_alive "$RUN_DIR/dockerd.pid" dockerd && who="(started by testbed, pid $(cat "$RUN_DIR/dockerd.pid"))"
    if docker_answers; then st dockerd up "$DOCKER_HOST_URL $who"; else st dockerd down "$DOCKER_HOST_URL"; fi
    if ctd_answers; then
        if [ "$(cri_status)" = ok ]; then st containerd up "unix://$CTD_SOCK (cri ok)"
        else st containerd down "unix://$CTD_SOCK answers but cri plugin not ok"; fi
    else st containerd down "unix://$CTD_SOCK"; fi
    if reg_answers "$REGISTRY"; then st "registry $REGISTRY" up "http://$REGISTRY (no auth)"
    else st "registry $REGISTRY" down "http://$REGISTRY"; fi
    if reg_answers "$AUTH_REGISTRY" "$AUTH_USER:$AUTH_PASSWORD"; then st "registry $AUTH_REGISTRY" up "http://$AUTH_REGISTRY (htpasswd)"
    else st "registry $AUTH_REGISTRY" down "http://$AUTH_REGISTRY"; fi
    if [ -s "$CTD_NETD/10-$CTD_NET_NAME.conflist" ] && [ -s "$SHIM_NETD/10-$SHIM_NET_NAME.conflist" ]; then
        st cni-configs up "$CTD_NETD $SHIM_NETD"
    else st cni-configs down "run up"; fi
    if [ -s "$IMAGES_DIR/index" ] && docker_answers &&
        [ "$(docker_ image inspect --format '{{.Id}}' "$BUSYBOX_IMAGE" 2>/dev/null)" = "$(awk -F'\t' '$1 == "busybox" { print $3 }' "$IMAGES_DIR/index")" ]; then
        st images up "$IMAGES_DIR"
    else st images down "$IMAGES_DIR"; fi
    if [ -s "$HOSTLIMITS" ]; then st hostlimits up "$(tr '\n' ' ' < "$HOSTLIMITS")"
    else st hostlimits down "$HOSTLIMITS missing"; fi
    return $rc
}

cmd_env() {
    [ -s "$ENV_FILE" ] || die "$ENV_FILE missing: run 'hack/testbed.sh up' first"
    cat "$ENV_FILE"
}

main() {
    local cmd=${1:-}
    case $cmd in
    up|down)
        need_root
        mkdir -p "$RUN_DIR" "$LOG_DIR"
        exec 9> "$RUN_DIR/lock"
        flock -w 300 9 || die "another testbed.sh holds $RUN_DIR/lock"
        "cmd_$cmd"
        ;;
    status) need_root; cmd_status ;;
    env) cmd_env ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
    esac
}

main "$@"
