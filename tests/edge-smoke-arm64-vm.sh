#!/usr/bin/env bash
# Smoke test of an arm64 bundle in a full-system arm64 VM on this x86-64 machine (docs/edge.md:
# `make edge-smoke-arm64`; too slow for CI):
#   tests/edge-smoke-arm64-vm.sh BUNDLE.tar.zst HOST_WARDEN WORK_DIR
# qemu-system-aarch64 (TCG) emulates a Raspberry Pi 4-like machine: `-M virt -cpu
# cortex-a72` (Armv8.0, no LSE atomics), 2 cores, 3 GiB. It boots Debian's arm64 kernel
# (Linux 6.12 or later: Warden's workers need Landlock ABI 6) with an initramfs made here:
# busybox, the arm64 C library, the bundle and the bundle's own warden. In the VM, /init
# has that warden verify and install the bundle, runs a trivial tool with the installed
# warden (`warden run`, fresh home), then starts `warden serve`, registers a tool and
# calls it over HTTP; every worker confines itself for real (Landlock + seccomp), as on a
# device. The result comes back on the serial console as `EDGE:` lines, which this script
# checks; it fails when a step failed, the VM never said PASS, or it ran out of time
# (EDGE_VM_TIMEOUT seconds, default 3600).
# Kernel and busybox come from the host's Debian package lists for arm64 (added when
# missing) and are kept in WORK_DIR; EDGE_VM_KERNEL_DEB=FILE uses another kernel package,
# EDGE_VM_APPEND adds to the kernel's command line (`lsm=yama` shows a failing run).
set -euo pipefail
bundle=$(realpath "$1")
host_warden=$(realpath "$2")
mkdir -p "$3"
dir=$(realpath "$3")
sysroot=/usr/aarch64-linux-gnu
timeout_secs=${EDGE_VM_TIMEOUT:-3600}

# Host tools: install the Debian packages when missing (as root), else say which.
missing=()
command -v qemu-system-aarch64 > /dev/null || missing+=(qemu-system-arm)
command -v cpio > /dev/null || missing+=(cpio)
command -v zstd > /dev/null || missing+=(zstd)
command -v aarch64-linux-gnu-readelf > /dev/null || missing+=(binutils-aarch64-linux-gnu)
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || missing+=(libc6-arm64-cross)
apt_updated=
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "edge-smoke-arm64: missing ${missing[*]}: run 'sudo apt-get install ${missing[*]}'" >&2
    exit 2
  fi
  echo "installing ${missing[*]}"
  apt-get update -q
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Check the bundle on the build host first, for the target it claims.
"$host_warden" bundle verify "$bundle" --target aarch64-unknown-linux-gnu > /dev/null
echo "verified on the host (x86-64) for aarch64-unknown-linux-gnu"

# arm64 packages: Debian's kernel (the newest 6.12+ the package lists offer) and
# busybox-static, downloaded once into WORK_DIR/debs.
arm64_lists() {
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    [ "$(id -u)" -eq 0 ] || { echo "edge-smoke-arm64: run 'sudo dpkg --add-architecture arm64 && sudo apt-get update'" >&2; exit 2; }
    dpkg --add-architecture arm64
    apt_updated=
  fi
  if [ -z "$apt_updated" ] && ! apt-cache show busybox-static:arm64 > /dev/null 2>&1; then
    apt-get update -q
    apt_updated=1
  fi
}
mkdir -p "$dir/debs"
kernel_deb=${EDGE_VM_KERNEL_DEB:-}
if [ -z "$kernel_deb" ]; then
  kernel_deb=$(ls "$dir"/debs/linux-image-*_arm64.deb 2> /dev/null | sort -V | tail -1 || true)
fi
if [ -z "$kernel_deb" ]; then
  arm64_lists
  # Signed images of the generic flavour, e.g. linux-image-6.12.117+deb12-arm64.
  package=$(apt-cache search --names-only '^linux-image-[0-9]+\.[0-9]+\.[0-9]+.*-arm64$' \
    | cut -d' ' -f1 | grep -Ev -- '-(cloud|rt)-arm64$|-unsigned$|-dbg$' | sort -V | tail -1)
  [ -n "$package" ] || { echo "edge-smoke-arm64: no arm64 kernel package in the package lists" >&2; exit 1; }
  echo "downloading $package:arm64"
  (cd "$dir/debs" && apt-get download -q "$package:arm64")
  kernel_deb=$(ls "$dir"/debs/"$package"_*_arm64.deb)
fi
busybox_deb=$(ls "$dir"/debs/busybox-static_*_arm64.deb 2> /dev/null | tail -1 || true)
if [ -z "$busybox_deb" ]; then
  arm64_lists
  (cd "$dir/debs" && apt-get download -q busybox-static:arm64)
  busybox_deb=$(ls "$dir"/debs/busybox-static_*_arm64.deb | tail -1)
fi

# The kernel: its Image (QEMU loads a plain or gzip'd one; an EFI zboot image is
# unwrapped here), and its configuration: Landlock built in, and in the LSM list (else
# the command line adds it).
rm -rf "$dir/kernel" && mkdir -p "$dir/kernel"
dpkg-deb -x "$kernel_deb" "$dir/kernel/deb"
vmlinuz=$(ls "$dir"/kernel/deb/boot/vmlinuz-* | head -1)
config=$(ls "$dir"/kernel/deb/boot/config-* | head -1)
release=${vmlinuz##*/vmlinuz-}
case "$release" in
  [0-5].* | 6.[0-9].* | 6.1[01].*)
    echo "edge-smoke-arm64: $release is older than Linux 6.12: Warden's workers need Landlock ABI 6" >&2
    exit 1 ;;
esac
image=$dir/kernel/Image
if [ "$(head -c 2 "$vmlinuz" | od -An -tx1 | tr -d ' ')" = 4d5a ] && [ "$(dd if="$vmlinuz" bs=1 skip=4 count=4 status=none)" = zimg ]; then
  # EFI zboot: the payload's offset and size at 8 and 12, its compression at 24.
  offset=$(od -An -tu4 -j8 -N4 "$vmlinuz" | tr -d ' ')
  size=$(od -An -tu4 -j12 -N4 "$vmlinuz" | tr -d ' ')
  comp=$(dd if="$vmlinuz" bs=1 skip=24 count=8 status=none | tr -d '\0')
  case "$comp" in
    gzip) unpack="gzip -dc" ;;
    zstd) unpack="zstd -dcq" ;;
    xz | lzma) unpack="xz -dc" ;;
    *) echo "edge-smoke-arm64: EFI zboot image compressed with '$comp': not handled" >&2; exit 1 ;;
  esac
  tail -c +$((offset + 1)) "$vmlinuz" | head -c "$size" | $unpack > "$image"
else
  cp "$vmlinuz" "$image"
fi
grep -qx 'CONFIG_SECURITY_LANDLOCK=y' "$config" \
  || { echo "edge-smoke-arm64: $release is built without Landlock" >&2; exit 1; }
lsm=$(sed -n 's/^CONFIG_LSM="\(.*\)"$/\1/p' "$config")
cmdline="console=ttyAMA0 panic=-1 quiet"
case ",$lsm," in
  *,landlock,*) ;;
  *) cmdline="$cmdline lsm=landlock,$lsm" ;;
esac
cmdline="$cmdline ${EDGE_VM_APPEND:-}"

# The initramfs: busybox, the C library the bundle's warden asks for (at the loader's
# paths), the bundle, that warden taken out of it, a tool, and /init.
root=$dir/initramfs
rm -rf "$root" && mkdir -p "$root"/{bin,lib/aarch64-linux-gnu,proc,sys,dev,tmp,root,opt,stage,etc}
dpkg-deb -x "$busybox_deb" "$dir/kernel/busybox"
cp "$dir/kernel/busybox/bin/busybox" "$root/bin/busybox"
zstd -dcq "$bundle" | tar -x -C "$root/stage" bin/warden
mv "$root/stage/bin/warden" "$root/stage/warden" && rmdir "$root/stage/bin"
file -b "$root/stage/warden" | grep -q 'ARM aarch64' \
  || { echo "the bundle's binary is not an arm64 executable: $(file -b "$root/stage/warden")" >&2; exit 1; }
cp "$sysroot/lib/ld-linux-aarch64.so.1" "$root/lib/"
for lib in $(aarch64-linux-gnu-readelf -d "$root/stage/warden" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  cp -L "$sysroot/lib/$lib" "$root/lib/aarch64-linux-gnu/"
done
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
cp "$bundle" "$root/stage/"
cat > "$root/stage/add.py" << 'EOF'
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
EOF
cat > "$root/init" << 'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t securityfs securityfs /sys/kernel/security
mount -t tmpfs tmpfs /tmp
ip link set lo up
say() { echo "EDGE: $*"; }
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
oneline() { if [ $# -gt 0 ]; then tr -s '\n ' '  ' < "$1"; else tr -s '\n ' '  '; fi; }
failed=0
fail() { say "FAIL $*"; failed=1; }
finish() {
  [ "$failed" = 0 ] && say "RESULT PASS" || say "RESULT FAIL"
  sync
  poweroff -f
}
# The worker's own account of its confinement (a debug line of warden::worker::child).
confined() {
  line=$(grep -o 'worker confined: .*' "$1" | head -1)
  if [ -n "$line" ]; then say "PASS $2: $line"; else fail "$2: no worker said it was confined"; fi
}

say "booted in $(now) s: Linux $(uname -r) $(uname -m), $(nproc) cores," \
  "$(awk '/MemTotal/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo)," \
  "CPU features:$(grep -m1 '^Features' /proc/cpuinfo | cut -d: -f2)"
lsm=$(cat /sys/kernel/security/lsm)
case ",$lsm," in
  *,landlock,*) say "PASS landlock is an active LSM ($lsm)" ;;
  *) fail "landlock is not an active LSM ($lsm)" ;;
esac

bundle=$(ls /stage/*.tar.zst)
t=$(now)
if /stage/warden bundle install "$bundle" /opt/warden > /tmp/install.out 2>&1; then
  say "PASS install: the bundle's own warden verified and installed it in $(since "$t")"
else
  fail "install, after $(since "$t"): $(tail -3 /tmp/install.out | oneline)"
  finish
fi
warden=/opt/warden/bin/warden
export WARDEN_LOG=warn,warden::worker::child=debug NO_COLOR=1

t=$(now)
if "$warden" --home /tmp/home-run run /stage/add.py --args '{"a": 2, "b": 40}' --json \
  > /tmp/run.out 2> /tmp/run.err \
  && grep -q '"status": *"ok"' /tmp/run.out && grep -q '"value": *42' /tmp/run.out; then
  say "PASS warden run, fresh home: $(since "$t"): $(oneline /tmp/run.out)"
else
  fail "warden run, after $(since "$t"): $(oneline /tmp/run.out) $(tail -3 /tmp/run.err | oneline)"
fi
confined /tmp/run.err "warden run"

home=/tmp/home-serve
key=$("$warden" --home "$home" tenant create edge --json | sed -n 's/.*"api_key": *"\([^"]*\)".*/\1/p')
[ -n "$key" ] || { fail "tenant create gave no key"; finish; }
api=http://127.0.0.1:8080
t=$(now)
"$warden" --home "$home" serve --listen 127.0.0.1:8080 --cold 2> /tmp/serve.log &
server=$!
until wget -q -O /dev/null "$api/readyz" 2> /dev/null; do
  if ! kill -0 "$server" 2> /dev/null; then
    fail "warden serve exited: $(tail -3 /tmp/serve.log | oneline)"
    finish
  fi
  sleep 0.2
done
say "PASS warden serve ready: $(since "$t")"

post() { # PATH JSON: the answer's body, or wget's error
  wget -q -O - --header "authorization: Bearer $key" \
    --header 'content-type: application/json' --post-data "$2" "$api$1" 2>&1
}
t=$(now)
registered=$(post /v1/tools '{"source": "def add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n"}')
id=$(echo "$registered" | grep -o '"id": *"tool_[0-9a-f]*"' | head -1 | grep -o 'tool_[0-9a-f]*')
if [ -n "$id" ]; then
  say "PASS registered $id: $(since "$t")"
  t=$(now)
  called=$(post "/v1/tools/$id/run" '{"arguments": {"a": 20, "b": 22}}')
  if echo "$called" | grep -q '"status": *"ok"' && echo "$called" | grep -q '"value": *42'; then
    say "PASS call through serve: $(since "$t"): $called"
  else
    fail "call through serve, after $(since "$t"): $called $(grep -i 'error\|warn' /tmp/serve.log | tail -3 | oneline)"
  fi
  t=$(now)
  called=$(post "/v1/tools/$id/run" '{"arguments": {"a": 1, "b": 2}}')
  if echo "$called" | grep -q '"value": *3'; then
    say "PASS second call through serve: $(since "$t")"
  else
    fail "second call through serve, after $(since "$t"): $called"
  fi
else
  fail "registering, after $(since "$t"): $registered $(grep -i 'error\|warn' /tmp/serve.log | tail -3 | oneline)"
fi
confined /tmp/serve.log "warden serve"
# The kernel's view of each worker process (`warden __worker`): no_new_privs and the
# seccomp filter mode (2) of the one that served the calls; the spare waits unconfined
# until it is assigned.
seccomp_workers=0
for status in /proc/[0-9]*/status; do
  pid=${status#/proc/}; pid=${pid%/status}
  grep -q '__worker' "/proc/$pid/cmdline" 2> /dev/null || continue
  fields=$(grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters|Threads):' "$status" | oneline)
  say "worker $pid: $fields"
  grep -q '^Seccomp:[[:space:]]*2' "$status" && seccomp_workers=$((seccomp_workers + 1))
done
if [ "$seccomp_workers" -gt 0 ]; then
  say "PASS $seccomp_workers worker(s) under a seccomp filter, by /proc/PID/status"
else
  fail "no worker process under a seccomp filter"
fi
kill "$server" 2> /dev/null
finish
EOF
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$dir/initramfs.cpio.gz"
echo "initramfs: $(du -m "$dir/initramfs.cpio.gz" | cut -f1) MiB; kernel $release (LSMs $lsm)"

# The VM: its serial console is this script's output (and WORK_DIR/console.log).
echo "booting qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 3G (TCG), up to $timeout_secs s"
start=$(date +%s.%N)
set +e
timeout "$timeout_secs" qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 3G \
  -accel tcg,thread=multi -display none -monitor none -serial stdio -nic none -no-reboot \
  -kernel "$image" -initrd "$dir/initramfs.cpio.gz" -append "$cmdline" < /dev/null \
  | tee "$dir/console.log"
status=${PIPESTATUS[0]}
set -e
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
if [ "$status" = 124 ]; then
  echo "FAILED: the VM did not finish within $timeout_secs s" >&2
  exit 1
fi
if [ "$status" != 0 ]; then
  echo "FAILED: qemu-system-aarch64 exited with $status" >&2
  exit 1
fi
if tr -d '\r' < "$dir/console.log" | grep -q '^EDGE: FAIL'; then
  echo "FAILED: in the arm64 VM (after $elapsed s):" >&2
  tr -d '\r' < "$dir/console.log" | grep '^EDGE: FAIL' >&2
  exit 1
fi
if ! tr -d '\r' < "$dir/console.log" | grep -q '^EDGE: RESULT PASS'; then
  echo "FAILED: the arm64 VM never reported its result (after $elapsed s)" >&2
  exit 1
fi
echo "arm64 VM smoke test passed in $elapsed s (boot to power-off)"
