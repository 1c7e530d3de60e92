# hostkit's vLLM release install (hostkit.operations.vllm_install). Set before it: hk_root,
# hk_venv, hk_release (package==version), hk_needed_kib, hk_pip_timeout_s, hk_cli (the
# entry point's text, hostkit/remote/vllm_cli.py), hk_python (the interpreter that makes the venv),
# hk_venv_package (the OS package that gives hk_python its ensurepip, when the host lacks it),
# hk_local_links (the find-links directories), hk_wheelhouse_only (1: those alone, no index)
# with hk_wheelhouse_factor, and the pip install command line as "$@".
# A failed or partial install is removed; nothing outside hk_venv changes before it is complete.
hk_fail() { echo "vLLM install: $*" >&2; exit 1; }
hk_d=$hk_root
while [ ! -d "$hk_d" ]; do hk_d=${hk_d%/*}; [ -n "$hk_d" ] || hk_d=/; done
hk_free_kib=$(df -Pk "$hk_d" | awk 'NR == 2 { print $4 }')
if [ "$hk_wheelhouse_only" = 1 ]; then
  # Offline, pip installs nothing that is not in the wheelhouse: a venv is at most
  # hk_wheelhouse_factor times its wheels.
  hk_house_kib=$(du -skL $hk_local_links 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
  [ $((hk_house_kib * hk_wheelhouse_factor)) -ge "$hk_needed_kib" ] || hk_needed_kib=$((hk_house_kib * hk_wheelhouse_factor))
fi
[ -n "$hk_free_kib" ] || hk_fail "cannot read the free space of $hk_d"
[ "$hk_free_kib" -ge "$hk_needed_kib" ] || hk_fail "not enough space for $hk_release under $hk_root: it needs \
$((hk_needed_kib / 1024)) MiB, the filesystem of $hk_d has $((hk_free_kib / 1024)) MiB free; nothing was changed"
[ "$(readlink "$hk_root/current" 2>/dev/null)" != "$hk_venv" ] || hk_fail "$hk_venv is in service but incomplete"
install -d -m 0755 -o root -g root "$hk_root" || hk_fail "cannot create $hk_root"
# An interrupted earlier install left this venv without hostkit's marker.
rm -rf -- "$hk_venv"
trap 'rm -rf -- "$hk_venv"' EXIT
if ! "$hk_python" -m venv "$hk_venv" > /dev/null 2>&1; then
  # Debian and Ubuntu without pythonX.Y-venv have no ensurepip (vllm_os_packages.sh could not
  # add it): pip comes from a pip wheel in a local find-links directory (pip runs from its own wheel).
  rm -rf -- "$hk_venv"
  hk_pip_wheel=
  for hk_l in $hk_local_links; do
    for hk_w in "$hk_l"/pip-*.whl; do [ ! -f "$hk_w" ] || hk_pip_wheel=$hk_w; done
  done
  if [ -n "$hk_venv_package" ]; then hk_why=" ($hk_venv_package is not installed)"; hk_fix="let hostkit add \
$hk_venv_package from the host's package repositories or from vllm_os_package_files"
  else hk_why=; hk_fix="install what gives $hk_python its ensurepip (python3-venv on Debian and Ubuntu)"; fi
  [ -n "$hk_pip_wheel" ] || hk_fail "$hk_python -m venv $hk_venv failed$hk_why and no pip wheel is in a vllm_find_links \
directory (fix: $hk_fix, or put a pip wheel in a vllm_find_links directory); nothing was changed"
  "$hk_python" -m venv --without-pip "$hk_venv" || hk_fail "$hk_python -m venv --without-pip $hk_venv failed; nothing was changed"
  "$hk_venv/bin/python" "$hk_pip_wheel/pip" install --no-index --quiet --disable-pip-version-check "$hk_pip_wheel" \
    || hk_fail "installing pip from $hk_pip_wheel failed; nothing was changed"
fi
timeout -k 5 "$hk_pip_timeout_s" "$@" > "$hk_venv/.pip.log" 2>&1
hk_rc=$?
tail -n 40 "$hk_venv/.pip.log"
case $hk_rc in
  0) ;;
  124|137) hk_fail "pip install $hk_release did not finish within $hk_pip_timeout_s s; the new venv was removed, nothing else changed" ;;
  *) hk_fail "pip install $hk_release failed (exit status $hk_rc, its last lines above); the new venv was removed, nothing else changed" ;;
esac
rm -f -- "$hk_venv/.pip.log"
{ printf '#!%s/bin/python\n' "$hk_venv"; printf '%s\n' "$hk_cli"; } > "$hk_venv/bin/hostkit-vllm" || hk_fail "cannot write the entry point"
# Root owns the release; the service user (everyone else) may read and execute, never write.
chown -R root:root "$hk_venv" && chmod -R u+rwX,go+rX,go-w "$hk_venv" && chmod 0755 "$hk_venv/bin/hostkit-vllm" \
  || hk_fail "cannot set the release's owner and modes"
# The marker says the venv is complete: one without it is a partial install (vllm_release.sh).
echo "$hk_release" > "$hk_venv/.hostkit-release" || hk_fail "cannot mark $hk_venv complete"
trap - EXIT
echo "vLLM install: $hk_release installed in $hk_venv"
