#!/usr/bin/env bash
# tools/install-deps.sh pkg...: installs the Debian packages that are not installed yet.
set -euo pipefail
# Scripts may run side by side (tools/check-run-scripts.sh): one apt-get at a time, and each looks for
# what is missing only after the one before it has finished.
exec 9>"${TMPDIR:-/tmp}/ddl-install-deps.lock"
flock 9
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
# 9>&-: a process that apt-get leaves running must not hold the lock.
$sudo apt-get update -q 9>&-
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" 9>&-
