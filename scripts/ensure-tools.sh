#!/usr/bin/env bash
# Debian tools the tests drive for real (tmux: the console in a real terminal; chromium: the HTML
# report opened in a real browser, tests/console/report/test_report_chromium.py; podman + runc + podman-docker:
# the box's deployed container, tests/container_fixture.py, docs/container.md). Installed where
# we are root (as in CI); any way of ending without them exits non-zero, so a CI run without
# its real parts fails here instead of going green on skipped tests.
set -u
missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/bin/docker ] || missing+=(podman-docker)  # a `docker` command over podman
have_all() {
  command -v tmux && command -v chromium && command -v podman && [ -x /usr/bin/docker ]
}
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} (the tests need them)"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null \
      && have_all >/dev/null 2>&1; then
    exit 0
  fi
  echo "error: could not install ${missing[*]}; the tests that drive them cannot run" >&2
  exit 1
fi
echo "error: ${missing[*]} not found and cannot be installed here (not root, or no apt-get)" >&2
exit 1
