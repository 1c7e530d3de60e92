# Defines hk_kernel_log: this boot's kernel log, from `journalctl -k -b`, else `dmesg`.
# hostkit.facts.kernel_log sets before it: hk_log_match (an ERE: the lines worth keeping),
# hk_log_limit and hk_log_keep (keep the first or the last hk_log_limit of them),
# hk_log_s (the deadline) and hk_timed_out; and hk_deadline (hostkit.facts.deadline).
#
# It prints `source=journalctl|dmesg|none`, the kept lines, then `total=N` (how many
# matched). A source that prints no line at all cannot be read here; `none` means no
# source could: "unknown", never "clean". A read that timed out prints only its timeout
# line, without falling back to dmesg: partial is not clean.
hk_log_select() {
  awk -v pattern="$hk_log_match" -v limit="$hk_log_limit" -v keep="$hk_log_keep" -v timed_out="$hk_timed_out" '
    index($0, timed_out) == 1 { t = $0; next }
    $0 ~ pattern { n++; if (keep == "last") x[n % limit] = $0; else if (n <= limit) x[n] = $0 }
    END {
      if (t) { print t; exit }
      if (!NR) exit
      first = (keep == "last" && n > limit) ? n - limit + 1 : 1
      for (i = first; i <= n && i < first + limit; i++) print x[keep == "last" ? i % limit : i]
      print "total=" n+0
    }'
}
hk_kernel_log() {
  hk_log_out=
  command -v journalctl >/dev/null 2>&1 && hk_log_source=journalctl \
    && hk_log_out=$(hk_deadline "$hk_log_s" 'journalctl -k -b' \
      journalctl -k -b -q --no-pager -o short-iso 2>/dev/null | hk_log_select)
  [ -n "$hk_log_out" ] || { hk_log_source=dmesg; hk_log_out=$(hk_deadline "$hk_log_s" dmesg dmesg 2>/dev/null | hk_log_select); }
  [ -n "$hk_log_out" ] || hk_log_source=none
  echo "source=$hk_log_source"
  [ -z "$hk_log_out" ] || printf '%s\n' "$hk_log_out"
}
