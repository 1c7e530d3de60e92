"""Unit tests are pure unless marked: a test that starts a process on this machine (a host-side
script, the vLLM stand-in, promtool) says so with `pytest.mark.processes`, and one that starts
a process unmarked fails here. `make unit-pure` runs the rest alone, in seconds."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture(autouse=True)
def _processes_only_where_marked(request, monkeypatch):
    if request.node.get_closest_marker("processes"):
        return
    started = subprocess.Popen.__init__

    def refuse(self, args, *rest, **options):
        pytest.fail(f"{request.node.nodeid} starts a process ({args!r}) without pytest.mark.processes")
        started(self, args, *rest, **options)  # never reached; keeps the signature honest

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
