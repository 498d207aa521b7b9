"""The explorer's shareable page (dsperf.model.explore_page) in a real headless browser: it loads
without script errors, shows as many frontier points as the explorer's frontier (the CSV's), and a
filter changes what it shows. Chromium comes from Debian's packages (.ci/run installs it); without
it the browser checks skip, unless DSPERF_REQUIRE_BROWSER=1 (CI) makes that a failure."""
import os
import re
import shutil
import subprocess

import pytest

from dsperf.model import explore, explore_page

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    df = explore.search(devices=["H800", "H200"], isl=4096, osl=1024)
    ok = explore.meets_sla(df, tpot_ms=50)
    path = explore_page.write_html(ok, tmp_path_factory.mktemp("page") / "explore.html", sla={"tpot_ms": 50},
                                   max_rows=1500)
    return path, ok


def _dom(path, fragment=""):
    if BROWSER is None:
        if os.environ.get("DSPERF_REQUIRE_BROWSER") == "1":
            pytest.fail("DSPERF_REQUIRE_BROWSER=1 but no chromium on PATH")
        pytest.skip("no headless browser (chromium) installed")
    r = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                        "--dump-dom", f"file://{path}{fragment}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    console_errors = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    return r.stdout, console_errors


def _count(dom, element_id):
    return int(re.search(rf'id="{element_id}">(\d+)<', dom).group(1))


def test_page_loads_without_errors_and_shows_the_explorers_frontier(page):
    path, ok = page
    dom, console_errors = _dom(path)
    assert not console_errors, console_errors
    assert re.search(r'<pre id="errors"></pre>', dom), "script errors were written into the page"
    assert _count(dom, "frontier-count") == len(explore.pareto(ok)) > 0
    assert _count(dom, "shown") == min(len(ok), 1500)


def test_a_filter_changes_what_is_shown(page):
    path, _ = page
    before, _ = _dom(path)
    after, errors = _dom(path, "#tpot_ms=20&device=H200")
    assert not errors
    assert 0 < _count(after, "shown") < _count(before, "shown")
    assert 0 < _count(after, "frontier-count")


def test_the_page_needs_explorer_rows(tmp_path):
    import pandas as pd
    with pytest.raises(ValueError, match="column 'tps_user' is required"):
        explore_page.write_html(pd.DataFrame({"device": ["H800"]}), tmp_path / "x.html")
    with pytest.raises(TypeError, match="rows must be a pandas DataFrame"):
        explore_page.write_html([1, 2], tmp_path / "x.html")
    with pytest.raises(ValueError, match="max_rows must be a positive integer"):
        explore_page.write_html(pd.DataFrame({c: [1.0] for c in ("tps_user", "tokens_per_gpu_s_served", "tpot_ms")}
                                             | {"device": ["H800"]}), tmp_path / "x.html", max_rows=0)
