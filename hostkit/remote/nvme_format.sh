# prepare_nvme on a blank device (hostkit.operations.swap), after swap_lib.sh. Set by the
# caller: hk_dev, hk_mount, hk_fstype (ext4 or xfs), hk_mount_options (for its fstab line).
# The same check as the snapshot's, again right before mkfs: the disk may have been used
# since. wipefs fails when it cannot probe; blkid cannot say so.
[ -b "$hk_dev" ] || hk_fail "$hk_dev is not a block device"
dd if="$hk_dev" of=/dev/null bs=4096 count=1 2>/dev/null || hk_fail "cannot read $hk_dev"
hk_found=$(wipefs --no-act --noheadings --output TYPE -- "$hk_dev") || hk_fail "wipefs cannot probe $hk_dev; not formatting it"
hk_found="$hk_found $(blkid -p -o value -s TYPE -s PTTYPE -- "$hk_dev" || true) $(lsblk -n -r -o PATH -- "$hk_dev" | tail -n +2)"
hk_found=$(echo $hk_found)
[ -z "$hk_found" ] || hk_fail "refusing to format $hk_dev: it is not blank: it carries $hk_found"
hk_uuid=$(cat /proc/sys/kernel/random/uuid)
case $hk_fstype in
  ext4) mkfs.ext4 -q -U "$hk_uuid" "$hk_dev" ;;
  xfs) mkfs.xfs -q -m uuid="$hk_uuid" "$hk_dev" ;;
esac
if command -v udevadm > /dev/null; then udevadm settle || true; fi
hk_fstab_put mount "$hk_mount" "UUID=$hk_uuid $hk_mount $hk_fstype $hk_mount_options 0 2"
hk_reload_if_fstab_changed
mkdir -p -- "$hk_mount"
mount --fstab "$hk_fstab" "$hk_mount"
[ "$(findmnt -n -o SOURCE --mountpoint "$hk_mount")" = "$(readlink -f -- "$hk_dev")" ] || hk_fail "$hk_mount does not show $hk_dev after mount"
