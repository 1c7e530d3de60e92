# Formats a blank NVMe device, after swap_lib.sh: prepare_nvme (hostkit.operations.swap) and
# the boot unit (nvme_boot.sh) run this same file. Set by the caller: hk_dev, hk_fstype (ext4
# or xfs), hk_fs_label (what marks the filesystem as hostkit's, with no fstab line).
# The same check as the snapshot's, again right before mkfs: the disk may have been used
# since. wipefs fails when it cannot probe; blkid cannot say so.
[ -b "$hk_dev" ] || hk_fail "$hk_dev is not a block device"
dd if="$hk_dev" of=/dev/null bs=4096 count=1 2>/dev/null || hk_fail "cannot read $hk_dev"
hk_found=$(wipefs --no-act --noheadings --output TYPE -- "$hk_dev") || hk_fail "wipefs cannot probe $hk_dev; not formatting it"
hk_found="$hk_found $(blkid -p -o value -s TYPE -s PTTYPE -- "$hk_dev" || true) $(lsblk -n -r -o PATH -- "$hk_dev" | tail -n +2)"
hk_found=$(echo $hk_found)
[ -z "$hk_found" ] || hk_fail "refusing to format $hk_dev: it is not blank: it carries $hk_found"
case $hk_fstype in
  ext4) mkfs.ext4 -q -L "$hk_fs_label" "$hk_dev" ;;
  xfs) mkfs.xfs -q -L "$hk_fs_label" "$hk_dev" ;;
esac
if command -v udevadm > /dev/null; then udevadm settle || true; fi
