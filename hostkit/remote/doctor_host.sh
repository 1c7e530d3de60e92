# `hostkit doctor`'s host parts: memory and kernel tuning. hostkit.doctor.gather sets before
# it: hk_mark (the part marker's prefix) and hk_with_proc (`yes`: read /proc here; a local run
# reads memory and processes with psutil instead).
if [ "$hk_with_proc" = yes ]; then
  echo "${hk_mark}meminfo@@"
  cat /proc/meminfo
fi
echo "${hk_mark}vm@@"
echo "swappiness=$(cat /proc/sys/vm/swappiness 2>/dev/null)"
echo "thp_enabled=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
echo "thp_defrag=$(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
echo "cgroup_fs=$(stat -fc %T /sys/fs/cgroup 2>/dev/null)"
