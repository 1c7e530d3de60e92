hk_nl='
'
hk_cat() { while IFS= read -r hk_l || [ -n "$hk_l" ]; do printf '%s\n' "$hk_l"; done < "$1"; }
hk_prefix() {
  [ -n "$2" ] || return 0
  while IFS= read -r hk_l; do printf '%s%s\n' "$1" "$hk_l"; done <<EOF
$2
EOF
}
hk_nvme_namespace() {
  hk_n=${1#nvme}; hk_c=${hk_n%%n*}; hk_m=${hk_n#*n}
  case $hk_n in "$1"|"$hk_c") return 1 ;; esac
  case $hk_c in ""|*[!0-9]*) return 1 ;; esac
  case $hk_m in ""|*[!0-9]*) return 1 ;; esac
}
hk_seen=$hk_nl
hk_first() {
  case $hk_seen in *"$hk_nl$1$hk_nl"*) return 1 ;; esac
  hk_seen=$hk_seen$1$hk_nl
}
