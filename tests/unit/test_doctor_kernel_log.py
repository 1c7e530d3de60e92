"""OOM kills from real kernel log lines (Debian 12, kernel 6.1; recorded on a lab VM)."""

from __future__ import annotations

import subprocess

from hostkit.doctor.kernel_log import (
    KernelLog,
    kernel_log_oom_command,
    new_lines,
    parse_kernel_log,
    parse_oom_kills,
)

MEMCG = [
    "2026-11-29T22:58:40+0000 doc1 kernel: python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
    "2026-11-29T22:58:41+0000 doc1 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/system.slice/vllm.service,task_memcg=/system.slice/vllm.service,task=python3,pid=536,uid=0",
    "2026-11-29T22:58:41+0000 doc1 kernel: Memory cgroup out of memory: Killed process 536 (python3) total-vm:1754544kB, "
    "anon-rss:1224216kB, file-rss:3096kB, shmem-rss:0kB, UID:0 pgtables:2684kB oom_score_adj:0",
]
GLOBAL = [
    "2026-11-29T23:04:01+0000 doc1 kernel: python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "2026-11-29T23:04:02+0000 doc1 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
    "global_oom,task_memcg=/system.slice/hog.service,task=python3,pid=583,uid=0",
    "2026-11-29T23:04:02+0000 doc1 kernel: Out of memory: Killed process 583 (python3) total-vm:2778660kB, "
    "anon-rss:1793516kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:5448kB oom_score_adj:0",
]


def test_memcg_and_global_kills():
    memcg, host_wide = parse_oom_kills(MEMCG + GLOBAL)
    assert (memcg.pid, memcg.process, memcg.anon_rss_bytes) == (536, "python3", 1224216 * 1024)
    assert memcg.cgroup_limit and memcg.memcg == "/system.slice/vllm.service"
    assert memcg.in_unit("vllm.service") and not memcg.in_unit("llm.service")
    assert (host_wide.pid, host_wide.cgroup_limit, host_wide.memcg) == (583, False, "/system.slice/hog.service")
    assert not host_wide.in_unit("vllm.service")


def test_dmesg_format_without_the_oom_kill_line():
    (kill,) = parse_oom_kills(["[  812.123456] Out of memory: Killed process 4242 (vllm) total-vm:1kB, anon-rss:2048kB"])
    assert (kill.pid, kill.process, kill.anon_rss_bytes, kill.memcg, kill.cgroup_limit) == (4242, "vllm", 2 * 2**20, None, False)


def test_source_line_and_unreadable_log():
    log = parse_kernel_log(["source=journalctl", *MEMCG])
    assert log.readable and log.source == "journalctl" and len(log.oom_kills) == 1
    unreadable = parse_kernel_log(["source=none"])
    assert not unreadable.readable and unreadable.oom_kills == ()


def test_new_lines_are_those_logged_between_two_reads():
    before = KernelLog("journalctl", tuple(MEMCG))
    after = KernelLog("journalctl", tuple(MEMCG + GLOBAL))
    assert new_lines(before, after) == tuple(GLOBAL)
    assert new_lines(after, after) == ()


def test_command_runs_and_always_exits_zero():
    result = subprocess.run(["sh", "-c", kernel_log_oom_command()], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] in ("source=journalctl", "source=dmesg", "source=none")
