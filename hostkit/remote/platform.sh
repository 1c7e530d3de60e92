# hostkit's platform probe (hostkit.facts.platform parses it): SELinux, the python the
# probes run, tuned's active profiles, how NVIDIA driver packages get upgraded, and the
# packages the vLLM install needs (hostkit.vllm.os_packages).
# POSIX sh; every part is optional on the host, so nothing here may fail the whole.
# Files are read under $HK_PLATFORM_ROOT (unset on hosts) so tests can run it on recorded trees.
hk_part() { echo "%%hostkit-platform:$1"; }
hk_r=${HK_PLATFORM_ROOT:-}

hk_part selinux
# enforce holds 1 (enforcing) or 0 (permissive); no selinuxfs means SELinux is off.
if [ -r "$hk_r/sys/fs/selinux/enforce" ]; then IFS= read -r hk_v < "$hk_r/sys/fs/selinux/enforce"; echo "enforce=$hk_v"; fi

hk_part python
# RHEL 8 has no python3 on PATH unless a python3 module is installed; its own tools use this one.
command -v python3 || { [ -x "$hk_r/usr/libexec/platform-python" ] && echo /usr/libexec/platform-python; } || true

hk_part tuned
hk_tuned_seen=' '
hk_tuned_show() {
  case $hk_tuned_seen in *" $1 "*) return 0 ;; esac
  hk_tuned_seen="$hk_tuned_seen$1 "
  # tuned 2.23 moved profiles into profiles/; /etc overrides /usr/lib.
  for hk_d in "$hk_r/etc/tuned/profiles" "$hk_r/etc/tuned" "$hk_r/usr/lib/tuned/profiles" "$hk_r/usr/lib/tuned"; do
    [ -r "$hk_d/$1/tuned.conf" ] || continue
    echo "profile $1"
    sed 's/^/| /' "$hk_d/$1/tuned.conf"
    for hk_inc in $(sed -n 's/^[[:space:]]*include[[:space:]]*=//p' "$hk_d/$1/tuned.conf" | tr ',' ' '); do
      hk_tuned_show "$hk_inc"
    done
    return 0
  done
  echo "missing $1"
}
# tuned.service runs `tuned -l -P`, which keeps its pid in /run/tuned/tuned.pid: no systemctl
# process (on a slow host each costs a noticeable fraction of a second, in every snapshot).
hk_v=
[ -r "$hk_r/run/tuned/tuned.pid" ] && IFS= read -r hk_v < "$hk_r/run/tuned/tuned.pid"
if [ -n "$hk_v" ] && [ -d "$hk_r/proc/$hk_v" ]; then
  hk_v=
  [ -r "$hk_r/etc/tuned/active_profile" ] && IFS= read -r hk_v < "$hk_r/etc/tuned/active_profile"
  echo "active $hk_v"
  for hk_p in $hk_v; do hk_tuned_show "$hk_p"; done
fi

hk_part container
# What systemd says first, then what it reads itself: the file its PID 1 writes in a container,
# then the container= variable container managers give PID 1 (its environ is root's to read).
# A recorded tree (tests) has no systemd to ask.
if [ -z "$hk_r" ] && command -v systemd-detect-virt >/dev/null 2>&1; then
  echo "detect-virt $(systemd-detect-virt --container 2>/dev/null)"
elif [ -r "$hk_r/run/systemd/container" ]; then
  IFS= read -r hk_v < "$hk_r/run/systemd/container"; echo "run-file $hk_v"
elif [ -r "$hk_r/proc/1/environ" ]; then
  echo "environ $(tr '\0' '\n' < "$hk_r/proc/1/environ" | sed -n 's/^container=//p')"
fi

hk_part cgroup
# Whether the kernel will apply a unit's memory limit. cgroup v2: the controllers this tree
# may use (a container's root cgroup lists what its host delegated). cgroup v1: how the memory
# hierarchy is mounted; systemd-nspawn mounts it read-only on a hybrid host, where systemd
# accepts MemoryMax= but cannot create the unit's memory cgroup.
[ -r "$hk_r/sys/fs/cgroup/cgroup.controllers" ] &&
  { hk_v=; IFS= read -r hk_v < "$hk_r/sys/fs/cgroup/cgroup.controllers"; echo "controllers $hk_v"; }
# mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
[ -r "$hk_r/proc/self/mountinfo" ] && while read -r hk_a hk_a hk_a hk_a hk_mp hk_opts hk_rest; do
  hk_rest=${hk_rest#*"- "}
  case $hk_rest in "cgroup "*) ;; *) continue ;; esac
  case ",${hk_rest##* }," in *,memory,*) echo "memory-mount $hk_mp $hk_opts" ;; esac
done < "$hk_r/proc/self/mountinfo"

hk_part packages
# The interpreter of hostkit's release venvs, resolved: Debian's /usr/bin/python3.11 makes a
# venv only with python3.11-venv installed.
hk_v=$(command -v python3) && hk_v=$(readlink -f "$hk_v") && echo "python3 $hk_v"
if [ -r "$hk_r/var/lib/dpkg/status" ]; then
  echo "manager apt"
  # dpkg's database read directly: one awk instead of dpkg-query. Status is "WANT ok installed".
  # It exits 0 when a driver package is installed.
  hk_v=$(awk '/^Package: / { p = $2 }
    /^Status: / && $NF == "installed" && p ~ /^(nvidia-|libnvidia-|linux-(modules|objects|signatures)-nvidia-|cuda-drivers)/ {
      print "package " p " " $2; d = 1 }
    /^Status: / && $NF == "installed" && p ~ /^(python3(\.[0-9]+)?-venv|libnuma1)$/ { print "installed " p }
    END { exit !d }' "$hk_r/var/lib/dpkg/status")
  hk_drivers=$?
  [ -z "$hk_v" ] || printf '%s\n' "$hk_v"
  # How upgrades run matters only where there is a driver package to upgrade.
  if [ "$hk_drivers" = 0 ]; then
    command -v unattended-upgrade >/dev/null 2>&1 && echo "auto-upgrader unattended-upgrades"
    command -v systemctl >/dev/null 2>&1 && echo "timer apt-daily-upgrade.timer $(systemctl is-enabled apt-daily-upgrade.timer 2>/dev/null)"
    apt-config dump 2>/dev/null | sed -n \
      -e 's/^\(APT::Periodic::Enable\) "\(.*\)";$/config \1 \2/p' \
      -e 's/^\(APT::Periodic::Unattended-Upgrade\) "\(.*\)";$/config \1 \2/p' \
      -e 's/^Unattended-Upgrade::Package-Bl[a-z]*list:: "\(.*\)";$/blocklist \1/p'
  fi
elif command -v rpm >/dev/null 2>&1; then
  echo "manager dnf"
  rpm -qa --qf 'installed %{NAME}\n' numactl-libs 2>/dev/null
  hk_v=$(rpm -qa --qf 'package %{NAME} install\n' 'nvidia-*' 'kmod-nvidia*' 'libnvidia-*' 'cuda-drivers*' 2>/dev/null)
  if [ -n "$hk_v" ]; then
    printf '%s\n' "$hk_v"
    command -v dnf-automatic >/dev/null 2>&1 && echo "auto-upgrader dnf-automatic"
    command -v systemctl >/dev/null 2>&1 && for hk_t in dnf-automatic.timer dnf-automatic-install.timer; do
      echo "timer $hk_t $(systemctl is-enabled "$hk_t" 2>/dev/null)"
    done
    # dnf-automatic.timer only downloads unless automatic.conf says apply_updates = yes.
    [ -r "$hk_r/etc/dnf/automatic.conf" ] && sed -n \
      's/^[[:space:]]*apply_updates[[:space:]]*=[[:space:]]*\([a-z]*\).*$/config apply_updates \1/p' "$hk_r/etc/dnf/automatic.conf"
    [ -r "$hk_r/etc/dnf/plugins/versionlock.list" ] && sed -n \
      's/^\([^#].*nvidia.*\)$/versionlock \1/p' "$hk_r/etc/dnf/plugins/versionlock.list"
    [ -r "$hk_r/etc/dnf/dnf.conf" ] && sed -n \
      's/^[[:space:]]*exclude\(pkgs\)\{0,1\}[[:space:]]*=[[:space:]]*\(.*\)$/exclude \2/p' "$hk_r/etc/dnf/dnf.conf"
  fi
fi
true
