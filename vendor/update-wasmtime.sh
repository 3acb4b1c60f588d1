#!/bin/sh
# Re-creates vendor/wasmtime: the pristine wasmtime crate of VERSION (default: the
# pinned one) with Warden's two patches applied. Use it to check the vendored tree, or to move
# to a newer wasmtime (then pin the same version in Cargo.toml, fix any rejected hunk by
# hand, and regenerate the patch as vendor/README.md says).
set -eu
VERSION=${1:-48.0.8}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
: > "$tmp/src/lib.rs"
cat > "$tmp/Cargo.toml" <<TOML
[package]
name = "fetch-wasmtime"
version = "0.0.0"
edition = "2021"

[dependencies]
wasmtime = "=$VERSION"
TOML
(cd "$tmp" && cargo fetch --quiet)
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"wasmtime-$VERSION" | head -n 1)
rm -rf "$here/wasmtime"
cp -r "$src" "$here/wasmtime"
for p in "$here"/wasmtime-initial-state.patch "$here"/wasmtime-slot-reset.patch; do
    patch --quiet -d "$here/wasmtime" -p1 < "$p"
done
echo "vendor/wasmtime is wasmtime $VERSION with Warden's patches"
