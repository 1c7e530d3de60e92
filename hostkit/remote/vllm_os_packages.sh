# The OS packages hostkit's vLLM install needs (hostkit.vllm.os_packages says which and why),
# added before the release's venv is made (hostkit.operations.vllm_install). Set before it:
# hk_manager (apt or dnf), hk_packages (the missing ones), hk_venv_packages (those of them a
# pip wheel in a vllm_find_links directory stands in for: vllm_install.sh checks for one),
# hk_files (vllm_os_package_files: installed instead of asking a repository), hk_timeout_s
# (each package manager command). A package that stays missing fails the host here, before
# the venv is made.
hk_fail() { echo "vLLM install: $*" >&2; exit 1; }
hk_failed=
hk_log=
# One package manager command under the deadline, named by $1; its output is kept in hk_log
# (apt-get update exits 0 when it reached no repository: its warnings explain the install's
# failure that follows). On failure, hk_failed says which and how.
hk_try() {
  hk_what=$1; shift
  hk_out=$(DEBIAN_FRONTEND=noninteractive timeout -k 5 "$hk_timeout_s" "$@" 2>&1 < /dev/null)
  hk_rc=$?
  hk_log="$hk_log$hk_out
"
  case $hk_rc in
    0) return 0 ;;
    124|137) hk_failed="$hk_what did not finish within $hk_timeout_s s" ;;
    *) hk_failed="$hk_what failed with exit status $hk_rc" ;;
  esac
  return 1
}
hk_apt_install() {
  hk_try "apt-get install" apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    install --no-install-recommends "$@"
}
hk_installed() {
  case $hk_manager in
    apt) case $(dpkg-query -W -f '${Status}' "$1" 2>/dev/null) in *" installed") return 0 ;; esac; return 1 ;;
    *) rpm -q --quiet "$1" ;;
  esac
}

# shellcheck disable=SC2086 # the names and paths hold no whitespace (hostkit.profile checks the paths)
case $hk_manager in
  apt)
    if [ -n "$hk_files" ]; then hk_apt_install $hk_files
    # A fresh host may have no package lists (Debian's cloud and minbase images), or stale
    # ones: update only when the install needs it.
    elif ! hk_apt_install $hk_packages; then hk_try "apt-get update" apt-get -qq update && hk_apt_install $hk_packages
    fi ;;
  dnf)
    if [ -n "$hk_files" ]; then hk_try "dnf install" dnf -y -q --disablerepo='*' install $hk_files
    else hk_try "dnf install" dnf -y -q install $hk_packages
    fi ;;
esac

hk_missing=
hk_venv_missing=
for hk_p in $hk_packages; do
  hk_installed "$hk_p" && continue
  case " $hk_venv_packages " in
    *" $hk_p "*) hk_venv_missing="$hk_venv_missing $hk_p" ;;
    *) hk_missing="$hk_missing $hk_p" ;;
  esac
done
if [ -n "$hk_files" ]; then hk_from="from vllm_os_package_files"; hk_fix="add their package files (and those of \
their missing dependencies) to vllm_os_package_files, or empty it to use the host's $hk_manager repositories"
else hk_from="from the host's $hk_manager repositories"; hk_fix="let the host reach its $hk_manager repositories, \
or list the package files (theirs and those of their missing dependencies) in vllm_os_package_files"
fi
# The package manager's last lines say why.
[ -z "$hk_missing$hk_venv_missing" ] || printf '%s' "$hk_log" | grep -v '^[[:space:]]*$' | tail -n 12 >&2
[ -z "$hk_missing" ] || hk_fail "could not add${hk_missing}${hk_venv_missing} ${hk_from}${hk_failed:+ ($hk_failed)}: \
the release's venv was not made (fix: $hk_fix${hk_venv_missing:+; a pip wheel in a vllm_find_links directory stands in \
for$hk_venv_missing})"
[ -z "$hk_venv_missing" ] || echo "vLLM install: could not add${hk_venv_missing} ${hk_from}${hk_failed:+ \
($hk_failed)}: the venv's pip must come from a pip wheel in a vllm_find_links directory"
hk_added=
for hk_p in $hk_packages; do hk_installed "$hk_p" && hk_added="$hk_added $hk_p"; done
[ -z "$hk_added" ] || echo "vLLM install: added$hk_added"
true
