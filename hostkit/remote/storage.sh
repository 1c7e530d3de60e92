# The storage section (hostkit.facts.storage), after storage_helpers.sh. Set by the caller:
# hk_mark (the part marker), hk_lsblk_without_path (that part's name), hk_nvme_device (may be
# empty), hk_swap_file and hk_temp_suffix (the names a hostkit swap file can have),
# hk_swap_fstypes (space-separated), hk_nvme_files (the boot unit's files, space-separated;
# plain paths), hk_nvme_wants (its enablement link), and "$@": the directories the profile names.
echo "${hk_mark}swaps"; hk_cat /proc/swaps
echo "${hk_mark}lsblk"
# MOUNTPOINTS came in util-linux 2.37, PATH in 2.33: RHEL 8's 2.32 has neither.
lsblk -J -b -o NAME,PATH,TYPE,TRAN,FSTYPE,UUID,MOUNTPOINTS,SIZE 2>/dev/null ||
  lsblk -J -b -o NAME,PATH,TYPE,TRAN,FSTYPE,UUID,MOUNTPOINT,SIZE 2>/dev/null ||
  { echo "$hk_mark$hk_lsblk_without_path"; lsblk -J -b -o NAME,KNAME,TYPE,TRAN,FSTYPE,UUID,MOUNTPOINT,SIZE 2>/dev/null; }
echo "${hk_mark}df"; df -l -B1 -T -P 2>/dev/null
echo "${hk_mark}mounts"; hk_cat /proc/self/mounts
echo "${hk_mark}fstab"; hk_cat /etc/fstab 2>/dev/null
echo "${hk_mark}devices"
hk_device() {
  hk_first "device $1" || return 0
  echo "device $1"
  [ -b "$1" ] || return 0
  echo present
  # A plain /dev/NAME that is no symlink is its own real path: no readlink needed.
  case ${1#/dev/} in "$1"|*/*|.*|"") hk_real=$(readlink -f -- "$1") ;; *) hk_real=$1 ;; esac
  [ ! -L "$hk_real" ] || hk_real=$(readlink -f -- "$1")
  echo "realpath=$hk_real"
  # wipefs exits non-zero when it cannot probe; blkid cannot tell that from "nothing found".
  dd if="$1" of=/dev/null bs=4096 count=1 2>/dev/null || return 0
  hk_sigs=$(wipefs --no-act --noheadings --output TYPE -- "$1" 2>/dev/null) || return 0
  echo probed
  hk_prefix wipefs= "$hk_sigs"
  hk_out=$(blkid -p -o export -- "$1" 2>/dev/null)
  while IFS= read -r hk_l; do
    case $hk_l in TYPE=*|PTTYPE=*|UUID=*|LABEL=*) printf 'blkid:%s\n' "$hk_l" ;; esac
  done <<EOF
$hk_out
EOF
  # The device itself, then its descendants: partitions, and what sits on them.
  hk_out=$(lsblk -n -r -o PATH -- "$1" 2>/dev/null) ||
    hk_out=$(lsblk -n -r -o KNAME -- "$1" 2>/dev/null | sed "s|^|/dev/|")
  case $hk_out in *"$hk_nl"*) hk_prefix child= "${hk_out#*"$hk_nl"}" ;; esac
}
[ -z "$hk_nvme_device" ] || hk_device "$hk_nvme_device"
for b in /sys/block/nvme*; do ! hk_nvme_namespace "${b##*/}" || hk_device "/dev/${b##*/}"; done
echo "${hk_mark}by-id"
# udev's stable names (model and serial, WWN, EUI) and where each points, in one process.
[ ! -d /dev/disk/by-id ] || find /dev/disk/by-id -maxdepth 1 -name 'nvme-*' -printf '%f %l\n' 2>/dev/null
echo "${hk_mark}nvme-unit"
# One sha256sum, and none on a host without them. The paths are plain: split on purpose.
hk_present=
for f in $hk_nvme_files; do [ ! -e "$f" ] || hk_present="$hk_present $f"; done
[ -z "$hk_present" ] || sha256sum -- $hk_present 2>/dev/null | sed 's/^/sha256 /'
[ ! -L "$hk_nvme_wants" ] || echo enabled
echo "${hk_mark}dirs"
for d in "$@"; do
  e="$d"; while [ ! -d "$e" ]; do e=${e%/*}; e=${e:-/}; done
  m=$(stat -c %m -- "$e"); t=$(stat -f -c %T -- "$e")
  printf 'dir\t%s\t%s\t%s\t%s\n' "$m" "$t" "$e" "$d"
done
echo "${hk_mark}files"
# Each directory (kernel-escaped, as the tables spell it) is looked in once.
hk_files() {
  d=$1
  case $d in *\\*) d=$(printf '%b' "$d") ;; esac
  d=${d%/}; hk_first "dir $d" || return 0
  for f in "$d/$hk_swap_file" "$d/$hk_swap_file$hk_temp_suffix"; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    sig=$(blkid -p -o value -s TYPE -- "$f" 2>/dev/null)
    st=$(stat -c '%F|%s|%a|%u|%g|%b|%B' -- "$f")
    printf 'file\t%s\t%s\t%s\n' "$sig" "$st" "$f"
    # The SELinux label, where SELinux is on (stat %C fails without it).
    [ ! -e /sys/fs/selinux/enforce ] || printf 'label\t%s\t%s\n' "$(stat -c %C -- "$f")" "$f"
  done
}
for d in "$@"; do hk_files "$d"; done
while read -r src mp fstype rest; do
  case " $hk_swap_fstypes " in *" $fstype "*) hk_files "$mp" ;; esac
done < /proc/self/mounts
{ read -r rest; while read -r p rest; do
  case "$p" in */*) hk_files "${p%/*}" ;; esac
done; } < /proc/swaps
[ -r /etc/fstab ] && while read -r spec mp fstype rest; do
  case "$spec" in "#"*) continue ;; esac
  [ "$fstype" = swap ] && case "$spec" in */*) hk_files "${spec%/*}" ;; esac
done < /etc/fstab
true
