# The system section (hostkit.facts.system). /proc is read by the shell and uname -r is
# /proc/sys/kernel/osrelease: on a slow host each process costs a noticeable fraction of a second.
hk_nl='
'
hk_put() { hk_v=; IFS= read -r hk_v < "$2"; printf '%s=%s\n' "$1" "$hk_v"; }
hk_put hostname /proc/sys/kernel/hostname
. /etc/os-release 2>/dev/null; echo "os_id=$ID"; echo "os_version_id=$VERSION_ID"
hk_put kernel /proc/sys/kernel/osrelease
hk_put boot_id /proc/sys/kernel/random/boot_id
echo "cpu_count=$(nproc)"
# cgroup.controllers exists only where cgroup2 is mounted: stat is for the others.
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then echo cgroup_fs=cgroup2fs; else echo "cgroup_fs=$(stat -fc %T /sys/fs/cgroup)"; fi
hk_v=$(systemctl --version 2>/dev/null)
printf 'systemd=%s\n' "${hk_v%%"$hk_nl"*}"
hk_put cmdline /proc/cmdline
while IFS= read -r hk_v; do printf 'meminfo:%s\n' "$hk_v"; done < /proc/meminfo
