"""The kernel log reader, run here under sh with fake journalctl/dmesg, and OOM kills parsed
from real kernel log lines (Debian 12, kernel 6.1; recorded on a lab VM)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hostkit.facts.kernel_log import (
    OOM_LINES,
    KernelLog,
    kernel_log_command,
    new_lines,
    oom_lines_command,
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
    assert not parse_kernel_log([]).readable
    timed_out = parse_kernel_log(["source=journalctl", "@@hostkit-timeout@@ journalctl -k -b timed out after 30 s"])
    assert not timed_out.readable and timed_out.lines == ()


def test_new_lines_are_those_logged_between_two_reads():
    before = KernelLog("journalctl", tuple(MEMCG))
    after = KernelLog("journalctl", tuple(MEMCG + GLOBAL))
    assert new_lines(before, after) == tuple(GLOBAL)
    assert new_lines(after, after) == ()


@pytest.mark.processes
def test_command_runs_and_always_exits_zero():
    result = subprocess.run(["sh", "-c", oom_lines_command()], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] in ("source=journalctl", "source=dmesg", "source=none")


def _read(tmp_path: Path, journal: list[str] | None, dmesg: list[str], command: str) -> list[str]:
    """`command` run with fake journalctl (absent when `journal` is None) and dmesg."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, lines in (("journalctl", journal), ("dmesg", dmesg)):
        if lines is not None:
            (tmp_path / f"{name}.out").write_text("".join(line + "\n" for line in lines))
            (bin_dir / name).write_text(f"#!/bin/sh\ncat {tmp_path}/{name}.out\n")
            (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.processes
@pytest.mark.parametrize(
    ("journal", "dmesg", "source"),
    [(["boot", *MEMCG], ["other"], "journalctl"), ([], ["boot", *GLOBAL], "dmesg"), (None, ["boot", *GLOBAL], "dmesg"),
     ([], [], None)],
)
def test_reads_the_first_source_that_prints_a_line(tmp_path, journal, dmesg, source):
    log = parse_kernel_log(_read(tmp_path, journal, dmesg, oom_lines_command()))
    assert log.source == source
    expected = [line for line in (journal or dmesg) if line != "boot"] if source else []
    assert list(log.lines) == expected and log.total == len(expected)


@pytest.mark.processes
def test_keeps_the_first_or_the_last_lines_and_counts_them_all(tmp_path):
    logged = [f"[ {n}.0] Out of memory: Killed process {n} (python3)" for n in range(1, 8)]
    first = parse_kernel_log(_read(tmp_path, logged, [], kernel_log_command(OOM_LINES, 3)))
    last = parse_kernel_log(_read(tmp_path, logged, [], kernel_log_command(OOM_LINES, 3, keep="last")))
    assert (first.lines, first.total) == (tuple(logged[:3]), 7)
    assert (last.lines, last.total) == (tuple(logged[-3:]), 7)


@pytest.mark.processes
def test_a_read_that_times_out_is_unreadable_and_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr("hostkit.facts.kernel_log.KERNEL_LOG_S", 1)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "journalctl").write_text("#!/bin/sh\nsleep 30\n")
    (tmp_path / "bin" / "journalctl").chmod(0o755)
    lines = _read(tmp_path, None, GLOBAL, oom_lines_command())
    assert lines == ["source=journalctl", "@@hostkit-timeout@@ journalctl -k -b timed out after 1 s"]
    assert not parse_kernel_log(lines).readable
