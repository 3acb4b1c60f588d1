#!/usr/bin/env bash
# The manual's walk-throughs (tests/all/tour.rs) put files into JSON with `jq`, as its
# readers do: this installs Debian's `jq` package when it is missing.
set -euo pipefail
command -v jq >/dev/null && exit 0
exec "$(dirname "$0")/apt-install.sh" jq jq
