# hostkit's vLLM release probe (hostkit.facts.vllm_release parses it). Set before it:
# hk_install (1: hostkit's venvs under hk_root), hk_root, hk_command (vllm_command),
# hk_commands (the other vllm_commands the instances name, one a line), hk_packages
# (distribution names), hk_probe (vllm_release.py), hk_deadline_s, and the hk_deadline
# function (hostkit.facts.deadline). POSIX sh; nothing here may fail the whole.

# The interpreter the command $1 names: its #! line, or itself when it is a python.
hk_interpreter_of() {
  [ -r "$1" ] || return 0
  case ${1##*/} in
    python*) echo "$1" ;;
    *) IFS= read -r hk_line < "$1"
       # "#!/usr/bin/env python3" stays two words: it is used unquoted.
       case $hk_line in '#!'*python*) echo "${hk_line#??}" ;; esac ;;
  esac
}

# The release behind the command $1, read by the interpreter $2 (none: nothing to read)
# under its own deadline.
hk_release_of() {
  echo "command=$1"
  echo "interpreter=$2"
  # shellcheck disable=SC2086
  [ -z "$2" ] || hk_deadline "$hk_deadline_s" "reading the installed vLLM release of $1" $2 -c "$hk_probe" $hk_packages
}

hk_current=
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
  # With vllm_install the host's release is current's, whatever vllm_command says.
  [ -x "$hk_root/current/bin/python" ] && hk_current="$hk_root/current/bin/python"
  hk_release_of "$hk_command" "$hk_current"
else
  hk_release_of "$hk_command" "$(hk_interpreter_of "$hk_command")"
fi
printf '%s\n' "$hk_commands" | while IFS= read -r hk_other; do
  [ -z "$hk_other" ] || hk_release_of "$hk_other" "$(hk_interpreter_of "$hk_other")"
done
true
