#!/usr/bin/env bash
# Smoke test of an arm64 bundle on this x86-64 machine (README "Edge deployment";
# `make edge-smoke-arm64`; too slow for CI):
#   tests/edge-smoke-arm64.sh BUNDLE.tar.zst HOST_WARDEN
# Every arm64 process runs under qemu-aarch64-static as a Raspberry Pi 4 (`-cpu
# cortex-a72`: Armv8.0, no LSE atomics). The bundle's own warden verifies and installs
# it into a temporary folder; the installed warden runs a trivial tool (`warden run`),
# then `warden serve` registers one and answers a call. `warden serve` starts worker
# processes from its own binary, so the script runs in a user and mount namespace of its
# own with a private binfmt_misc (Linux 6.7+) that hands arm64 executables to QEMU:
# nothing outside the namespace sees it.
set -euo pipefail
bundle=$(realpath "$1")
host_warden=$(realpath "$2")
qemu=$(command -v qemu-aarch64-static || true)
sysroot=/usr/aarch64-linux-gnu
if [ -z "$qemu" ] || [ ! -e "$sysroot/lib/ld-linux-aarch64.so.1" ]; then
  echo "edge-smoke-arm64: needs qemu-aarch64-static and the arm64 C library:" \
    "apt-get install qemu-user-static gcc-aarch64-linux-gnu" >&2
  exit 2
fi
port=${EDGE_SMOKE_PORT:-18090}

if [ "${EDGE_SMOKE_INSIDE:-}" != 1 ]; then
  # Check the bundle on the build host first, for the target it claims.
  "$host_warden" bundle verify "$bundle" --target aarch64-unknown-linux-gnu > /dev/null
  echo "verified on the host (x86-64) for aarch64-unknown-linux-gnu"
  exec env EDGE_SMOKE_INSIDE=1 unshare --user --map-root-user --mount -- "$0" "$@"
fi

work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2> /dev/null || true; wait "$server" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# arm64 ELF executables go to QEMU as a Cortex-A72 (the usual qemu-aarch64 magic).
cat > "$work/qemu-a72" << EOF
#!/bin/sh
exec $qemu -cpu cortex-a72 -L $sysroot "\$@"
EOF
chmod +x "$work/qemu-a72"
mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
echo ":warden-aarch64:M::$magic:$mask:$work/qemu-a72:" > /proc/sys/fs/binfmt_misc/register

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f s", b - a }'; }

mkdir "$work/unpacked"
zstd -dcq "$bundle" | tar -x -C "$work/unpacked" bin/warden
file -b "$work/unpacked/bin/warden" | grep -q 'ARM aarch64' \
  || { echo "the bundle's binary is not an arm64 executable: $(file -b "$work/unpacked/bin/warden")" >&2; exit 1; }
start=$(now)
"$work/unpacked/bin/warden" bundle install "$bundle" "$work/opt" > /dev/null
echo "installed by its own warden under QEMU: $(secs "$start" "$(now)")"
warden=$work/opt/bin/warden

cat > "$work/add.py" << 'EOF'
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
EOF

failed=0
# QEMU's user mode runs a thread of its own (RCU) in every process it emulates, and
# Warden confines a worker only while it has one thread: under QEMU every call fails so.
explain() {
  if grep -q 'refusing to confine a process with 2 threads' "$1"; then
    echo "  (QEMU user mode adds a thread of its own to each process, and a worker is confined" \
      "only while it has one: a call needs a real arm64 device or a full VM)" >&2
  fi
}
start=$(now)
if out=$("$warden" --home "$work/home-run" run "$work/add.py" --args '{"a": 2, "b": 40}' --json 2> "$work/run.err") \
  && echo "$out" | grep -q '"status": *"ok"' && echo "$out" | grep -q '"value": *42'; then
  echo "warden run, fresh home: $(secs "$start" "$(now)"): $out"
else
  echo "FAILED: warden run, after $(secs "$start" "$(now)"): $out $(cat "$work/run.err")" >&2
  explain "$work/run.err"
  failed=1
fi

key=$("$warden" --home "$work/home-serve" tenant create edge --json | sed -n 's/.*"api_key": *"\([^"]*\)".*/\1/p')
[ -n "$key" ] || { echo "tenant create gave no key" >&2; exit 1; }
start=$(now)
"$warden" --home "$work/home-serve" serve --listen "127.0.0.1:$port" --cold 2> "$work/serve.log" &
server=$!
until curl -sf "http://127.0.0.1:$port/readyz" > /dev/null; do
  if ! kill -0 "$server" 2> /dev/null; then cat "$work/serve.log" >&2; exit 1; fi
  sleep 0.1
done
echo "warden serve ready: $(secs "$start" "$(now)")"
start=$(now)
registered=$(curl -s --max-time 600 -H "authorization: Bearer $key" -H 'content-type: application/json' \
  --data-binary '{"source": "def add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n"}' \
  "http://127.0.0.1:$port/v1/tools")
id=$(echo "$registered" | grep -o '"id": *"tool_[0-9a-f]*"' | head -1 | grep -o 'tool_[0-9a-f]*')
[ -n "$id" ] || { echo "FAILED: registering: $registered" >&2; grep -i 'error\|warn' "$work/serve.log" | tail -3 >&2; explain "$work/serve.log"; exit 1; }
echo "registered $id: $(secs "$start" "$(now)")"
start=$(now)
called=$(curl -s --max-time 600 -H "authorization: Bearer $key" -H 'content-type: application/json' \
  --data-binary '{"arguments": {"a": 20, "b": 22}}' "http://127.0.0.1:$port/v1/tools/$id/run")
if echo "$called" | grep -q '"status": *"ok"' && echo "$called" | grep -q '"value": *42'; then
  echo "call through serve: $(secs "$start" "$(now)"): $called"
else
  echo "FAILED: call through serve, after $(secs "$start" "$(now)"): $called" >&2
  grep -i 'error\|warn' "$work/serve.log" | tail -3 >&2
  explain "$work/serve.log"
  failed=1
fi
[ "$failed" = 0 ] || exit 1
echo "arm64 smoke test passed"
