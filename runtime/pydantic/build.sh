#!/usr/bin/env bash
# The Pydantic 2 runtime (issue #44, route 2: static extension modules): CPython 3.13.5
# for wasm32-wasip1 with pydantic-core, jiter, rpds-py and orjson linked in as builtin
# modules (one static library, extensions/) and the C speedups of MarkupSafe and msgpack
# (PyYAML in pure Python), then Pydantic 2 validated inside wasmtime 48.0.8. Every build input comes from a package registry by name
# and version and is checked against the sha256 below. The code is Warden's own:
# warden_entry.c (the C entry points of Warden's runtime ABI) and runner/ (a small wasmtime
# 48.0.8 host), extensions/ (the crate that links the extensions into one library);
# proof/*.py are the guest scripts. See README.md beside this file.
#
#   warden runtime build pydantic               # steps step0..step8 and install, into
#                                               # $WARDEN_HOME/runtime/pydantic-<recipe key>
#   make runtime-pydantic-proof                 # the proof: WORK=target/pydantic-runtime
#   WORK=/some/empty/dir bash runtime/pydantic/build.sh
#
# Needs: Debian bookworm with its default apt source (root only when the toolchain's
# packages are missing: step0 installs them), pip, 2 cores, ~6 GB disk; rustup's cargo
# (>= 1.90) for the proof's host runner. Heavy steps run under nice/ionice.
set -euo pipefail
PROOF=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-$PROOF/../../target/pydantic-runtime}
WORK=$(mkdir -p "$WORK" && cd "$WORK" && pwd)
JOBS=${JOBS:-2}
# The host's Python with pip (Warden passes the one its pip session found).
PYTHON=${PYTHON:-python3}
# wasi-libc: trixie's (default: a stable release, so it stays downloadable) or sid's
# (WASI_LIBC=sid, newer; gone once sid moves on). Both verified to pass the proof.
if [ "${WASI_LIBC:-trixie}" = sid ]; then
  WASI_LIBC_VERSION=0.0~git20260423.161b319-2
  WASI_LIBC_SHA256=1051dbb0a5e6d3f709de83b6afb423e07a8ab19a9e9f12ef20ff902131e7b8bc
else
  WASI_LIBC_VERSION=0.0~git20241209.574b88d-2
  WASI_LIBC_SHA256=b7716260051d289248b7667f81fa2792c125d888ff51da3fa09c6272cc0bd11d
fi
WASI_LIBC_DEB=inputs/wasi-libc_${WASI_LIBC_VERSION}_all.deb
NICE="nice -n 19 ionice -c3"
mkdir -p "$WORK"/{inputs,src,logs,out}
cd "$WORK"
T() { local name=$1; shift; local t0=$(date +%s); "$@"; echo "TIMING $name $(( $(date +%s) - t0 )) s" | tee -a "$WORK/logs/timings.txt"; }

# ---- 0. Debian bookworm toolchain -------------------------------------------------------
TOOLCHAIN="clang-22=1:22.1.8-1~deb12u1 lld-22=1:22.1.8-1~deb12u1 llvm-22=1:22.1.8-1~deb12u1
  libclang-rt-22-dev-wasm32=1:22.1.8-1~deb12u1
  rustc-web=1.96.0+dfsg1-1~deb12u2 cargo-web=1.96.0+dfsg1-1~deb12u2
  rust-web-src=1.96.0+dfsg1-1~deb12u2"
step0() {
  # Nothing to do (and no root needed) when the pinned versions are installed already.
  local p missing=
  for p in $TOOLCHAIN; do
    [ "$(dpkg-query -W -f='${Version}' "${p%%=*}" 2>/dev/null)" = "${p#*=}" ] || missing=1
  done
  for p in build-essential libffi-dev zlib1g-dev libssl-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing=1
  done
  [ -z "$missing" ] && { echo "toolchain: installed"; return; }
  [ "$(id -u)" = 0 ] || { echo "the toolchain's Debian packages are missing and installing them needs root: run this as root once (or install: $TOOLCHAIN build-essential libffi-dev zlib1g-dev libssl-dev)" >&2; return 1; }
  apt-get update -q
  # shellcheck disable=SC2086
  $NICE apt-get install -y -q --no-install-recommends $TOOLCHAIN \
    build-essential libffi-dev zlib1g-dev libssl-dev
}

# ---- 1. inputs from Debian sid (wasi-libc .deb) and trixie (python3.13 source) ----------
# A private apt configuration in the work folder, so the system stays bookworm (nothing from sid or
# trixie is installed: the .deb is only unpacked, and the source only downloaded). The mirror is the
# one already configured for bookworm.
step1() {
  local A=$WORK/apt URI
  URI=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  mkdir -p $A/lists/partial $A/cache/archives/partial $A/sources.d
  cat > $A/sources.list <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $URI sid main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $URI trixie main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $URI trixie main
EOF
  local O="-o Dir::Etc::SourceList=$A/sources.list -o Dir::Etc::SourceParts=$A/sources.d
           -o Dir::State::Lists=$A/lists -o Dir::Cache=$A/cache -o Debug::NoLocking=1"
  apt-get $O update -q
  (cd inputs && apt-get $O download wasi-libc=$WASI_LIBC_VERSION)
  (cd src && apt-get $O source --download-only python3.13=3.13.5-2+deb13u5)
  (cd src && apt-get $O source --download-only zlib=1:1.3.dfsg+really1.3.1-1)
}

# ---- 2. inputs from PyPI ------------------------------------------------------------------
step2() {
  "$PYTHON" -m pip download -q --no-deps --only-binary :all: -d inputs \
    pydantic==2.14.4 annotated-types==0.8.0 typing-extensions==4.16.0 typing-inspection==0.4.5
  # Sources of these seven only: pip prepares each one's metadata in an isolated
  # environment, whose build tools (maturin, setuptools, Cython) come as wheels.
  local sdists="pydantic-core jiter rpds-py orjson markupsafe msgpack pyyaml"
  "$PYTHON" -m pip download -q --no-deps --no-binary "${sdists// /,}" -d inputs \
    pydantic-core==2.50.5 jiter==0.19.0 rpds-py==2026.9.1 orjson==3.13.0 \
    markupsafe==3.0.4 msgpack==1.2.4 pyyaml==6.0.4
}

check() {
  echo "$WASI_LIBC_SHA256  $WASI_LIBC_DEB" | sha256sum -c
  sha256sum -c <<'EOF'
93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640  src/python3.13_3.13.5.orig.tar.xz
60dd315c07f616887caa029408308a018ace66e3d142726a97db164b3b8f69fb  src/zlib_1.3.dfsg+really1.3.1.orig.tar.gz
653a2ad9f6d8858529c77c72717d0ea991d6c6837fe683246b2f4b2bbfc3fadc  inputs/pydantic-2.14.4-py3-none-any.whl
1e740886083ff95530d694e6a3f09ed914bcf92a496d16acd307c6c3484fc36d  inputs/pydantic_core-2.50.5.tar.gz
ba3064f8be276d7cfb83c2fb85c858be533da2c2f80f9b048c3781b45a57a195  inputs/jiter-0.19.0.tar.gz
4793ef7f78268b124b73fa933440f01d258bbae01de9fa53e9080c9ab0425a12  inputs/rpds_py-2026.9.1.tar.gz
d1de5eb04485110c5da4c657e49168995d55e076b1ce60f1a042e254f4186c4f  inputs/orjson-3.13.0.tar.gz
2e9ad7dd851bf45fab9f75cbff4cb493fee9979e8d8c7c9c3ee119022518edd6  inputs/markupsafe-3.0.4.tar.gz
475c44e12f2a5de766a8448783f149c9b33f3f49b88953c6cd739a77d93c732c  inputs/msgpack-1.2.4.tar.gz
e24bf71af8a432d7808fabff134d38dfe16d3cbb41f2873bb4b1e42422de0a1a  inputs/pyyaml-6.0.4.tar.gz
f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0  inputs/annotated_types-0.8.0-py3-none-any.whl
481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8  inputs/typing_extensions-4.16.0-py3-none-any.whl
bc210535442b39e1bf2805e0c7a17dfd6a4ace760c84c7f7d16245d23a6b1c39  inputs/typing_inspection-0.4.5-py3-none-any.whl
EOF
}

# ---- 3. unpack; a wasi-sdk-shaped folder of Debian's tools and sid's wasi-libc ------------
step3() {
  tar -C src -xf src/python3.13_3.13.5.orig.tar.xz
  tar -C src -xzf src/zlib_1.3.dfsg+really1.3.1.orig.tar.gz
  local x
  for x in pydantic_core-2.50.5 jiter-0.19.0 rpds_py-2026.9.1 orjson-3.13.0 markupsafe-3.0.4 \
           msgpack-1.2.4 pyyaml-6.0.4; do
    tar -C src -xzf inputs/$x.tar.gz
  done
  mkdir -p wasi-libc-deb sysroot sdk/bin sdk/share
  dpkg-deb -x $WASI_LIBC_DEB wasi-libc-deb
  ln -sfn ../wasi-libc-deb/usr/include sysroot/include
  ln -sfn ../wasi-libc-deb/usr/lib sysroot/lib
  ln -sfn ../../sysroot sdk/share/wasi-sysroot
  printf '#!/bin/sh\nexec /usr/bin/clang-22 --target=wasm32-wasip1 "$@"\n' > sdk/bin/clang
  printf '#!/bin/sh\nexec /usr/bin/clang++-22 --target=wasm32-wasip1 "$@"\n' > sdk/bin/clang++
  printf '#!/bin/sh\nexec /usr/bin/clang-22 --target=wasm32-wasip1 -E "$@"\n' > sdk/bin/clang-cpp
  chmod +x sdk/bin/clang sdk/bin/clang++ sdk/bin/clang-cpp
  for t in llvm-ar llvm-ranlib llvm-nm llvm-strip; do ln -sfn /usr/bin/$t-22 sdk/bin/$t; done
  ln -sfn /usr/bin/llvm-ranlib-22 sdk/bin/ranlib; ln -sfn /usr/bin/wasm-ld-22 sdk/bin/wasm-ld
}

PY=$WORK/src/Python-3.13.5
SDK=$WORK/sdk
SYSROOT=$SDK/share/wasi-sysroot

# ---- 4. the build Python (native CPython 3.13.5, same source; cross builds need it) ------
step4() {
  mkdir -p $PY/cross-build/build && cd $PY/cross-build/build
  ../../configure -q --prefix=$WORK/buildpy
  $NICE make -j$JOBS all
  cd $WORK
}

# ---- 5. CPython 3.13.5 for wasm32-wasip1 (flags as in Tools/wasm/wasi.py), with zlib ------
# zlib 1.3.1 (Debian's source) as a static library first: CPython's zlib module needs it,
# and so do urllib3, requests and httpx (they import zlib to decode responses).
ZLIB=$WORK/zlib
step5() {
  mkdir -p $ZLIB/lib $ZLIB/include $ZLIB/obj
  local f
  for f in adler32 compress crc32 deflate gzclose gzlib gzread gzwrite infback inffast \
           inflate inftrees trees uncompr zutil; do
    $SDK/bin/clang --sysroot=$SYSROOT -O2 -DZ_HAVE_UNISTD_H \
      -c $WORK/src/zlib-1.3.1/$f.c -o $ZLIB/obj/$f.o
  done
  $SDK/bin/llvm-ar rcs $ZLIB/lib/libz.a $ZLIB/obj/*.o
  cp $WORK/src/zlib-1.3.1/zlib.h $WORK/src/zlib-1.3.1/zconf.h $ZLIB/include/
  mkdir -p $PY/cross-build/wasm32-wasip1 && cd $PY/cross-build/wasm32-wasip1
  ZLIB_CFLAGS="-I$ZLIB/include" ZLIB_LIBS="-L$ZLIB/lib -lz" \
  CONFIG_SITE=$PY/Tools/wasm/config.site-wasm32-wasi \
  CC="$SDK/bin/clang --sysroot=$SYSROOT" CPP="$SDK/bin/clang-cpp --sysroot=$SYSROOT" \
  CXX="$SDK/bin/clang++ --sysroot=$SYSROOT" AR=$SDK/bin/llvm-ar RANLIB=$SDK/bin/ranlib \
  PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR=$SYSROOT/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$SYSROOT \
  PATH=$SDK/bin:$PATH \
    ../../configure -q --host=wasm32-wasip1 --build=$(../../config.guess) \
      --with-build-python=$PY/cross-build/build/python --disable-test-modules --without-ensurepip
  PATH=$SDK/bin:$PATH $NICE make -j$JOBS all
  cd $WORK
}

# ---- 6. the extensions as one static library for wasm32-wasip1 (PyO3, -Zbuild-std) ------
# extensions/ is a crate whose dependencies are the sdists unpacked in src/. Each sdist's
# `lib` target is made an rlib (they declare cdylib: a shared object, which WASI cannot
# load), and rpds-py and orjson are built against PyO3 0.30.1 like pydantic-core and
# jiter (they declare 0.29): PyO3's FFI crate links Python once per build, so one version
# serves all four. Warden's tests exercise each extension on this build.
step6() {
  cat > $WORK/pyo3-wasi.cfg <<'EOF'
implementation=CPython
version=3.13
shared=false
abi3=false
lib_name=python3.13
pointer_width=32
suppress_build_script_link_lines=true
EOF
  local S=$WORK/src
  sed -i 's/^crate-type = \[.*\]/crate-type = ["rlib"]/' $S/pydantic_core-2.50.5/Cargo.toml \
    $S/jiter-0.19.0/crates/jiter-python/Cargo.toml $S/rpds_py-2026.9.1/Cargo.toml \
    $S/orjson-3.13.0/Cargo.toml
  sed -i 's/^version = "0.29.0"$/version = "0.30.1"/' $S/rpds_py-2026.9.1/Cargo.toml
  sed -i 's/^pyo3-ffi = { version = "0.29",/pyo3-ffi = { version = "0.30.1",/
          s/^pyo3-build-config = { version = "0.29" }/pyo3-build-config = { version = "0.30.1" }/' \
    $S/orjson-3.13.0/Cargo.toml
  grep -q '"0.30.1"' $S/rpds_py-2026.9.1/Cargo.toml
  [ "$(grep -c '"0.30.1"' $S/orjson-3.13.0/Cargo.toml)" = 2 ]
  rm -rf $WORK/extensions && cp -r $PROOF/extensions $WORK/extensions
  cd $WORK/extensions
  PATH=/usr/bin:$PATH /usr/bin/cargo fetch --locked
  # Panic messages carry source paths: map the build folders and cargo's cache folders (whose
  # names would otherwise end up inside the runtime) to neutral names. This also makes the
  # runtime independent of where it was built.
  local remap="--remap-path-prefix=$S=/sdists --remap-path-prefix=$WORK/extensions=/extensions --remap-path-prefix=/usr/lib/rustlib/src/rust=/rust"
  local d; for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*; do remap="$remap --remap-path-prefix=$d=/crates"; done
  # orjson's build script compiles yyjson (C) with the WASI clang.
  PATH=/usr/bin:$PATH RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 RUSTFLAGS="$remap" \
  CC_wasm32_wasip1="$SDK/bin/clang" CFLAGS_wasm32_wasip1="--sysroot=$SYSROOT -O2" \
  AR_wasm32_wasip1=$SDK/bin/llvm-ar \
  PYO3_CONFIG_FILE=$WORK/pyo3-wasi.cfg CARGO_TARGET_DIR=$WORK/target-wasm \
  CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  CARGO_PROFILE_RELEASE_STRIP=false CARGO_PROFILE_RELEASE_PANIC=abort CARGO_BUILD_JOBS=$JOBS \
    $NICE /usr/bin/cargo build --locked --release --target wasm32-wasip1 \
      -Zbuild-std=std,panic_abort
  cd $WORK
}

# ---- 7. link the Warden-shaped reactor ------------------------------------------------------
step7() {
  cd $PY/cross-build/wasm32-wasip1
  local CC="$SDK/bin/clang --sysroot=$SYSROOT" OBJS
  $CC -c -O2 -std=c11 -Wall -I../../Include -I../../Include/internal -I. \
      -o $WORK/out/warden_entry.o $PROOF/warden_entry.c
  # C extensions, compiled as their setup.py would (msgpack's C is Cython's output, shipped
  # in its sdist): MarkupSafe's speedups and msgpack's packer and unpacker.
  $CC -c -O2 -I../../Include -I. -o $WORK/out/markupsafe_speedups.o \
      $WORK/src/markupsafe-3.0.4/src/markupsafe/_speedups.c
  $CC -c -O2 -I../../Include -I. -I$WORK/src/msgpack-1.2.4 -o $WORK/out/msgpack_cmsgpack.o \
      $WORK/src/msgpack-1.2.4/msgpack/_cmsgpack.c
  # CPython's own link of python.wasm, with Programs/python.o replaced by the entry points
  OBJS=$(make -s -n python.wasm -W Programs/python.o | grep -- '-o python.wasm' \
         | sed -e 's/.*-o python.wasm //' -e 's#Programs/python.o##')
  $CC -z stack-size=8388608 -Wl,--stack-first -Wl,--initial-memory=20971520 -mexec-model=reactor \
      -o $WORK/out/python-pyd.wasm $WORK/out/warden_entry.o $OBJS \
      $WORK/out/markupsafe_speedups.o $WORK/out/msgpack_cmsgpack.o \
      $WORK/target-wasm/wasm32-wasip1/release/libwarden_extensions.a
  /usr/bin/llvm-strip-22 --strip-debug -o $WORK/out/python-pyd.nodebug.wasm $WORK/out/python-pyd.wasm
  cd $WORK
}

# An sdist has no installed metadata: say what is bundled, as a wheel's would (Warden reads
# the bundled packages' names and versions from these).
dist_info() {
  mkdir -p stage/packages/$1-$2.dist-info
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\nLicense: %s\n' "$1" "$2" "$3" \
    > stage/packages/$1-$2.dist-info/METADATA
}

# ---- 8. the guest's folders: stdlib (/usr/local/lib), packages (/packages), empty root (/) -
step8() {
  (cd $PY/cross-build/wasm32-wasip1 && $NICE make -s libinstall DESTDIR=$WORK/stage/root)
  mkdir -p stage/root/usr/local/lib/python3.13/lib-dynload stage/packages stage/empty-root
  for w in inputs/*.whl; do "$PYTHON" -m zipfile -e "$w" stage/packages; done
  cp -r src/pydantic_core-2.50.5/python/pydantic_core stage/packages/
  rm -rf stage/packages/pydantic_core/_pydantic_core   # type stubs only; the module is built in
  # jiter and rpds: the package a wheel would hold (an __init__ re-exporting the builtin
  # module, the stubs); orjson has its own Python source.
  local pkg
  for pkg in jiter rpds; do
    mkdir -p stage/packages/$pkg
    printf 'from .%s import *\n\n__doc__ = %s.__doc__\nif hasattr(%s, "__all__"):\n    __all__ = %s.__all__\n' \
      $pkg $pkg $pkg $pkg > stage/packages/$pkg/__init__.py
    touch stage/packages/$pkg/py.typed
  done
  cp src/jiter-0.19.0/crates/jiter-python/jiter.pyi stage/packages/jiter/__init__.pyi
  cp src/rpds_py-2026.9.1/rpds.pyi stage/packages/rpds/__init__.pyi
  cp -r src/orjson-3.13.0/pysrc/orjson stage/packages/
  # Pure Python around the C above (each falls back to its Python when the C is missing;
  # here it is not); PyYAML without libyaml, in the Python it ships.
  mkdir -p stage/packages/markupsafe stage/packages/msgpack stage/packages/yaml
  cp src/markupsafe-3.0.4/src/markupsafe/{__init__.py,_native.py,_speedups.pyi,py.typed} \
    stage/packages/markupsafe/
  cp src/msgpack-1.2.4/msgpack/*.py stage/packages/msgpack/
  cp src/pyyaml-6.0.4/lib/yaml/*.py stage/packages/yaml/
  dist_info pydantic_core 2.50.5 MIT
  dist_info jiter 0.19.0 MIT
  dist_info rpds_py 2026.9.1 MIT
  dist_info orjson 3.13.0 "MPL-2.0 AND (Apache-2.0 OR MIT)"
  dist_info markupsafe 3.0.4 BSD-3-Clause
  dist_info msgpack 1.2.4 Apache-2.0
  dist_info pyyaml 6.0.4 MIT
  $PY/cross-build/build/python -m compileall -q --invalidation-mode unchecked-hash stage/packages
}

# ---- install: the runtime as Warden runs it, in $DEST --------------------------------------
# DEST/python.wasm              the reactor (no debug info; its name section stays: Warden's
#                               snapshot finds wasi-libc's preopen reset by name)
# DEST/lib/python313.zip        the standard library and the bundled packages, as bytecode
# DEST/lib/python3.13/lib-dynload/   empty: CPython's start-up looks for it
# DEST/runtime.toml             what Warden verifies the files against
# Built beside DEST and renamed into place, so DEST is complete or absent.
install() {
  : "${DEST:?set DEST, the folder to install the runtime in}"
  local tmp=$DEST.partial
  rm -rf "$tmp" && mkdir -p "$tmp/lib/python3.13/lib-dynload"
  cp out/python-pyd.nodebug.wasm "$tmp/python.wasm"
  $PY/cross-build/build/python $PROOF/pack.py "$tmp/lib/python313.zip" \
    stage/root/usr/local/lib/python3.13 stage/packages
  local f size sum
  {
    echo "# Written by runtime/pydantic/build.sh; Warden checks every file against it."
    echo "[package]"
    echo "name = \"cpython-pydantic\""
    echo "version = \"${RECIPE_KEY:-local}\""
    echo "licence = \"PSF-2.0 (CPython 3.13.5); MIT (pydantic 2.14.4, pydantic-core 2.50.5, jiter 0.19.0, rpds-py 2026.9.1, annotated-types, typing-inspection); MPL-2.0 AND (Apache-2.0 OR MIT) (orjson 3.13.0, with yyjson: MIT); BSD-3-Clause (MarkupSafe 3.0.4); Apache-2.0 (msgpack 1.2.4); MIT (PyYAML 6.0.4); PSF-2.0 (typing-extensions); Apache-2.0 WITH LLVM-exception (wasi-libc)\""
    echo "python = \"3.13.5\""
    for f in python.wasm lib/python313.zip; do
      size=$(stat -c %s "$tmp/$f"); sum=$(sha256sum "$tmp/$f" | cut -d' ' -f1)
      case $f in python.wasm) role=snapshot ;; *) role=stdlib ;; esac
      printf '\n[[artifact]]\nrole = "%s"\npath = "%s"\nsize = %s\nsha256 = "%s"\n' "$role" "$f" "$size" "$sum"
    done
  } > "$tmp/runtime.toml"
  rm -rf "$DEST" && mv "$tmp" "$DEST"
  echo "installed in $DEST"
}

# ---- 9. the host: wasmtime 48.0.8 + wasmtime-wasi 48.0.8 + wasmtime-wizer 48.0.8 -----------
step9() {
  (cd $PROOF/runner && CARGO_TARGET_DIR=$WORK/runner-target $NICE cargo build --locked --release -j$JOBS)
}

# ---- 10. the proof -----------------------------------------------------------------------
step10() {
  local R=$WORK/runner-target/release/pyd-runner
  export PYD_DIRS="$WORK/stage/empty-root::/,$WORK/stage/root/usr/local/lib::/usr/local/lib,$WORK/stage/packages::/packages"
  export PYD_ENV="TMPDIR=/tmp;HOME=/tmp;PYTHONTZPATH=;PYTHONPATH=/packages;PYTHONDONTWRITEBYTECODE=1"
  $NICE $R compile out/python-pyd.nodebug.wasm out/python-pyd.cwasm
  $R turn out/python-pyd.cwasm $PROOF/proof/proof.py | tee logs/proof.txt
  grep -q '^PROOF OK' logs/proof.txt
  $NICE $R wizer out/python-pyd.nodebug.wasm out/python-pyd-snapshot-pydantic.wasm $PROOF/proof/preload.py
  $NICE $R compile out/python-pyd-snapshot-pydantic.wasm out/python-pyd-snapshot-pydantic.cwasm
  $R turn out/python-pyd-snapshot-pydantic.cwasm $PROOF/proof/proof.py | tee logs/proof-snapshot.txt
  grep -q '^PROOF OK' logs/proof-snapshot.txt
  sha256sum out/*.wasm | tee logs/artifacts.sha256
}

# In a function, read whole before it runs: editing this file meanwhile changes nothing.
main() {
  local s
  for s in ${STEPS:-step0 step1 step2 check step3 step4 step5 step6 step7 step8 step9 step10}; do
    echo "==== $s"; T "$s" "$s"
  done
  echo "RECIPE DONE"
}
main
exit
