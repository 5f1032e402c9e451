#!/usr/bin/env bash
# Installs (once) Debian's Chromium for the tests that render report.html headless.
# Prints the path of the browser when ready. Needs root and Debian's package registry.
set -euo pipefail
# One apt-get at a time (a second caller waits, then finds Chromium installed).
exec 9>/tmp/servediff-setup-chromium.lock
flock 9
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends chromium >&2
fi
command -v chromium
