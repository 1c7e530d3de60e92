# vllm-hostkit-nvme.service (hostkit.operations.nvme_boot): at each boot, nvme_device's
# filesystem and the swap file under it, back as planned. An instance-store disk comes back
# blank after a cloud stop/start: it is formatted (only if blank, by nvme_format.sh, the
# deploy's own check and mkfs) and the swap file made again (swap_lib.sh's hk_create). Runs
# as `sh nvme_boot.sh SETTINGS`; SETTINGS (root's, written by the deploy from the plan) sets
# hk_lib, hk_by_id, hk_mount, hk_fstype, hk_fs_label, hk_wait_s, hk_swap_file (empty: none
# under the mount), hk_swap_size, hk_swap_priority, hk_swap_method and the free-space reserve.
# Every line it prints goes to the journal.
. "$1"
. "$hk_lib/swap_lib.sh"
hk_say() { echo "$*"; }

# By model and serial, never nvmeXnY: those names can change order between boots.
hk_waited=0
while [ ! -e "$hk_by_id" ]; do
  [ "$hk_waited" -lt "$hk_wait_s" ] || hk_fail "$hk_by_id did not appear within $hk_wait_s s:" \
    "$hk_mount and its swap file stay absent; vLLM starts without them"
  sleep 1
  hk_waited=$((hk_waited + 1))
done
hk_dev=$(readlink -f -- "$hk_by_id")
echo "$hk_by_id is $hk_dev (waited $hk_waited s)"

hk_source=$(findmnt -n -o SOURCE --mountpoint "$hk_mount" || true)
if [ -n "$hk_source" ]; then
  [ "$hk_source" = "$hk_dev" ] || hk_fail "$hk_mount has $hk_source mounted, not $hk_by_id: leaving both alone"
  echo "$hk_mount is already mounted"
else
  # hostkit's own: ext4 or xfs with its label, on the whole disk (no partition table).
  hk_type=$(blkid -p -o value -s TYPE -- "$hk_dev" || true)
  hk_found_label=$(blkid -p -o value -s LABEL -- "$hk_dev" || true)
  hk_pttype=$(blkid -p -o value -s PTTYPE -- "$hk_dev" || true)
  hk_ours=
  case $hk_type in ext4|xfs) [ -n "$hk_pttype" ] || [ "$hk_found_label" != "$hk_fs_label" ] || hk_ours=1 ;; esac
  if [ -n "$hk_ours" ]; then
    echo "$hk_dev holds hostkit's filesystem (label $hk_fs_label)"
  else
    . "$hk_lib/nvme_format.sh"
    echo "$hk_dev was blank: made $hk_fstype, label $hk_fs_label"
  fi
  hk_mount_fs "$hk_dev" "$hk_mount"
  echo "mounted $hk_dev at $hk_mount"
fi

[ -n "$hk_swap_file" ] || exit 0
if hk_active "$hk_swap_file"; then
  echo "$hk_swap_file is already active"
  exit 0
fi
# A file the deploy would keep (a swap signature, the planned size, no holes) is swapped on;
# anything else there is made again, as the deploy does with an inactive one.
hk_stat=$(stat -c '%s %b %B' -- "$hk_swap_file" 2>/dev/null || true)
hk_sig=$(blkid -p -o value -s TYPE -- "$hk_swap_file" 2>/dev/null || true)
set -- $hk_stat
if [ "$hk_sig" = swap ] && [ "${1:-}" = "$hk_swap_size" ] && [ $(( ${2:-0} * ${3:-0} )) -ge "$hk_swap_size" ]; then
  swapon -p "$hk_swap_priority" "$hk_swap_file"
  hk_active "$hk_swap_file" || hk_fail "swapon $hk_swap_file did not activate it (see dmesg)"
  echo "swapped on $hk_swap_file"
else
  hk_create "$hk_swap_file" "$hk_swap_size" "$hk_swap_priority" "$hk_swap_method"
  hk_partial=
  echo "made $hk_swap_file ($((hk_swap_size / 1048576)) MiB, priority $hk_swap_priority) and swapped it on"
fi
