#!/usr/bin/env bash
# The SSH tests need OpenSSH's sshd. Install it where we are root (as in CI); elsewhere say how.
# Any way of ending without a usable sshd exits non-zero: a CI run without its real SSH server
# must fail here rather than go green on skipped tests.
set -u
SSHD="${EAGLE3_SSHD:-/usr/sbin/sshd}"
if [ -x "$SSHD" ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing openssh-server (sshd is missing; the SSH tests need it)"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -qq >/dev/null && apt-get install -y -qq openssh-server >/dev/null \
      && [ -x "$SSHD" ]; then
    exit 0
  fi
  echo "error: could not install openssh-server; the SSH tests cannot run" >&2
  exit 1
fi
echo "error: $SSHD not found and cannot be installed here (not root, or no apt-get);" \
  "install openssh-server to run the SSH tests" >&2
exit 1
