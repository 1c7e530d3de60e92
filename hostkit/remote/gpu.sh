# The snapshot's gpu section. hostkit.facts.gpu.GpuFact sets before it: hk_mark (the part
# marker's prefix), hk_query_fields and hk_apps_fields (nvidia-smi's --query-* lists),
# hk_smi_s (the deadline), hk_driver_version (the driver's /proc file), hk_pci and hk_nodes
# (sysfs' PCI devices and NUMA nodes); hk_deadline
# (hostkit.facts.deadline) and hk_kernel_log, set to read the Xid lines (hostkit.facts.kernel_log).
hk_any() { [ -e "$1" ] || [ -L "$1" ]; }
# The command line, NUL bytes as spaces, of each process whose comm is $1.
hk_cmdlines_of() {
  for c in /proc/[0-9]*/comm; do
    IFS= read -r n 2>/dev/null < "$c" && [ "$n" = "$1" ] || continue
    tr '\0' ' ' < "${c%/comm}/cmdline"; echo
  done
}
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "${hk_mark}query@@"
  hk_query=$(hk_deadline "$hk_smi_s" 'nvidia-smi --query-gpu' \
    nvidia-smi --query-gpu="$hk_query_fields" --format=csv,noheader,nounits 2>&1)
  hk_rc=$?; printf '%s\n' "$hk_query"; echo "${hk_mark}query-rc@@ $hk_rc"
  # Each GPU's PCI device's NUMA node, by the bus id the query printed (its second column):
  # nvidia-smi writes 00000000:1B:00.0, sysfs names the device 0000:1b:00.0. One tr for all.
  echo "${hk_mark}numa@@"
  printf '%s\n' "$hk_query" | tr '[:upper:]' '[:lower:]' | while IFS=', ' read -r hk_index hk_bus hk_rest; do
    case $hk_index in ''|*[!0-9]*) continue ;; esac
    hk_domain=${hk_bus%%:*}
    while [ ${#hk_domain} -gt 4 ] && [ "${hk_domain#0}" != "$hk_domain" ]; do hk_domain=${hk_domain#0}; done
    hk_node=?
    IFS= read -r hk_node 2>/dev/null < "$hk_pci/$hk_domain:${hk_bus#*:}/numa_node"
    echo "gpu $hk_index ${hk_node:-?}"
  done
  # grep, not read: dash's read takes a byte at a time, and a node's cpulist answers a 1-byte
  # read with nothing (measured on Linux 6.18). Lines are PATH:CPULIST.
  grep -H '' "$hk_nodes"/node[0-9]*/cpulist 2>/dev/null
  echo "${hk_mark}apps@@"
  hk_apps=$(hk_deadline "$hk_smi_s" 'nvidia-smi --query-compute-apps' \
    nvidia-smi --query-compute-apps="$hk_apps_fields" --format=csv,noheader,nounits 2>&1)
  hk_rc=$?; printf '%s\n' "$hk_apps"; echo "${hk_mark}apps-rc@@ $hk_rc"
  echo "${hk_mark}procs@@"
  printf '%s\n' "$hk_apps" | while IFS=', ' read -r hk_pid hk_rest; do
    case $hk_pid in ''|*[!0-9]*) continue ;; esac
    IFS= read -r hk_comm 2>/dev/null < "/proc/$hk_pid/comm" && echo "$hk_pid comm $hk_comm"
    while IFS= read -r hk_cg; do echo "$hk_pid cgroup $hk_cg"; done 2>/dev/null < "/proc/$hk_pid/cgroup"
  done
else
  echo "${hk_mark}no-nvidia-smi@@"
fi
echo "${hk_mark}version@@"
[ -e "$hk_driver_version" ] && cat "$hk_driver_version" 2>/dev/null
echo "${hk_mark}modules@@"
[ -r /proc/modules ] && while IFS= read -r m; do case $m in nvidia*) printf '%s\n' "$m" ;; esac; done < /proc/modules
echo "${hk_mark}nodes@@"
hk_any /dev/nvidia* && ls -ld /dev/nvidia* 2>/dev/null
echo "${hk_mark}persistenced@@"
hk_cmdlines_of nvidia-persiste
echo "${hk_mark}xid@@"
if [ ! -e "$hk_driver_version" ]; then
  echo source=no-driver; echo total=0
else
  hk_kernel_log
fi
if hk_any /dev/nvidia-nvswitch*; then
  echo "${hk_mark}fabricmanager@@"
  hk_cmdlines_of nv-fabricmanage | sed 's/^/process: /'
  nv-fabricmanager --version 2>&1 | sed 's/^/version: /'
fi
true
