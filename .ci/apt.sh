# shellcheck shell=bash
# Sourced by .ci/run: apt_get runs apt-get, waiting while another package
# manager (an unattended upgrade, a second CI job, a person's apt install)
# holds apt's or dpkg's lock, instead of failing at once with exit 100.
#
# It waits at most CI_APT_WAIT seconds in all (600 by default), trying again
# every CI_APT_POLL seconds (5); apt-get itself is also told to wait for the
# dpkg lock that long (DPkg::Lock::Timeout, apt 1.9.11 and later). Any other
# failure, or the lock still held at the end, fails with apt-get's own
# message and exit code.

apt_get() {
  local wait="${CI_APT_WAIT:-600}" poll="${CI_APT_POLL:-5}"
  local deadline=$((SECONDS + wait)) out rc
  while :; do
    rc=0
    out=$($APT_SUDO apt-get -o "DPkg::Lock::Timeout=$wait" "$@" 2>&1) || rc=$?
    if [ "$rc" -eq 0 ]; then
      [ -n "$out" ] && printf '%s\n' "$out"
      return 0
    fi
    if ! grep -qiE 'could not get lock|unable to acquire the dpkg frontend lock|unable to lock' <<<"$out"; then
      printf '%s\n' "$out" >&2
      return "$rc"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      printf '%s\n' "$out" >&2
      echo "ci: apt-get $*: the package manager's lock was still held after ${wait}s (CI_APT_WAIT)" >&2
      return "$rc"
    fi
    echo "ci: apt-get $*: another package manager holds the lock; trying again in ${poll}s (giving up after ${wait}s)" >&2
    sleep "$poll"
  done
}
