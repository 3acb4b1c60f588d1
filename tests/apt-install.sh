#!/usr/bin/env bash
# Installs a Debian package a test needs, for the tests/ensure-*.sh scripts once they
# found it missing: `apt-install.sh WHAT PACKAGE [ELSE]`, WHAT naming it in the message
# and ELSE what else the user may do (`(or set ...)`). Needs root.
set -euo pipefail
what=$1 package=$2 otherwise=${3:-}
echo "$what is missing: installing Debian's $package package" >&2
if [ "$(id -u)" -ne 0 ]; then
    echo "not root: run 'sudo apt-get install -y $package'${otherwise:+ $otherwise}, then retry" >&2
    exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$package"
