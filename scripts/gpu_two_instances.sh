#!/usr/bin/env bash
# Two vLLM instances on one GPU (issue 35; run on the device tool's H200 kind): each planned with half of the GPU
# (gpu_memory_utilization 0.4) and its memory told from its sibling's and an outsider's by
# cgroup. PyTorch holders stand in for the serving engines, each moved into its instance's
# cgroup, made by hand where systemd puts it (/system.slice/system-vllm.slice/vllm@NAME.service:
# a template instance's slice; the device machine has no systemd).
# Run from the checkout's root on the device machine (no network; hostkit and its
# dependencies installed from wheels in .whl), outputs under $OUT.
set -u
. scripts/device_prelude.sh
CGROUPS=/sys/fs/cgroup/system.slice/system-vllm.slice

step() { echo; echo "## $*"; }
held_pids() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr -d ' '; }
hold() {  # GiB; prints the holder's pid once its memory is allocated
  python3 -c "import torch,time,sys; x=torch.empty(int(sys.argv[1])*2**30, dtype=torch.uint8, device='cuda'); print('held', flush=True); time.sleep(3600)" "$1" >"/tmp/hold-$1-$RANDOM.log" 2>&1 &
  local pid=$! log
  log=$(ls -t /tmp/hold-"$1"-*.log | head -1)
  for _ in $(seq 120); do grep -q held "$log" && break; sleep 0.5; done
  echo "$pid"
}
into() { mkdir -p "$CGROUPS/$1" && echo "$2" > "$CGROUPS/$1/cgroup.procs"; }

# Two instances on GPU 0, 0.4 of it each; the rest of each key from the host level.
cat > /tmp/inv-two.py <<'EOF'
hosts = [("@local", {"gpu_required": True, "swap_enabled": False, "monitoring_enabled": False,
                     "vllm_model": "Qwen/Qwen2.5-7B-Instruct",
                     "vllm_instances": {
                         "a": {"vllm_port": 8001, "gpus": [0], "vllm_gpu_memory_utilization": 0.4},
                         "b": {"vllm_port": 8002, "gpus": [0], "vllm_gpu_memory_utilization": 0.4}}})]
EOF
INSTANCES='{"a": {"vllm_port": 8001, "gpus": [0], "vllm_gpu_memory_utilization": 0.4}, "b": {"vllm_port": 8002, "gpus": [0], "vllm_gpu_memory_utilization": 0.4}}'

step "the host"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,memory.used --format=csv,noheader
stat -fc %T /sys/fs/cgroup
# Sizes in GiB from the GPU's own: an engine at 0.4 holds a little under 0.4 of it; the grown
# outsider still fits beside both engines but leaves either less than 0.4 of the GPU free.
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')
engine=$(( total_mib * 37 / 100 / 1024 )); small=$(( total_mib * 7 / 100 / 1024 )); large=$(( total_mib * 245 / 1000 / 1024 ))
echo "engines ${engine} GiB each, the outsider ${small} GiB, then ${large} GiB"

step "no holder: plan"
$HK plan /tmp/inv-two.py; echo "exit $?"

step "instance a's engine in $CGROUPS/vllm@a.service, b's in vllm@b.service, an outsider in the root cgroup"
a=$(hold "$engine"); into vllm@a.service "$a"
b=$(hold "$engine"); into vllm@b.service "$b"
outside=$(hold "$small")
for pid in "$a" "$b" "$outside"; do echo "pid $pid: $(cat /proc/$pid/cgroup)"; done
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader
step "hostkit plan /tmp/inv-two.py: both instances serving, each sees its own memory and the other's"
$HK plan /tmp/inv-two.py --format json > "$OUT/plan-serving.json"; echo "exit $?"
$HK plan /tmp/inv-two.py; echo "exit $?"
python3 scripts/gpu_plan_check.py --save-raw "$OUT/snapshot-serving.txt" --data "vllm_instances=$INSTANCES" >/dev/null; echo "snapshot saved, exit $?"

step "the outsider grows to ${large} GiB: neither instance fits beside its sibling and it"
kill "$outside"; for _ in $(seq 60); do held_pids | grep -qx "$outside" || break; sleep 0.5; done
outside=$(hold "$large")
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
$HK plan /tmp/inv-two.py; echo "exit $?"
python3 scripts/gpu_plan_check.py --save-raw "$OUT/snapshot-crowded.txt" --data "vllm_instances=$INSTANCES" >/dev/null; echo "snapshot saved, exit $?"

step "the planning facts, as gathered (the crowded state)"
python3 - <<'EOF' > "$OUT/facts.json"
import json
from hostkit.fleet.planning import gather_planning_facts
facts = {name: fact.model_dump(mode="json") for name, fact in gather_planning_facts("/tmp/inv-two.py", None).items()}
print(json.dumps(facts, indent=1))
EOF
echo "exit $?"
kill "$a" "$b" "$outside" 2>/dev/null
exit 0
