# `hostkit doctor`'s parts of one vLLM unit. hostkit.doctor.gather sets before it: hk_mark,
# unit, hk_unit_properties, hk_cgroup_files (the memory files to read, v2 and v1 names), and
# the hk_show functions (remote/systemctl_show.sh).
# hk_unit_parts UNIT SUFFIX: sets cg (UNIT's ControlGroup) and pid (its MainPID), which the
# later parts read, and prints the parts unit (its properties), cgroup (its memory cgroup
# files as `file=value`) and argv (its main process's command line, one word a line), each
# name followed by SUFFIX: empty for the host's vLLM unit, ` UNIT` for one of vllm_instances.
hk_unit_parts() {
  unit=$1 hk_of=$2
  cg=; pid=0
  if command -v systemctl >/dev/null 2>&1; then
    cg=$(hk_show_value "$unit" ControlGroup)
    pid=$(hk_show_value "$unit" MainPID)
    echo "${hk_mark}unit${hk_of}@@"
    # shellcheck disable=SC2086 # one word per property
    hk_show "$unit" $hk_unit_properties
  fi
  echo "${hk_mark}cgroup${hk_of}@@"
  if [ -n "$cg" ]; then for d in "/sys/fs/cgroup$cg" "/sys/fs/cgroup/memory$cg"; do
    for f in $hk_cgroup_files; do v=$(cat "$d/$f" 2>/dev/null) && echo "$f=$v"; done
    sed 's/^\([a-z_]*\) /memory.events.\1=/' "$d/memory.events" 2>/dev/null
  done; fi
  echo "${hk_mark}argv${hk_of}@@"
  [ "${pid:-0}" != 0 ] && { tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null
  true
}
hk_unit_parts "$unit" ""
