#!/bin/sh
# The monitoring collector on a real GPU machine without systemd (the H200 reference host):
# one process holding GPU memory inside a vllm.service cgroup made by hand, one outside it.
# systemctl is a stand-in printing that unit's ControlGroup (the host has no systemd); the
# cgroups, /proc, nvidia-smi and the kernel log are real. Writes everything to $OUT.
set -eu
OUT=${OUT:-/tmp/monitoring-gpu-check}
mkdir -p "$OUT/bin" "$OUT/textfile" "$OUT/state"
CG=/sys/fs/cgroup/system.slice/vllm.service
mkdir -p "$CG"
HOLD='import sys, time, torch; x = torch.empty(int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda"); x.fill_(1); print("ready", flush=True); time.sleep(120)'
sh -c "echo \$\$ > $CG/cgroup.procs; exec python3 -c '$HOLD' 8" > "$OUT/inside.log" 2>&1 &
INSIDE=$!
python3 -c "$HOLD" 3 > "$OUT/outside.log" 2>&1 &
OUTSIDE=$!
for i in $(seq 120); do grep -q ready "$OUT/inside.log" && grep -q ready "$OUT/outside.log" && break; sleep 1; done
cat > "$OUT/bin/systemctl" <<STUB
#!/bin/sh
printf '%s\n' ActiveState=active SubState=running Result=success NRestarts=0 ControlGroup=/system.slice/vllm.service InvocationID=stand-in
STUB
chmod +x "$OUT/bin/systemctl"
nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits > "$OUT/query-gpu.csv"
nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits > "$OUT/query-compute-apps.csv"
for pid in $INSIDE $OUTSIDE; do cat /proc/$pid/cgroup > "$OUT/proc-$pid-cgroup"; done
echo "inside=$INSIDE outside=$OUTSIDE" > "$OUT/pids.txt"
PATH="$OUT/bin:$PATH" python3 - "$OUT" > "$OUT/cost.txt" <<'PY'
import json, resource, subprocess, sys, time
out = sys.argv[1]
runs = []
for _ in range(10):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(["python3", "-I", "-S", "hostkit/monitoring/collector.py", "--textfile-dir", out + "/textfile",
                    "--state-dir", out + "/state", "--interval", "15"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    runs.append([round(time.monotonic() - started, 3),
                 round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3)])
print(json.dumps({"runs_wall_cpu_s": runs}))
PY
cat "$OUT/textfile/hostkit.prom"
cat "$OUT/cost.txt"
kill $INSIDE $OUTSIDE 2>/dev/null || true
wait 2>/dev/null || true
rmdir "$CG" 2>/dev/null || true
