# hostkit's vLLM release probe (hostkit.facts.vllm_release parses it). Set before it:
# hk_install (1: hostkit's venvs under hk_root), hk_root, hk_command (vllm_command),
# hk_packages (distribution names), hk_probe (vllm_release.py), hk_deadline_s, and the
# hk_deadline function (hostkit.facts.deadline). POSIX sh; nothing here may fail the whole.
hk_py=
if [ "$hk_install" = 1 ]; then
  echo "root=$hk_root"
  [ -L "$hk_root/current" ] && echo "current=$(readlink "$hk_root/current")"
  # hostkit's release venvs: only those it marked complete are its own to keep or remove.
  for hk_d in "$hk_root"/*/; do
    hk_d=${hk_d%/}
    [ -d "$hk_d" ] && [ ! -L "$hk_d" ] || continue
    if [ -r "$hk_d/.hostkit-release" ]; then echo "venv=$hk_d $(cat "$hk_d/.hostkit-release")"
    elif [ -f "$hk_d/pyvenv.cfg" ]; then echo "partial=$hk_d"; fi
  done
  # Free space where the venvs go: the root, or the nearest directory above it that exists.
  hk_d=$hk_root
  while [ ! -d "$hk_d" ]; do hk_d=${hk_d%/*}; [ -n "$hk_d" ] || hk_d=/; done
  echo "free_kib=$(df -Pk "$hk_d" 2>/dev/null | awk 'NR == 2 { print $4 }')"
  [ -x "$hk_root/current/bin/python" ] && hk_py="$hk_root/current/bin/python"
elif [ -r "$hk_command" ]; then
  case ${hk_command##*/} in
    python*) hk_py=$hk_command ;;
    *) IFS= read -r hk_line < "$hk_command"
       # "#!/usr/bin/env python3" stays two words: hk_py is used unquoted.
       case $hk_line in '#!'*python*) hk_py=${hk_line#??} ;; esac ;;
  esac
fi
echo "interpreter=$hk_py"
# shellcheck disable=SC2086
[ -z "$hk_py" ] || hk_deadline "$hk_deadline_s" 'reading the installed vLLM release' $hk_py -c "$hk_probe" $hk_packages
true
