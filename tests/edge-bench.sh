#!/usr/bin/env bash
# Edge footprint and start-up (docs/edge.md; `make edge-bench`):
#   tests/edge-bench.sh BUNDLE.tar.zst BUNDLE_BINARY
# the bundle binary's size, the bundle's, the installed size; then from a fresh home
# with a cold page cache (as root): `warden run` of a trivial tool, `warden serve` until
# /readyz answers, and the server's idle resident memory (with its workers').
set -euo pipefail
bundle=$1
binary=$2
port=${EDGE_BENCH_PORT:-18089}
work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f s", b - a }'; }
cold() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; else echo "(not root: page cache left warm)"; fi
}

echo "bundle binary (stripped, no compiler): $(mib "$(stat -c %s "$binary")")"
echo "bundle file:                           $(mib "$(stat -c %s "$bundle")")"
./target/debug/warden bundle install "$bundle" "$work/opt" > /dev/null
echo "installed:                             $(mib "$(du -sb "$work/opt" | cut -f1)")"
warden=$work/opt/bin/warden
cat > "$work/hello.py" <<'EOF'
def hello(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"
EOF

cold
start=$(now)
"$warden" --home "$work/home-run" run "$work/hello.py" --args '{"name": "edge"}' > /dev/null
echo "run, fresh home, cold cache:           $(secs "$start" "$(now)")"

cold
start=$(now)
"$warden" --home "$work/home-serve" serve --listen "127.0.0.1:$port" --cold 2> "$work/serve.log" &
server=$!
until curl -sf "http://127.0.0.1:$port/readyz" > /dev/null; do
  if ! kill -0 "$server" 2> /dev/null; then cat "$work/serve.log"; exit 1; fi
  sleep 0.01
done
echo "serve ready, fresh home, cold cache:   $(secs "$start" "$(now)")"
sleep 3
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2> /dev/null || echo 0; }
own=$(rss_kib "$server")
all=$own
for child in $(pgrep -P "$server" || true); do all=$((all + $(rss_kib "$child"))); done
echo "serve idle RSS:                        $(mib $((own * 1024))) (with its workers: $(mib $((all * 1024))))"
