#!/usr/bin/env bash
# Makes sure Debian's Chromium is at /usr/bin/chromium (or $DSLOG_CHROMIUM) for tests/browser.
# Idempotent: does nothing when it is there. Installs it with apt-get when we are root;
# otherwise says what to run. Playwright drives this binary (no Playwright browser download).
set -euo pipefail
CHROMIUM="${DSLOG_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
say() { printf 'dslog browser test: %s\n' "$*" >&2; }
if [ "$(id -u)" -ne 0 ]; then
  say "$CHROMIUM is missing and we are not root, so it cannot be installed here."
  say "Install it with 'sudo apt-get update && sudo apt-get install -y chromium' and re-run."
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  say "$CHROMIUM is missing and there is no apt-get; install Chromium so that $CHROMIUM exists."
  exit 1
fi
say "installing Debian's chromium (needed by tests/browser)..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium
if [ ! -x "$CHROMIUM" ]; then
  say "apt-get installed chromium but $CHROMIUM is still missing; check the package's layout."
  exit 1
fi
