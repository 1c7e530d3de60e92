"""The shipped scrape snippet (hostkit/monitoring/vllm-scrape.yml), as it is, in the
distribution's Prometheus, against real vLLM 0.32 and the stand-in: every series the snippet
recommends is scraped with the served model's name, and its query for fleets of mixed releases
answers."""

from __future__ import annotations

import re
import time
from textwrap import indent

from hostkit_lab.prometheus import api, prometheus_server
from tests.realvllm import server as srv
from tests.realvllm.conftest import REPO, record
from tests.waiting import wait_for

SNIPPET = REPO / "hostkit" / "monitoring" / "vllm-scrape.yml"
# The KV-cache gauge's old name: gone from 0.11 on; the snippet names it for older releases.
OLD_NAMES = {"vllm:gpu_cache_usage_perc"}
SCRAPED_WITHIN_S = 60


def scrape_config(port: int) -> str:
    """The snippet under `scrape_configs:`, its example targets replaced by the server's address."""
    snippet, replaced = re.subn(r"targets: \[[^]]*\]", f'targets: ["127.0.0.1:{port}"]', SNIPPET.read_text())
    assert replaced == 1, "the snippet's static_configs no longer read `targets: [...]`"
    snippet = snippet.replace("scrape_interval: 15s", "scrape_interval: 1s")
    return "scrape_configs:\n" + indent(snippet, "  ")


def test_the_shipped_snippet_scrapes_every_series_it_names(vllm_server, tmp_path):
    names = sorted(set(re.findall(r"vllm:[a-z_]+", SNIPPET.read_text())) - OLD_NAMES)
    assert len(names) >= 7, names
    # A finished request, so that the request counters have their series.
    request = {"model": vllm_server.model, "prompt": "hello", "max_tokens": 2}
    assert srv.post(vllm_server, "/v1/completions", request, vllm_server.api_key)[0] == 200
    started = time.monotonic()
    with prometheus_server(tmp_path, scrape_config(vllm_server.port)) as base:
        assert wait_for(lambda: api(base, "query", query='up{job="vllm"} == 1')["result"], SCRAPED_WITHIN_S,
                        interval=0.5, ignoring=OSError), \
            f"Prometheus did not scrape {vllm_server.kind} vLLM within {SCRAPED_WITHIN_S}s: see {tmp_path}"
        scraped_s = time.monotonic() - started
        missing = [name for name in names if not api(base, "query", query=name)["result"]]
        assert not missing, f"{vllm_server.kind} vLLM exports none of {missing}"
        unlabelled = [name for name in names
                      if any(series["metric"].get("model_name") != vllm_server.model
                             for series in api(base, "query", query=name)["result"])]
        assert not unlabelled, f"series without model_name={vllm_server.model!r}: {unlabelled}"
        (kv,) = api(base, "query", query="vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc")["result"]
        assert 0 <= float(kv["value"][1]) <= 1
    record(f"prometheus scrape ({vllm_server.kind})", {"series": names, "first_scrape_s": round(scraped_s, 1)})
