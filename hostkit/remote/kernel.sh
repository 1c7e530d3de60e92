live=
hk_trim() { t=${1#"${1%%[![:space:]]*}"}; t=${t%"${t##*[![:space:]]}"}; }
hk_path() {
  case $1 in
    */*) p=$1; head=${1%%[./]*}; sep=${1#"$head"}; sep=${sep%"${sep#?}"}
         if [ "$sep" = . ]; then p=$(printf %s "$1" | tr ./ /.); fi ;;
    *) set -f; ifs=$IFS; IFS=.; set -- $1; IFS=/; p=$*; IFS=$ifs; set +f ;;
  esac
}
hk_settings() {
  n=0
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1)); hk_trim "$line"
    case $t in ''|'#'*|';'*) ;; *) printf '%s %s:%s\n' "$1" "$n" "$line" ;; esac
  done < "$2"
}
hk_ours() {
  while IFS= read -r line || [ -n "$line" ]; do
    printf 'sysctl.ours %s\n' "$line"; hk_trim "$line"
    case $t in '#'*|';'*) continue ;; *=*) ;; *) continue ;; esac
    hk_trim "${t%%=*}"; key=${t#-}; hk_trim "$key"
    [ -n "$t" ] || continue
    hk_path "$t"
    if [ -f "/proc/sys/$p" ]; then live="$live /proc/sys/$p"; else printf 'sysctl.missing %s\n' "$p"; fi
  done < "$1"
}
if [ -d "$THP" ]; then
  for name in enabled defrag; do v=; IFS= read -r v < "$THP/$name"; printf 'thp.%s %s\n' "$name" "$v"; done
else echo thp.absent; fi
if [ -f "$UNIT" ]; then
  echo thp.unit-file
  while IFS= read -r line || [ -n "$line" ]; do printf 'thp.unit %s\n' "$line"; done < "$UNIT"
fi
[ -L "$WANTS" ] && echo thp.unit-enabled
for dir in $DIRS; do
  # On merged-usr hosts /lib is /usr/lib: list it once.
  [ "$dir" = /lib/sysctl.d ] && [ "$dir" -ef /usr/lib/sysctl.d ] && continue
  for f in "$dir"/*.conf; do
    [ -e "$f" ] || continue
    printf 'sysctl.file %s\n' "$f"
    [ -L "$f" ] && printf 'sysctl.link %s\n' "$(readlink -f "$f")"
    if [ "$f" = "$OURS" ]; then hk_ours "$f"; else hk_settings sysctl.line "$f"; fi
  done
done
if [ -f "$CONF" ]; then echo sysctl.conf-file; hk_settings sysctl.conf-line "$CONF"; fi
for p in $WANTED; do
  if [ -f "/proc/sys/$p" ]; then live="$live /proc/sys/$p"; else printf 'sysctl.missing %s\n' "$p"; fi
done
# One awk for all live values: a /proc/sys number read in pieces (the shell's read takes a
# byte at a time) yields only its first byte.
[ -n "$live" ] && awk '{ f = FILENAME; sub(/^.*\/proc\/sys\//, "", f); print "sysctl.live " f "=" $0 }' $live
true
