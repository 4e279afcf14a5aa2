#!/usr/bin/env bash
# images/build.sh - build the test bed's container images without `docker
# build` and without any network.
#
# Each image is a single-layer docker-archive tarball (the format of
# `docker save`, accepted by `docker load` and `ctr images import`) written
# by hand so that it is byte-for-byte reproducible: the layer tar has sorted
# names, mtime 0 and owner 0:0; the config has a fixed `created` date. Image
# IDs (sha256 of the config) and registry digests therefore stay the same
# from build to build and machine to machine.
#
# Usage: images/build.sh [OUT_DIR]      (default /var/lib/cri-testbed/images)
#
# Outputs in OUT_DIR:
#   <name>-<key>.tar   the archive; <key> hashes every input of the image
#                      (this script, the image's input files, the compiler
#                      version), so an unchanged image is never rebuilt.
#   index              one line per image, tab separated:
#                        name  archive  image-id  local-tags  push-only-tags
#                      tags are comma separated; "-" when there are none.
#                      Local tags are stored in the archive (and so end up in
#                      Docker and containerd); push-only tags are pushed to a
#                      registry by hack/testbed.sh but not kept locally, so
#                      tests can pull them for real.
#
# Adding an image: write a function that fills a root filesystem directory
# ($1), then call `image` at the bottom of this file, e.g.
#
#   rootfs_hello() { install -m 0755 /bin/busybox "$1/hello"; }
#   image hello --rootfs rootfs_hello --input /bin/busybox \
#       --tag 127.0.0.1:5000/hello:1 --cmd '["/hello","echo","hi"]' \
#       --user 1000:1000 --workdir /tmp --env FOO=bar
#
# `image` options:
#   --rootfs FN        function that populates the root fs directory (required)
#   --input FILE       a file the image is made from (hashed into the key)
#   --tag REF          tag stored in the archive (repeatable)
#   --push-only REF    tag pushed to a registry only (repeatable)
#   --entrypoint JSON  JSON array, e.g. '["/pause"]'
#   --cmd JSON         JSON array, e.g. '["sh"]'
#   --env K=V          environment variable (repeatable; PATH has a default)
#   --user USER        config User: uid, name, uid:gid, name:group
#   --workdir DIR      config WorkingDir
#   --expose PORT/PROTO  config ExposedPorts entry (repeatable), e.g. 80/tcp
#   --label K=V        config Labels entry (repeatable)
#   --stop-signal SIG  config StopSignal
set -euo pipefail
umask 022
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-/var/lib/cri-testbed/images}
SELF_SHA=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() { echo "images/build.sh: $*" >&2; exit 1; }

mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
: > "$WORK/index"

# json_str STRING -> a JSON string literal
json_str() {
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\t'/\\t}
    s=${s//$'\n'/\\n}
    printf '"%s"' "$s"
}

# json_join ITEM... -> items joined with commas (items are JSON already)
json_join() {
    local IFS=,
    printf '%s' "$*"
}

# deterministic_tar DIR OUT.tar: tar of DIR's contents, reproducible.
deterministic_tar() {
    local dir=$1 out=$2
    (cd "$dir" && find . -mindepth 1 -printf '%P\n' | sort) > "$WORK/filelist"
    tar --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --no-recursion -C "$dir" -T "$WORK/filelist" -cf "$out"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

image() {
    local name=$1; shift
    local rootfs_fn="" entrypoint=null cmd=null user="" workdir="" stop_signal=""
    local -a tags=() push_only=() inputs=() envs=() exposes=() labels=()
    while [ $# -gt 0 ]; do
        case $1 in
        --rootfs) rootfs_fn=$2 ;;
        --input) inputs+=("$2") ;;
        --tag) tags+=("$2") ;;
        --push-only) push_only+=("$2") ;;
        --entrypoint) entrypoint=$2 ;;
        --cmd) cmd=$2 ;;
        --env) envs+=("$2") ;;
        --user) user=$2 ;;
        --workdir) workdir=$2 ;;
        --expose) exposes+=("$2") ;;
        --label) labels+=("$2") ;;
        --stop-signal) stop_signal=$2 ;;
        *) die "image $name: unknown option $1" ;;
        esac
        shift 2
    done
    [ -n "$rootfs_fn" ] || die "image $name: --rootfs is required"
    [ ${#tags[@]} -gt 0 ] || die "image $name: at least one --tag is required"

    # Content key: this script, the image's arguments, its input files and
    # the tool versions that shape the output.
    local key f
    key=$(
        {
            echo "$SELF_SHA"
            declare -f "$rootfs_fn"
            printf '%s\n' "$name" "$entrypoint" "$cmd" "$user" "$workdir" "$stop_signal"
            printf 'tag %s\n' "${tags[@]}"
            printf 'push %s\n' "${push_only[@]}"
            printf 'env %s\n' "${envs[@]}"
            printf 'expose %s\n' "${exposes[@]}"
            printf 'label %s\n' "${labels[@]}"
            for f in "${inputs[@]}"; do
                [ -r "$f" ] || die "image $name: input $f missing"
                sha256sum "$f"
            done
            tar --version | head -1
            gcc --version 2>/dev/null | head -1 || true
        } | sha256sum | cut -c1-16
    )
    local archive="$OUT/$name-$key.tar"
    local image_id
    if [ -s "$archive" ] && [ -s "$archive.id" ]; then
        image_id=$(cat "$archive.id")
        echo "images/build.sh: $name up to date ($archive)" >&2
    else
        echo "images/build.sh: building $name" >&2
        local d="$WORK/$name"
        rm -rf "$d"; mkdir -p "$d/rootfs" "$d/archive"
        "$rootfs_fn" "$d/rootfs" || die "image $name: $rootfs_fn failed"
        deterministic_tar "$d/rootfs" "$d/layer.tar"
        local diff_id; diff_id=$(sha256 "$d/layer.tar")

        local -a env_json=() expose_json=() label_json=()
        local has_path=false e
        for e in "${envs[@]}"; do
            case $e in PATH=*) has_path=true ;; esac
            env_json+=("$(json_str "$e")")
        done
        $has_path || env_json=("$(json_str "PATH=$DEFAULT_PATH")" "${env_json[@]}")
        for e in "${exposes[@]}"; do expose_json+=("$(json_str "$e"):{}"); done
        for e in "${labels[@]}"; do label_json+=("$(json_str "${e%%=*}"):$(json_str "${e#*=}")"); done

        local cfg="{\"User\":$(json_str "$user")"
        cfg+=",\"Env\":[$(json_join "${env_json[@]}")]"
        cfg+=",\"Entrypoint\":$entrypoint,\"Cmd\":$cmd"
        cfg+=",\"WorkingDir\":$(json_str "$workdir")"
        [ ${#expose_json[@]} -eq 0 ] || cfg+=",\"ExposedPorts\":{$(json_join "${expose_json[@]}")}"
        [ ${#label_json[@]} -eq 0 ] || cfg+=",\"Labels\":{$(json_join "${label_json[@]}")}"
        [ -z "$stop_signal" ] || cfg+=",\"StopSignal\":$(json_str "$stop_signal")"
        cfg+="}"
        printf '%s' "{\"architecture\":\"amd64\",\"os\":\"linux\",\"created\":\"1970-01-01T00:00:00Z\",\"config\":$cfg,\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},\"history\":[{\"created\":\"1970-01-01T00:00:00Z\",\"created_by\":$(json_str "cri-testbed images/build.sh $name")}]}" > "$d/config.json"
        if command -v jq >/dev/null 2>&1; then
            jq -e . "$d/config.json" >/dev/null || die "image $name: generated config is not valid JSON"
        fi
        image_id=$(sha256 "$d/config.json")

        mkdir -p "$d/archive/$diff_id"
        mv "$d/layer.tar" "$d/archive/$diff_id/layer.tar"
        mv "$d/config.json" "$d/archive/$image_id.json"
        local -a tag_json=() t
        for t in "${tags[@]}"; do tag_json+=("$(json_str "$t")"); done
        printf '[{"Config":"%s.json","RepoTags":[%s],"Layers":["%s/layer.tar"]}]' \
            "$image_id" "$(json_join "${tag_json[@]}")" "$diff_id" > "$d/archive/manifest.json"
        deterministic_tar "$d/archive" "$archive.tmp"
        mv "$archive.tmp" "$archive"
        printf 'sha256:%s\n' "$image_id" > "$archive.id"
        image_id="sha256:$image_id"
        rm -rf "$d"
    fi
    local IFS=,
    local p="${push_only[*]}"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$archive" "$image_id" "${tags[*]}" "${p:--}" >> "$WORK/index"
}

# ---------------------------------------------------------------------------
# Root filesystems

PAUSE_SRC=$HERE/pause/pause.c
BUSYBOX_BIN=/bin/busybox

rootfs_pause() {
    gcc -static -Os -s -o "$1/pause" "$PAUSE_SRC"
    strip "$1/pause" 2>/dev/null || true
    chmod 0755 "$1/pause"
}

# Minimal /etc/passwd and /etc/group: root and nobody.
base_etc() {
    mkdir -p "$1/etc"
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' \
        'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' > "$1/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' > "$1/etc/group"
    chmod 0644 "$1/etc/passwd" "$1/etc/group"
}

rootfs_busybox() {
    local r=$1 applet
    mkdir -p "$r/bin" "$r/root" "$r/tmp"
    chmod 1777 "$r/tmp"
    chmod 0700 "$r/root"
    install -m 0755 "$BUSYBOX_BIN" "$r/bin/busybox"
    for applet in $("$BUSYBOX_BIN" --list); do
        [ "$applet" = busybox ] && continue
        ln -s busybox "$r/bin/$applet"
    done
    base_etc "$r"
}

# busybox plus a user and a group of its own (uid 1003 `testuser`, gid 1006 `testgroup`),
# for images whose config names its user.
rootfs_busybox_users() {
    rootfs_busybox "$1"
    printf '%s\n' 'testuser:x:1003:1003:test user:/tmp:/bin/sh' >> "$1/etc/passwd"
    printf '%s\n' 'testuser:x:1003:' 'testgroup:x:1006:testuser' >> "$1/etc/group"
}

# ---------------------------------------------------------------------------
# Images

image pause --rootfs rootfs_pause --input "$PAUSE_SRC" \
    --tag registry.k8s.io/pause:3.9 --tag 127.0.0.1:5000/pause:3.9 \
    --entrypoint '["/pause"]'

image busybox --rootfs rootfs_busybox --input "$BUSYBOX_BIN" \
    --tag 127.0.0.1:5000/busybox:latest --tag 127.0.0.1:5000/busybox:1.36 \
    --tag busybox:latest --push-only 127.0.0.1:5001/busybox:latest \
    --cmd '["sh"]'

# Images whose config sets the user in each form the image spec allows; pushed to the
# registry (the local `cri-testbed/...` tags only carry them into Docker for the push), so the
# conformance suite pulls them (and reads uid / username from
# ImageStatus) for real.
image busybox-user-uid --rootfs rootfs_busybox_users --input "$BUSYBOX_BIN" \
    --tag cri-testbed/busybox-user:uid --push-only 127.0.0.1:5000/busybox-user:uid --user 1002 --cmd '["sh"]'
image busybox-user-name --rootfs rootfs_busybox_users --input "$BUSYBOX_BIN" \
    --tag cri-testbed/busybox-user:name --push-only 127.0.0.1:5000/busybox-user:name --user testuser --cmd '["sh"]'
image busybox-user-uid-gid --rootfs rootfs_busybox_users --input "$BUSYBOX_BIN" \
    --tag cri-testbed/busybox-user:uid-gid --push-only 127.0.0.1:5000/busybox-user:uid-gid --user 1004:1005 --cmd '["sh"]'
image busybox-user-name-group --rootfs rootfs_busybox_users --input "$BUSYBOX_BIN" \
    --tag cri-testbed/busybox-user:name-group --push-only 127.0.0.1:5000/busybox-user:name-group --user testuser:testgroup --cmd '["sh"]'

# An image of its own for the removal cases (a distinct config, so a distinct id: removing it
# never takes the busybox tags other cases use with it, as containerd's RemoveImage removes
# every tag of an image).
image removable --rootfs rootfs_busybox --input "$BUSYBOX_BIN" \
    --tag cri-testbed/removable:1 --push-only 127.0.0.1:5000/removable:1 \
    --label cri-testbed.purpose=removal --cmd '["sh"]'

# A small web server (busybox httpd serving /www on port 80).
rootfs_web() {
    rootfs_busybox "$1"
    mkdir -p "$1/www"
    printf 'hello from the cri-testbed web image\n' > "$1/www/index.html"
    chmod 0644 "$1/www/index.html"
}
image web --rootfs rootfs_web --input "$BUSYBOX_BIN" \
    --tag cri-testbed/web:1 --push-only 127.0.0.1:5000/web:1 --expose 80/tcp \
    --cmd '["httpd","-f","-p","80","-h","/www"]'

mv "$WORK/index" "$OUT/index"
