#!/usr/bin/env bash
# hostkit on a GPU host against itself through `@local` (issue 32), as a self-hosted CI runner
# there would run it: verify and the pytest plugin, doctor and plan telling GPU memory held in
# vLLM's unit's cgroup from memory held outside it, and plan's exit status for a driver below
# the CUDA build's floor. Run from the checkout's root on the device machine (no systemd, no
# network; hostkit and its dependencies installed from wheels in .whl), outputs under $OUT.
set -u
. scripts/device_prelude.sh
UNIT_CG=/sys/fs/cgroup/system.slice/vllm.service

step() { echo; echo "## $*"; }
held_pids() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr -d ' '; }
hold() {  # GiB; prints the holder's pid once its memory is allocated
  python3 -c "import torch,time,sys; x=torch.empty(int(sys.argv[1])*2**30, dtype=torch.uint8, device='cuda'); print('held', flush=True); time.sleep(3600)" "$1" >"/tmp/hold-$1.log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do grep -q held "/tmp/hold-$1.log" && break; sleep 0.5; done
  echo "$pid"
}

step "the host"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
command -v systemctl || echo "no systemctl"
swappiness=$(cat /proc/sys/vm/swappiness)
thp_enabled=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)
thp_defrag=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/defrag)
echo "swappiness $swappiness, THP $thp_enabled/$thp_defrag"

# The host as it is: its own swappiness and THP, no swap, no vLLM: verify checks the GPU policy,
# the kernel settings and the kernel log.
cat > /tmp/inv-verify.py <<EOF
hosts = [("@local", {"gpu_required": True, "gpu_count": 1, "swap_enabled": False, "vllm_enabled": False,
                     "monitoring_enabled": False, "sysctl": {"vm.swappiness": "$swappiness"},
                     "thp_enabled": "$thp_enabled", "thp_defrag": "$thp_defrag"})]
EOF
# vLLM planned at 0.85 of the GPU beside what others hold.
cat > /tmp/inv-vllm.py <<'EOF'
hosts = [("@local", {"gpu_required": True, "swap_enabled": False, "monitoring_enabled": False,
                     "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "vllm_gpu_memory_utilization": 0.85})]
EOF

step "hostkit verify /tmp/inv-verify.py (@local)"
$HK verify /tmp/inv-verify.py --junitxml "$OUT/verify.xml"; echo "exit $?"
step "hostkit verify --connection ssh (ignored for @local)"
$HK verify /tmp/inv-verify.py --connection ssh >/dev/null; echo "exit $?"
step "pytest --pyinfra-inventory /tmp/inv-verify.py tests/host"
python3 -m pytest --pyinfra-inventory /tmp/inv-verify.py tests/host -p no:cacheprovider -q --junitxml "$OUT/plugin.xml"
echo "exit $?"

step "GPU memory: 40 GiB held in vLLM's unit's cgroup ($UNIT_CG), 30 GiB outside"
mkdir -p "$UNIT_CG"
inside=$(hold 40); echo "$inside" > "$UNIT_CG/cgroup.procs"
outside=$(hold 30)
echo "inside pid $inside: $(cat /proc/$inside/cgroup)"
echo "outside pid $outside: $(cat /proc/$outside/cgroup)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
step "hostkit doctor /tmp/inv-vllm.py (@local)"
$HK doctor /tmp/inv-vllm.py --format json > "$OUT/doctor.json"; echo "exit $?"
$HK doctor /tmp/inv-vllm.py; echo "exit $?"
step "hostkit plan /tmp/inv-vllm.py (@local), the outsider holding 30 GiB"
$HK plan /tmp/inv-vllm.py --format json > "$OUT/plan.json"; echo "exit $?"
$HK plan /tmp/inv-vllm.py; echo "exit $?"
step "the outsider gone: plan again (vLLM's own 40 GiB stays vLLM's)"
kill "$outside"; for _ in $(seq 60); do held_pids | grep -qx "$outside" || break; sleep 0.5; done
$HK plan /tmp/inv-vllm.py; echo "exit $?"
$HK doctor /tmp/inv-vllm.py; echo "exit $?"

step "plan from this host's real facts with the driver set below vLLM 0.33.0's CUDA 13.0 floor"
python3 - <<'EOF' > "$OUT/facts.json"
import json
from hostkit.fleet.planning import gather_planning_facts
facts = {name: fact.model_dump(mode="json") for name, fact in gather_planning_facts("/tmp/inv-vllm.py", None).items()}
print(json.dumps(facts, indent=1))
EOF
python3 - "$OUT/facts.json" <<'EOF'
import json, sys
facts = json.load(open(sys.argv[1]))
for fact in facts.values():
    fact["driver_version"] = "570.133.20"
    fact["vllm_installed"] = {"package": "vllm", "version": "0.33.0", "torch": "2.11.0", "cuda": "13.0",
                              "where": "/opt/vllm/bin/python3"}
json.dump(facts, open("/tmp/facts-old-driver.json", "w"))
EOF
$HK plan /tmp/inv-vllm.py --facts /tmp/facts-old-driver.json --format json > "$OUT/plan-driver.json"; echo "exit $?"
kill "$inside" 2>/dev/null
exit 0
