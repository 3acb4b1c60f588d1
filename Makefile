# The two set-up commands (see README): `make example` and `make test`; `make docs`
# builds the manual (docs/, an mdBook) and checks its links and examples.
# Both fetch, verify and compile the Python runtime on first use.

CARGO ?= cargo
# The binary `cargo build` writes (under CARGO_TARGET_DIR when that is set).
WARDEN = $(or $(CARGO_TARGET_DIR),./target)/debug/warden

.PHONY: build example test runtime runtime-pydantic runtime-pydantic-proof bench lint docs fuzz screenshots bundle bundle-toolchain edge-bench edge-smoke-arm64

build:
	$(CARGO) build

## Run the example tools end to end (fetches and compiles the runtime the first time).
example: build
	$(WARDEN) run examples/csv_summary.py \
	  --args '{"csv_text": "city,temp\nOslo,4\nRome,18\nCairo,29\nLima,17\n", "column": "temp"}'
	$(WARDEN) run examples/word_count.py --args '{"text": "the cat and the hat", "top": 2}'
	$(WARDEN) run examples/vector_stats.py --args '{"values": [3, 4]}' --json

## Run every test (unit, integration against the real runtime, CLI, several nodes on a
## real PostgreSQL server and the review console in headless Chromium, whose Debian
## packages are installed when missing), then the official MCP conformance suite
## against `warden serve` (needs Node.js 20+ and npm).
test:
	./tests/ensure-postgres.sh
	./tests/ensure-chromium.sh
	./tests/ensure-jq.sh
	$(CARGO) test --features escape-hatch
	bash tests/conformance/run.sh

## The review console's screenshots in the manual (docs/review-*.png, 1000 px wide, about
## 60 KB each): the browser test writes them under the target folder; this copies them.
SHOTS = $(or $(CARGO_TARGET_DIR),./target)/tmp/screenshots
screenshots:
	./tests/ensure-chromium.sh
	./tests/ensure-jq.sh
	$(CARGO) test --features escape-hatch --test all browser::
	mkdir -p docs
	cp $(SHOTS)/review-queue.png $(SHOTS)/review-diff.png docs/

## Fetch, verify and compile the runtime.
runtime: build
	$(WARDEN) runtime fetch

## Build and compile the Pydantic runtime (CPython 3.13.5 with Pydantic 2; see
## docs/runtimes.md), once per machine: 5-30 minutes on 2 cores. Installs Debian's
## toolchain packages when missing (that needs root). `make test` builds it when missing.
runtime-pydantic: build
	$(WARDEN) runtime build pydantic

## The Pydantic 2 runtime's proof (runtime/pydantic/README.md): builds it, then validates a
## Pydantic 2 model in a small wasmtime 48 host of its own. Not part of `make test`.
runtime-pydantic-proof:
	STEPS="$${STEPS:-step0 step1 step2 check step3 step4 step5 step6 step7 step8 step9 step10}" \
	  bash runtime/pydantic/build.sh

## Fuzz the schema deriver, then the server's side of the worker wire, for FUZZ_SECS
## seconds each (default 30 minutes); see docs/schema.md.
## The case being run is kept in target/fuzz-schema-case.py, in case the process dies on it.
FUZZ_SECS ?= 1800
fuzz:
	WARDEN_FUZZ_SECS=$(FUZZ_SECS) $(CARGO) test --test all schema::fuzz -- --nocapture
	WARDEN_FUZZ_SECS=$(FUZZ_SECS) $(CARGO) test --lib worker::fuzz -- --nocapture

## Latency and throughput figures for docs/performance.md.
bench:
	$(CARGO) bench --bench call
	$(CARGO) bench --bench fairness

lint: docs
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --all-targets --features escape-hatch -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps

## The manual (docs/, an mdBook; book.toml) built into target/book, and every link of
## it, the README and the changelog checked (tests/all/docs.rs). mdBook is installed
## from crates.io, pinned, into target/tools the first time (about a minute).
MDBOOK_VERSION = 0.4.52
MDBOOK_ROOT = $(or $(CARGO_TARGET_DIR),./target)/tools
MDBOOK = $(MDBOOK_ROOT)/bin/mdbook
docs:
	@test -x $(MDBOOK) && $(MDBOOK) --version | grep -q "v$(MDBOOK_VERSION)" || \
	  $(CARGO) install mdbook --version $(MDBOOK_VERSION) --locked --no-default-features \
	    --features search --root $(MDBOOK_ROOT)
	$(MDBOOK) build
	$(CARGO) test --features escape-hatch --test all docs::
	$(CARGO) test --features escape-hatch --bin warden cli::examples::

## An edge bundle (docs/edge.md): a warden built without the compiler for
## TARGET (default: this host; `TARGET=aarch64-unknown-linux-gnu` for arm64), and the
## runtime precompiled for CPU (default x86-64-v2 on x86-64, baseline on aarch64) by this
## host's warden. Writes target/bundle/warden-<version>-<target>-<cpu>.tar.zst, signed
## with KEY (default: $$WARDEN_HOME/audit-signing.key). TOOLS=DIR ships a folder of tools.
HOST_TARGET := $(shell rustc -vV | sed -n 's/^host: //p')
TARGET ?= $(HOST_TARGET)
CPU ?= $(if $(findstring aarch64,$(TARGET)),baseline,x86-64-v2)
BUNDLE_BINARY = target/$(TARGET)/bundle/warden
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
BUNDLE_FILE = target/bundle/warden-$(VERSION)-$(TARGET)-$(CPU).tar.zst
# Precompiling for another architecture needs wasmtime's other backends.
BUNDLE_FEATURES = $(if $(filter $(HOST_TARGET),$(TARGET)),,--features all-arch)
# Cross-building for arm64 links with (and compiles SQLite, ring and zstd with) Debian's
# cross gcc: `apt-get install gcc-aarch64-linux-gnu`. Set these to use another.
AARCH64_GCC ?= aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER ?= $(AARCH64_GCC)
export CC_aarch64_unknown_linux_gnu ?= $(AARCH64_GCC)
export AR_aarch64_unknown_linux_gnu ?= $(patsubst %gcc,%ar,$(AARCH64_GCC))
## Checks that TARGET can be built here, and says what to install when not.
bundle-toolchain:
	@if [ "$(TARGET)" != "$(HOST_TARGET)" ]; then \
	  if command -v rustup > /dev/null && ! rustup target list --installed | grep -qx '$(TARGET)'; then \
	    echo "make bundle: Rust's standard library for $(TARGET) is not installed: run \`rustup target add $(TARGET)\`, or make a bundle for this host ($(HOST_TARGET)) with \`make bundle\`" >&2; exit 2; \
	  fi; \
	  case '$(TARGET)' in aarch64-unknown-linux-gnu) \
	    command -v "$$CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER" > /dev/null || { \
	      echo "make bundle: no linker for $(TARGET) ($$CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER): run \`apt-get install gcc-aarch64-linux-gnu\` (Debian, Ubuntu), or set AARCH64_GCC to an aarch64 Linux gcc; \`make bundle\` alone makes this host's bundle" >&2; exit 2; } ;; \
	  esac; \
	fi
bundle: bundle-toolchain
	$(CARGO) build --profile bundle --no-default-features --target $(TARGET) --bin warden
	$(CARGO) build --bin warden $(BUNDLE_FEATURES)
	$(WARDEN) bundle create --target $(TARGET) --cpu $(CPU) --binary $(BUNDLE_BINARY) \
	  --out target/bundle $(if $(TOOLS),--tools $(TOOLS)) $(if $(KEY),--key $(KEY))

## Footprint and start-up of the host's bundle (run as root: it drops the page cache).
edge-bench: bundle
	./tests/edge-bench.sh $(BUNDLE_FILE) $(BUNDLE_BINARY)

## The arm64 bundle (CPU level baseline) in a full-system arm64 VM: qemu-system-aarch64
## (TCG) as a Raspberry Pi 4-like machine (Cortex-A72, no LSE; 2 cores, 3 GiB) booting
## Debian's arm64 kernel (6.12+, Landlock) with an initramfs holding the bundle: install,
## `warden run` of a trivial tool, `warden serve` with a registered tool's calls, every
## worker confined. Installs qemu-system-arm, cpio and the arm64 C library when missing
## (as root) and downloads the kernel and busybox-static for arm64 into
## target/edge-vm. Takes several minutes: not part of `make test` or CI.
EDGE_VM_DIR = $(or $(CARGO_TARGET_DIR),./target)/edge-vm
edge-smoke-arm64:
	$(MAKE) bundle TARGET=aarch64-unknown-linux-gnu CPU=baseline
	./tests/edge-smoke-arm64-vm.sh target/bundle/warden-$(VERSION)-aarch64-unknown-linux-gnu-baseline.tar.zst $(WARDEN) $(EDGE_VM_DIR)
