#!/usr/bin/env bash
# images/critest-images.sh - build, from Debian packages, the container images
# that cri-tools' `critest` (v1.26.x) pulls, and push them to the test bed's
# plain-http registry (127.0.0.1:5000) under the repository paths critest
# names, so that a runtime whose pulls of `registry.k8s.io/...` and
# `gcr.io/...` are mirrored to that registry finds them.
#
# Usage: sudo images/critest-images.sh        (the test bed must be up)
#
# Environment: CRITEST_IMAGES_DIR  work/cache directory
#                                  (default /var/lib/cri-testbed/critest-images)
#              CRI_TESTBED_REGISTRY (default from /run/cri-testbed/env)
#
# Idempotent: the .deb files are downloaded once (`apt-get download`), every
# image archive is keyed by a hash of all its inputs and rebuilt only when one
# changed, and a tag is pushed (docker load, docker push, then the local tags
# are removed again) only when the registry does not already serve that image
# under it. Prints one line per tag: "pushed" or "present", image ID, digest.
# Image IDs are reproducible: layer tars have sorted names, mtime 0, owner
# 0:0; configs have a fixed `created` date (the format of images/build.sh).
#
# What critest pulls (names are constants in cri-tools' pkg/framework and
# pkg/validate) and what this script pushes for each (REGISTRY/<path>:<tag>):
#
#   registry.k8s.io/e2e-test-images/busybox:1.29-2    busybox + pgrep + ipcs (+ libs)
#   registry.k8s.io/e2e-test-images/nginx:1.14-2      Debian nginx on :80
#   registry.k8s.io/e2e-test-images/httpd:2.4.39-4    Debian apache2, `httpd -D FOREGROUND` on :80
#   registry.k8s.io/e2e-test-images/nonewprivs:1.3    setuid-root program printing its euid
#   gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64  Debian nginx on :12003
#   gcr.io/k8s-staging-cri-tools/test-image-predefined-group   USER 1000, in group 50000
#   gcr.io/k8s-staging-cri-tools/test-image-user-{uid,username,uid-group,username-group}
#   gcr.io/k8s-staging-cri-tools/test-image-{latest,1,2,3}:latest, test-image-tag:{test,all},
#   test-image-tags:{1,2,3} (one image), test-image-digest:latest
#
# critest also pulls gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2...
# That reference names one exact upstream manifest; no locally built image can
# have that digest, so the registry cannot serve it and that spec cannot pass
# here (test-image-digest:latest is pushed only so the repository exists).
#
# critest's `-registry-prefix` flag is not used: in v1.26 it rewrites a
# reference to PREFIX/<path> dropping the tag and digest, and the specs then
# look the image up under its original name. Use the original names and a
# registry mirror instead (containerd: certs.d/<host>/hosts.toml pointing
# at http://127.0.0.1:5000; Docker: pull from 127.0.0.1:5000 and tag).
set -euo pipefail
shopt -s inherit_errexit
umask 022
export LC_ALL=C

die() { echo "images/critest-images.sh: $*" >&2; exit 1; }
say() { echo "images/critest-images.sh: $*" >&2; }

[ "$(id -u)" = 0 ] || die "must run as root"
[ -r /run/cri-testbed/env ] && . /run/cri-testbed/env
REGISTRY=${CRI_TESTBED_REGISTRY:-127.0.0.1:5000}
DOCKER=/usr/bin/docker
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}
DIR=${CRITEST_IMAGES_DIR:-/var/lib/cri-testbed/critest-images}
SELF_SHA=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LIBDIR=/usr/lib/x86_64-linux-gnu

[ "$(dpkg --print-architecture)" = amd64 ] || die "only amd64 is supported"
"$DOCKER" version >/dev/null 2>&1 || die "Docker does not answer on $DOCKER_HOST (is the test bed up?)"
curl -fsS "http://$REGISTRY/v2/" >/dev/null || die "registry http://$REGISTRY does not answer (is the test bed up?)"
command -v gcc >/dev/null || die "gcc missing (hack/testbed.sh up installs it)"

mkdir -p "$DIR/debs"
WORK=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------------------
# Debian packages: downloaded once into $DIR/debs, unpacked into $WORK/pkg.

PACKAGES=(busybox procps libproc2-0 util-linux nginx apache2-bin libapr1 libaprutil1)
PKGROOT=$WORK/pkg
mkdir -p "$PKGROOT"

deb_of() { # PKG -> path of its cached .deb (newest), or nothing
    ls -1 "$DIR/debs/$1"_*.deb 2>/dev/null | sort -V | tail -1
}

fetch_debs() {
    local p missing=()
    for p in "${PACKAGES[@]}"; do [ -n "$(deb_of "$p")" ] || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "downloading ${missing[*]}"
    if ! (cd "$DIR/debs" && apt-get -q -o APT::Sandbox::User=root download "${missing[@]}") >"$WORK/apt.log" 2>&1; then
        apt-get -q update >>"$WORK/apt.log" 2>&1 || { cat "$WORK/apt.log" >&2; die "apt-get update failed"; }
        (cd "$DIR/debs" && apt-get -q -o APT::Sandbox::User=root download "${missing[@]}") >>"$WORK/apt.log" 2>&1 ||
            { cat "$WORK/apt.log" >&2; die "apt-get download ${missing[*]} failed"; }
    fi
}
fetch_debs
for f in "$DIR"/debs/*.deb; do # drop cached packages this script no longer uses
    case " ${PACKAGES[*]} " in *" $(basename "${f%%_*}") "*) ;; *) rm -f "$f" ;; esac
done
DEB_SUMS=$(for p in "${PACKAGES[@]}"; do f=$(deb_of "$p"); [ -n "$f" ] || die "no .deb for $p"; basename "$f"; dpkg-deb -x "$f" "$PKGROOT"; done)

# ---------------------------------------------------------------------------
# Helpers

json_str() {
    local s=$1
    s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\n'/\\n}
    printf '"%s"' "$s"
}
json_join() { local IFS=,; printf '%s' "$*"; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }

deterministic_tar() { # DIR OUT.tar
    local dir=$1 out=$2
    (cd "$dir" && find . -mindepth 1 -printf '%P\n' | sort) > "$WORK/filelist"
    tar --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --no-recursion -C "$dir" -T "$WORK/filelist" -cf "$out"
}

# install_elf ROOT FILE [DEST]: copy a binary (or shared object) from the
# unpacked packages into ROOT (at DEST, default its own path) with every
# library it needs. Libraries come from the unpacked packages first, else
# from the host (same Debian release); all land in $LIBDIR.
install_elf() {
    local root=$1 src=$2 dest=${3:-$2} line lib real
    [ -e "$PKGROOT$src" ] || die "$src not in the unpacked packages"
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$PKGROOT$src" "$root$dest"
    local out
    out=$(LD_LIBRARY_PATH=$PKGROOT$LIBDIR ldd "$PKGROOT$src" 2>&1) || die "ldd $src: $out"
    while read -r line; do
        case $line in
        *"not found"*) die "$src: $line" ;;
        *"=> /"*) lib=${line#*=> }; lib=${lib%% (*} ;;
        /*ld-linux*) lib=${line%% (*} ;;
        *) continue ;;
        esac
        real=$(readlink -f "$lib")
        mkdir -p "$root$LIBDIR"
        [ -e "$root$LIBDIR/$(basename "$lib")" ] || cp -L "$real" "$root$LIBDIR/$(basename "$lib")"
    done <<< "$out"
}

# ---------------------------------------------------------------------------
# Root filesystems (each fills directory $1)

# The base of every image: Debian's (dynamic) busybox with all its applets
# hard-linked in /bin, pgrep from
# procps and ipcs from util-linux (busybox lacks both; critest runs
# `pgrep sleep` and `ipcs -m`), the dynamic loader, /etc/passwd and group.
rootfs_base() {
    local r=$1 applet
    mkdir -p "$r/bin" "$r/usr/bin" "$r/usr/sbin" "$r/usr/local/bin" "$r/usr/lib64" "$r$LIBDIR" \
        "$r/etc" "$r/root" "$r/tmp" "$r/home" "$r/run" "$r/var/tmp" "$r/var/log" "$r/var/lib" "$r/var/spool"
    ln -s usr/lib "$r/lib"
    ln -s usr/lib64 "$r/lib64"
    ln -s usr/sbin "$r/sbin"
    ln -s ../run "$r/var/run"
    mkdir -p "$r/run/lock"
    ln -s ../run/lock "$r/var/lock"
    chmod 1777 "$r/tmp" "$r/var/tmp"
    chmod 0700 "$r/root"
    # Debian's dynamic busybox, not busybox-static: the static build prefers
    # its applets over $PATH (FEATURE_SH_STANDALONE), so `sh -c ls` would not
    # exec /bin/ls and critest's MaskedPaths spec (mask /bin/ls, expect
    # "Permission denied") could not pass.
    install_elf "$r" /bin/busybox
    chmod 0755 "$r/bin/busybox"
    for applet in $("$r/bin/busybox" --list); do
        [ "$applet" = busybox ] && continue
        # Hard links, as in the upstream busybox image: critest's MaskedPaths
        # spec masks /bin/ls, which must not mask busybox (and so sh) itself.
        ln "$r/bin/busybox" "$r/bin/$applet"
    done
    install_elf "$r" /usr/bin/pgrep
    install_elf "$r" /usr/bin/ipcs
    ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$r/usr/lib64/ld-linux-x86-64.so.2"
    # glibc dlopens libgcc_s for thread cancellation/unwinding (apache2 needs it).
    cp -L "$LIBDIR/libgcc_s.so.1" "$r$LIBDIR/libgcc_s.so.1"
    printf '%s\n' \
        'root:x:0:0:root:/root:/bin/sh' \
        'daemon:x:1:1:daemon:/usr/sbin:/bin/false' \
        'bin:x:2:2:bin:/bin:/bin/false' \
        'sys:x:3:3:sys:/dev:/bin/false' \
        'sync:x:4:100:sync:/bin:/bin/sync' \
        'mail:x:8:8:mail:/var/spool/mail:/bin/false' \
        'www-data:x:33:33:www-data:/var/www:/bin/false' \
        'operator:x:37:37:Operator:/var:/bin/false' \
        'nobody:x:65534:65534:nobody:/home:/bin/false' > "$r/etc/passwd"
    printf '%s\n' \
        'root:x:0:' 'daemon:x:1:' 'bin:x:2:' 'sys:x:3:' 'adm:x:4:' 'tty:x:5:' 'disk:x:6:' \
        'wheel:x:10:' 'mail:x:12:' 'www-data:x:33:' 'operator:x:37:' 'staff:x:50:' \
        'users:x:100:' 'nogroup:x:65534:' > "$r/etc/group"
    printf '%s\n' 'passwd: files' 'group: files' 'shadow: files' 'hosts: files dns' > "$r/etc/nsswitch.conf"
    chmod 0644 "$r/etc/passwd" "$r/etc/group" "$r/etc/nsswitch.conf"
}

# marker: one file /$MARKER, so that images with otherwise equal
# content get distinct IDs (like upstream's `ADD ${TEST} ${TEST}`).
marker() { : > "$1/$MARKER"; chmod 0644 "$1/$MARKER"; }

rootfs_predefined_group() {
    local r=$1
    mkdir -p "$r/etc" "$r/home/default-user"
    cp "$BASE_ROOT/etc/passwd" "$BASE_ROOT/etc/group" "$r/etc/"
    echo 'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh' >> "$r/etc/passwd"
    printf '%s\n' 'default-user:x:1000:' 'group-defined-in-image:x:50000:default-user' >> "$r/etc/group"
    chmod 0644 "$r/etc/passwd" "$r/etc/group"
}

rootfs_nginx() { # port in $NGINX_PORT
    local r=$1
    install_elf "$r" /usr/sbin/nginx
    mkdir -p "$r/etc/nginx" "$r/var/lib/nginx" "$r/var/log/nginx" "$r/usr/share/nginx/html"
    cat > "$r/etc/nginx/nginx.conf" <<EOF
user www-data;
worker_processes 1;
pid /var/run/nginx.pid;
error_log stderr notice;
events { worker_connections 256; }
http {
    types { text/html html htm; text/plain txt; }
    default_type application/octet-stream;
    access_log /dev/stdout;
    sendfile on;
    server {
        listen $NGINX_PORT;
        server_name localhost;
        root /usr/share/nginx/html;
        index index.html;
    }
}
EOF
    printf '%s\n' '<!DOCTYPE html>' '<html><head><title>Welcome to nginx!</title></head>' \
        '<body><h1>Welcome to nginx!</h1></body></html>' > "$r/usr/share/nginx/html/index.html"
    chmod 0644 "$r/etc/nginx/nginx.conf" "$r/usr/share/nginx/html/index.html"
}

rootfs_httpd() {
    local r=$1 m
    install_elf "$r" /usr/sbin/apache2
    for m in mpm_event authz_core dir mime; do
        install_elf "$r" "/usr/lib/apache2/modules/mod_$m.so"
    done
    mkdir -p "$r/usr/local/bin" "$r/etc/apache2"
    ln -s ../../sbin/apache2 "$r/usr/local/bin/httpd"
    mkdir -p "$r/etc/apache2" "$r/var/www/html" "$r/run/apache2"
    cat > "$r/etc/apache2/apache2.conf" <<'EOF'
ServerRoot "/etc/apache2"
ServerName localhost
Listen 80
PidFile /run/apache2/httpd.pid
Mutex file:/run/apache2 default
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule dir_module /usr/lib/apache2/modules/mod_dir.so
LoadModule mime_module /usr/lib/apache2/modules/mod_mime.so
User www-data
Group www-data
ErrorLog /proc/self/fd/2
LogLevel warn
LogFormat "%h %l %u %t \"%r\" %>s %b" common
CustomLog /proc/self/fd/1 common
TypesConfig /etc/apache2/mime.types
DocumentRoot "/var/www/html"
DirectoryIndex index.html
<Directory />
    AllowOverride None
    Require all denied
</Directory>
<Directory "/var/www/html">
    Require all granted
</Directory>
EOF
    printf '%s\n' 'text/html html htm' 'text/plain txt' > "$r/etc/apache2/mime.types"
    echo '<html><body><h1>It works!</h1></body></html>' > "$r/var/www/html/index.html"
    chmod 0644 "$r/etc/apache2/apache2.conf" "$r/etc/apache2/mime.types" "$r/var/www/html/index.html"
}

NNP_SRC='#include <stdio.h>
#include <unistd.h>
/* Prints the effective uid; installed setuid root, so it shows whether
 * no_new_privs kept the setuid bit from taking effect. */
int main(void) { printf("Effective uid: %d\n", (int)geteuid()); return 0; }'

rootfs_nonewprivs() {
    local r=$1
    mkdir -p "$r/usr/local/bin"
    printf '%s\n' "$NNP_SRC" > "$WORK/nnp.c"
    gcc -static -Os -s -o "$r/usr/local/bin/nnp" "$WORK/nnp.c"
    chmod 4755 "$r/usr/local/bin/nnp"
}

# registry_config_digest REGISTRY/PATH:TAG -> config digest (= image ID) of the
# schema2 manifest the registry serves for it, or nothing.
registry_manifest() {
    local ref=${1#"$REGISTRY"/}
    curl -fsS -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$REGISTRY/v2/${ref%:*}/manifests/${ref##*:}" "${@:2}" 2>/dev/null || true
}
registry_config_digest() {
    registry_manifest "$1" | tr -d ' \n\t' | sed -n 's/.*"config":{[^}]*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p'
}
registry_manifest_digest() {
    registry_manifest "$1" -I | tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: *//p'
}

# ---------------------------------------------------------------------------
# Image assembly: base layer + one image layer, written as a docker-archive.

TOOLS_KEY=$({ tar --version | sed -n 1p; gcc --version | sed -n 1p; ldd --version | sed -n 1p; } | sha256sum | cut -c1-16)

BASE_ROOT=$WORK/base-root
mkdir -p "$BASE_ROOT"
rootfs_base "$BASE_ROOT"
deterministic_tar "$BASE_ROOT" "$WORK/base.tar"
BASE_DIFF=$(sha256 "$WORK/base.tar")

declare -a KEEP=()    # archives of this run; older ones are removed at the end

# image NAME --rootfs FN [--env VAR=VAL for FN] [--user U] [--cmd JSON]
#            [--entrypoint JSON] [--expose P/proto] [--stop-signal S] --ref PATH:TAG...
image() {
    local name=$1; shift
    local rootfs_fn="" entrypoint=null cmd=null user="" stop_signal="" fnenv=""
    local -a refs=() exposes=()
    while [ $# -gt 0 ]; do
        case $1 in
        --rootfs) rootfs_fn=$2 ;;
        --fnenv) fnenv=$2 ;;
        --ref) refs+=("$REGISTRY/$2") ;;
        --entrypoint) entrypoint=$2 ;;
        --cmd) cmd=$2 ;;
        --user) user=$2 ;;
        --expose) exposes+=("$2") ;;
        --stop-signal) stop_signal=$2 ;;
        *) die "image $name: unknown option $1" ;;
        esac
        shift 2
    done
    local key
    key=$({ echo "$SELF_SHA $TOOLS_KEY $BASE_DIFF"; echo "$DEB_SUMS"; declare -f "$rootfs_fn" || true
            printf '%s\n' "$name" "$fnenv" "$entrypoint" "$cmd" "$user" "$stop_signal" "${refs[@]}" "${exposes[@]}"
          } | sha256sum | cut -c1-16)
    local archive="$DIR/$name-$key.tar" image_id
    KEEP+=("$archive")
    if [ -s "$archive" ] && [ -s "$archive.id" ]; then
        image_id=$(cat "$archive.id")
    else
        say "building $name"
        local d="$WORK/img-$name"
        mkdir -p "$d/rootfs" "$d/archive"
        if [ -n "$rootfs_fn" ]; then
            # A plain statement (not under || or if), so that errexit stays in
            # force inside the rootfs function and any failure aborts the build.
            (   [ -z "$fnenv" ] || export "${fnenv?}"
                "$rootfs_fn" "$d/rootfs" )
        fi
        # Layers: the shared base, plus the image's own unless it is empty.
        local -a diffs=("$BASE_DIFF")
        local diff=""
        if [ -n "$(ls -A "$d/rootfs")" ]; then
            deterministic_tar "$d/rootfs" "$d/layer.tar"
            diff=$(sha256 "$d/layer.tar")
            diffs+=("$diff")
        fi
        local -a expose_json=() e
        for e in "${exposes[@]}"; do expose_json+=("$(json_str "$e"):{}"); done
        local cfg="{\"User\":$(json_str "$user"),\"Env\":[$(json_str "PATH=$DEFAULT_PATH")]"
        cfg+=",\"Entrypoint\":$entrypoint,\"Cmd\":$cmd,\"WorkingDir\":\"\""
        [ ${#expose_json[@]} -eq 0 ] || cfg+=",\"ExposedPorts\":{$(json_join "${expose_json[@]}")}"
        [ -z "$stop_signal" ] || cfg+=",\"StopSignal\":$(json_str "$stop_signal")"
        cfg+="}"
        local -a dj=() hj=() lj=() x
        for x in "${diffs[@]}"; do dj+=("\"sha256:$x\""); lj+=("\"$x/layer.tar\""); done
        hj+=("{\"created\":\"1970-01-01T00:00:00Z\",\"created_by\":\"cri-testbed images/critest-images.sh base\"}")
        [ -z "$diff" ] || hj+=("{\"created\":\"1970-01-01T00:00:00Z\",\"created_by\":$(json_str "cri-testbed images/critest-images.sh $name")}")
        local diff_json hist_json; diff_json=$(json_join "${dj[@]}"); hist_json=$(json_join "${hj[@]}")
        printf '%s' "{\"architecture\":\"amd64\",\"os\":\"linux\",\"created\":\"1970-01-01T00:00:00Z\",\"config\":$cfg,\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[$diff_json]},\"history\":[$hist_json]}" > "$d/config.json"
        if command -v jq >/dev/null 2>&1; then
            jq -e . "$d/config.json" >/dev/null || die "image $name: config is not valid JSON"
        fi
        image_id=$(sha256 "$d/config.json")
        mkdir -p "$d/archive/$BASE_DIFF"
        cp "$WORK/base.tar" "$d/archive/$BASE_DIFF/layer.tar"
        if [ -n "$diff" ]; then mkdir -p "$d/archive/$diff"; mv "$d/layer.tar" "$d/archive/$diff/layer.tar"; fi
        mv "$d/config.json" "$d/archive/$image_id.json"
        local -a tag_json=() t
        for t in "${refs[@]}"; do tag_json+=("$(json_str "$t")"); done
        printf '[{"Config":"%s.json","RepoTags":[%s],"Layers":[%s]}]' \
            "$image_id" "$(json_join "${tag_json[@]}")" "$(json_join "${lj[@]}")" > "$d/archive/manifest.json"
        deterministic_tar "$d/archive" "$archive.tmp"
        mv "$archive.tmp" "$archive"
        image_id="sha256:$image_id"
        echo "$image_id" > "$archive.id"
        rm -rf "$d"
    fi
    # Push every ref whose manifest in the registry is not already this image.
    # Docker only carries the image for the push: its tags are removed again
    # afterwards, so a Docker-backed runtime under test does not find
    # REGISTRY/... tags next to the upstream names critest pulls (critest
    # compares RepoTags exactly).
    local ref have loaded=false
    for ref in "${refs[@]}"; do
        have=$(registry_config_digest "$ref")
        if [ "$have" = "$image_id" ]; then
            printf 'present %s  (image %s, manifest %s)\n' "$ref" "$image_id" "$(registry_manifest_digest "$ref")"
            continue
        fi
        if ! $loaded; then
            "$DOCKER" load -i "$archive" >"$WORK/load.log" 2>&1 || { cat "$WORK/load.log" >&2; die "docker load $archive failed"; }
            loaded=true
        fi
        "$DOCKER" push "$ref" >"$WORK/push.log" 2>&1 || { cat "$WORK/push.log" >&2; die "docker push $ref failed"; }
        [ "$(registry_config_digest "$ref")" = "$image_id" ] || die "registry does not serve $image_id as $ref after the push"
        printf 'pushed %s  (image %s, manifest %s)\n' "$ref" "$image_id" "$(registry_manifest_digest "$ref")"
    done
    if $loaded; then
        for ref in "${refs[@]}"; do "$DOCKER" rmi "$ref" >/dev/null 2>&1 || true; done
    fi
}

# ---------------------------------------------------------------------------
# Images. E2E = registry.k8s.io/e2e-test-images, CRIT = gcr.io/k8s-staging-cri-tools.

E2E=e2e-test-images
CRIT=k8s-staging-cri-tools

image e2e-busybox --rootfs : --ref "$E2E/busybox:1.29-2" --cmd '["sh"]'
image e2e-nginx --rootfs rootfs_nginx --fnenv NGINX_PORT=80 --ref "$E2E/nginx:1.14-2" \
    --cmd '["nginx","-g","daemon off;"]' --expose 80/tcp --stop-signal SIGQUIT
image hostnet-nginx --rootfs rootfs_nginx --fnenv NGINX_PORT=12003 --ref "$CRIT/hostnet-nginx-amd64:latest" \
    --cmd '["nginx","-g","daemon off;"]' --expose 12003/tcp --stop-signal SIGQUIT
image e2e-httpd --rootfs rootfs_httpd --ref "$E2E/httpd:2.4.39-4" \
    --cmd '["httpd","-D","FOREGROUND"]' --expose 80/tcp --stop-signal SIGWINCH
image e2e-nonewprivs --rootfs rootfs_nonewprivs --ref "$E2E/nonewprivs:1.3" \
    --entrypoint '["/usr/local/bin/nnp"]'
image test-image-predefined-group --rootfs rootfs_predefined_group \
    --ref "$CRIT/test-image-predefined-group:latest" --user 1000 --cmd '["sh"]'

user_image() { # NAME USER
    image "$1" --rootfs marker --fnenv "MARKER=$1" --ref "$CRIT/$1:latest" --user "$2" --cmd '["sh"]'
}
user_image test-image-user-uid 1002
user_image test-image-user-username www-data
user_image test-image-user-uid-group 1003:1004
user_image test-image-user-username-group www-data:1004

for n in test-image-latest test-image-1 test-image-2 test-image-3 test-image-digest; do
    image "$n" --rootfs marker --fnenv "MARKER=$n" --ref "$CRIT/$n:latest" --cmd '["sh"]'
done
image test-image-tag-test --rootfs marker --fnenv MARKER=test --ref "$CRIT/test-image-tag:test" --cmd '["sh"]'
image test-image-tag-all --rootfs marker --fnenv MARKER=all --ref "$CRIT/test-image-tag:all" --cmd '["sh"]'
image test-image-tags --rootfs marker --fnenv MARKER=same-image \
    --ref "$CRIT/test-image-tags:1" --ref "$CRIT/test-image-tags:2" --ref "$CRIT/test-image-tags:3" --cmd '["sh"]'

# Remove archives that no longer correspond to an input set.
for f in "$DIR"/*.tar; do
    [ -e "$f" ] || continue
    case " ${KEEP[*]} " in *" $f "*) ;; *) rm -f "$f" "$f.id" ;; esac
done

say "done; not servable: gcr.io/$CRIT/test-image-digest@sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf (upstream manifest digest)"
