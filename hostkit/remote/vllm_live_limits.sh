# The running unit's memory limits written to its cgroup as systemd now has them, after a
# daemon-reload. systemd up to 256 does this itself on daemon-reload; 257 (Debian 13) only when
# the unit next starts, so a limit changed without a restart stayed the old one in the kernel
# (seen in the lab). systemd 257 has no cgroup v1, so only v2's files are written.
# The caller sets hk_unit. Each step has a deadline: a stuck systemd or a reclaim that cannot end.
hk_group=$(timeout 30 systemctl show -p ControlGroup --value "$hk_unit")
hk_dir=/sys/fs/cgroup$hk_group
if [ -z "$hk_group" ] || [ ! -f "$hk_dir/memory.max" ]; then
  exit 0  # not running (the next start applies them), or not cgroup v2
fi
for hk_pair in MemoryHigh:memory.high MemoryMax:memory.max MemorySwapMax:memory.swap.max; do
  hk_file=$hk_dir/${hk_pair#*:}
  [ -f "$hk_file" ] || continue  # memory.swap.max: no swap accounting in this kernel
  hk_value=$(timeout 30 systemctl show -p "${hk_pair%%:*}" --value "$hk_unit")
  [ "$hk_value" = infinity ] && hk_value=max
  [ "$(cat "$hk_file")" = "$hk_value" ] && continue
  timeout 120 sh -c 'echo "$1" > "$2"' - "$hk_value" "$hk_file" \
    || { echo "could not write $hk_value to $hk_file within 120 s" >&2; exit 1; }
done
