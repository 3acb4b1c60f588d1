#!/usr/bin/env bash
# The manual's walk-throughs (tests/all/tour.rs) put files into JSON with `jq`, as its
# readers do: this installs Debian's `jq` package when it is missing.
set -euo pipefail
if command -v jq >/dev/null; then
    exit 0
fi
echo "jq is missing: installing Debian's jq package" >&2
if [ "$(id -u)" -ne 0 ]; then
    echo "not root: run 'sudo apt-get install -y jq', then retry" >&2
    exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq
