set -eu
hk_fstab=/etc/fstab
hk_swaps=/proc/swaps
hk_meminfo=/proc/meminfo
hk_selinux_enforce=/sys/fs/selinux/enforce
hk_partial=
hk_fstab_changed=
hk_say() { echo "vllm-hostkit: $*" >&2; }
hk_fail() { hk_say "$*"; exit 1; }
hk_active() { awk -v p="$1" 'NR > 1 && $1 == p { found = 1 } END { exit !found }' "$hk_swaps"; }
hk_mem_kib() { awk -v k="$1:" '$1 == k { print $2; exit }' "$hk_meminfo"; }
hk_used_kib() { awk -v p="$1" 'NR > 1 && $1 == p { print $4; exit }' "$hk_swaps"; }
hk_on_exit() {
  hk_rc=$?
  if [ "$hk_rc" -ne 0 ] && [ -n "$hk_partial" ]; then
    if hk_active "$hk_partial"; then swapoff "$hk_partial" 2>/dev/null || true; fi
    if rm -f -- "$hk_partial" 2>/dev/null; then
      hk_say "failed part-way: removed the partial swap file $hk_partial; no fstab entry was written for it"
    else
      hk_say "failed part-way: could not remove the partial swap file $hk_partial"
    fi
  fi
  exit "$hk_rc"
}
trap hk_on_exit EXIT
# Succeeds when swapping off $1 is safe: MemAvailable covers its used pages plus a margin.
hk_check_swapoff() {
  hk_active "$1" || return 0
  hk_used=$(hk_used_kib "$1"); hk_avail=$(hk_mem_kib MemAvailable); hk_total=$(hk_mem_kib MemTotal)
  hk_margin=$(( hk_total / 20 )); [ "$hk_margin" -ge 262144 ] || hk_margin=262144
  [ $(( hk_used + hk_margin )) -gt "$hk_avail" ] || return 0
  hk_say "refusing to swapoff $1: it holds $(( hk_used / 1024 )) MiB of swapped-out pages;" \
    "swapoff needs those plus a $(( hk_margin / 1024 )) MiB margin ($(( (hk_used + hk_margin) / 1024 )) MiB)" \
    "of MemAvailable, and MemAvailable is $(( hk_avail / 1024 )) MiB"
  return 1
}
hk_swapoff() {
  hk_active "$1" || return 0
  hk_check_swapoff "$1" || exit 1
  swapoff "$1"
}
# hk_fstab_put swap|mount KEY LINE: replace the entries whose spec (swap) or mount point
# (mount) is KEY with LINE, or remove them when LINE is empty. Fields, not regexes.
hk_fstab_put() {
  hk_fstab_file=$(readlink -f -- "$hk_fstab")
  [ -e "$hk_fstab_file" ] || : > "$hk_fstab_file"
  HK_KIND=$1 HK_KEY=$2 HK_LINE=$3 awk '
    function ours() {
      if (ENVIRON["HK_KIND"] == "swap") return $3 == "swap" && $1 == ENVIRON["HK_KEY"]
      return $3 != "swap" && $2 == ENVIRON["HK_KEY"]
    }
    $1 !~ /^#/ && NF >= 3 && ours() { if (!put && ENVIRON["HK_LINE"] != "") print ENVIRON["HK_LINE"]; put = 1; next }
    { print }
    END { if (!put && ENVIRON["HK_LINE"] != "") print ENVIRON["HK_LINE"] }
  ' "$hk_fstab_file" > "$hk_fstab_file.vllm-hostkit.tmp"
  chmod 644 "$hk_fstab_file.vllm-hostkit.tmp"
  mv -f -- "$hk_fstab_file.vllm-hostkit.tmp" "$hk_fstab_file"
  hk_fstab_changed=1
}
hk_reload_if_fstab_changed() {
  if [ -n "$hk_fstab_changed" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
}
# hk_label FILE PATH: under SELinux, FILE gets the swap file type now (chcon), and PATH (the
# file's final name) a file-context rule so that a relabel keeps it, where semanage exists.
hk_label() {
  [ -e "$hk_selinux_enforce" ] || return 0
  if command -v semanage >/dev/null 2>&1; then
    hk_re=$(printf '%s' "$2" | sed 's/[].[\\*^$()+?{}|]/\\&/g')
    timeout 120 semanage fcontext -a -t swapfile_t "$hk_re" 2>/dev/null \
      || timeout 120 semanage fcontext -m -t swapfile_t "$hk_re" \
      || hk_fail "semanage fcontext -t swapfile_t $2 failed or timed out"
  fi
  chcon -t swapfile_t "$1"
}
# hk_create PATH SIZE_BYTES PRIORITY dd|nocow: a new active swap file, or a failure that
# leaves no file behind.
hk_create() {
  ! hk_active "$1" || hk_fail "$1 is an active swap area; not overwriting it"
  hk_dir=$(dirname -- "$1")
  mkdir -p -- "$hk_dir"
  hk_df=$(df -P -B1 -- "$hk_dir" | awk 'NR == 2 { print $2 " " $4 }')
  hk_fs_size=${hk_df% *}; hk_fs_avail=${hk_df#* }
  hk_reserve=$(( hk_fs_size / hk_reserve_fraction )); [ "$hk_reserve" -ge "$hk_reserve_min" ] || hk_reserve=$hk_reserve_min
  [ $(( $2 + hk_reserve )) -le "$hk_fs_avail" ] || hk_fail "not enough free space in $hk_dir for $1:" \
    "need $(( $2 / 1048576 )) MiB plus a $(( hk_reserve / 1048576 )) MiB reserve," \
    "$(( hk_fs_avail / 1048576 )) MiB available"
  hk_partial=$1
  rm -f -- "$1"
  (umask 077 && : > "$1")
  chown root:root "$1"
  chmod 600 "$1"
  hk_label "$1" "${1%.new}"
  if [ "$4" = nocow ]; then chattr +C "$1"; fi
  # O_DIRECT: gigabytes of zeros must not push the page cache (or vLLM) out of RAM.
  dd if=/dev/zero of="$1" bs=1M count="$2" iflag=count_bytes oflag=direct conv=fsync status=none
  mkswap "$1" > /dev/null
  swapon -p "$3" "$1"
  hk_active "$1" || hk_fail "swapon $1 returned success but /proc/swaps does not list it (see dmesg)"
}
# hk_resize PATH SIZE_BYTES PRIORITY dd|nocow, make-before-break: PATH.new is made and swapped
# on before PATH is swapped off and removed. The kernel refuses to rename or unlink an active
# swap file (EPERM), so PATH.new is swapped off for the instant of the rename.
hk_resize() {
  hk_create "$1.new" "$2" "$3" "$4"
  hk_swapoff "$1"
  hk_partial=
  rm -f -- "$1"
  hk_swapoff "$1.new"
  mv -f -- "$1.new" "$1"
  swapon -p "$3" "$1"
  hk_active "$1" || hk_fail "swapon $1 failed after the resize"
}
# hk_mount_fs DEV DIR: mount DEV's filesystem at DIR (no fstab line) and check it shows there.
hk_mount_fs() {
  mkdir -p -- "$2"
  mount -- "$1" "$2"
  [ "$(findmnt -n -o SOURCE --mountpoint "$2")" = "$(readlink -f -- "$1")" ] || hk_fail "$2 does not show $1 after mount"
}
# hk_set_fs_label DEV DIR LABEL: label DEV's mounted ext4 or xfs filesystem (at DIR), online.
hk_set_fs_label() {
  case $(findmnt -n -o FSTYPE --mountpoint "$2") in
    ext4) e2label "$1" "$3" ;;
    xfs) xfs_io -c "label -s $3" "$2" > /dev/null ;;
    *) hk_fail "cannot label the filesystem at $2: not ext4 or xfs" ;;
  esac
}
