# `hostkit doctor`'s unit cgroup and process parts, after the unit part has set cg (its
# ControlGroup) and pid (its MainPID). hostkit.doctor.gather sets before it: hk_mark,
# hk_with_proc (`yes`: list processes with ps; a local run reads them with psutil instead),
# hk_cgroup_files (the memory files to read, v2 and v1 names) and hk_ps_s (ps's
# deadline: reading a process's command line waits on its memory map, which a process stuck
# in the kernel can hold); and hk_deadline.
echo "${hk_mark}cgroup@@"
if [ -n "$cg" ]; then for d in "/sys/fs/cgroup$cg" "/sys/fs/cgroup/memory$cg"; do
  for f in $hk_cgroup_files; do v=$(cat "$d/$f" 2>/dev/null) && echo "$f=$v"; done
  sed 's/^\([a-z_]*\) /memory.events.\1=/' "$d/memory.events" 2>/dev/null
done; fi
echo "${hk_mark}argv@@"
[ "${pid:-0}" != 0 ] && { tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null
if [ "$hk_with_proc" = yes ]; then
  echo "${hk_mark}ps@@"
  hk_deadline "$hk_ps_s" ps ps -e -ww -o pid=,ppid=,rss=,args= 2>/dev/null
fi
