"""report.html as its readers see it: a small run's report opened in headless Chromium (driven by
Playwright). The page must load offline, every 3-D viewer must draw its points, a drag must turn
the picture, and the console must stay free of errors. The string checks of test_eval_report.py
cannot see a script that throws or a WebGL viewer that draws nothing.

The browser is the system's Chromium (Debian's `chromium`, which scripts/setup_env.sh installs in
its `test` mode as root); Playwright's own browser download is not used. MVS_TEST_CHROMIUM names
another Chromium binary."""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mvs_pipeline.evaluation.report import write_report

from .test_eval_report import _fake_run

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install -e '.[test]')")


def _chromium() -> str | None:
    # Debian's /usr/bin/chromium is a shell wrapper around this binary; the binary itself starts
    # without the wrapper's environment probing.
    for path in (os.environ.get("MVS_TEST_CHROMIUM"), "/usr/lib/chromium/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if path and Path(path).is_file():
            return path
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium, "
                                "or MVS_TEST_CHROMIUM=/path/to/chrome)")


def _pixels(element) -> np.ndarray:
    """[H, W, 3] uint8 of what the page shows inside `element` (a screenshot: the composited canvas),
    without the 1 px CSS border, which would count as drawn."""
    return np.asarray(Image.open(io.BytesIO(element.screenshot())).convert("RGB"))[2:-2, 2:-2]


def _drawn(pixels: np.ndarray) -> int:
    """Pixels that are not the viewer's white background."""
    return int((pixels < 250).any(axis=-1).sum())


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("report_run")
    _fake_run(root)
    _, page = write_report(root, max_views=2, render_points=2000)
    return page


def test_report_in_a_browser(report_page):
    requests, blocked, problems = [], [], []
    with sync_api.sync_playwright() as pw:
        # no GPU here: WebGL runs on SwiftShader, which Chromium now enables only when asked
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--use-angle=swiftshader", "--enable-unsafe-swiftshader"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            # anything aimed at the network is recorded and refused, so the test itself stays offline
            page.route(re.compile(r"^(https?|wss?|ftp)://"), lambda route: (blocked.append(route.request.url),
                                                                            route.abort()))
            page.goto(report_page.as_uri(), wait_until="load")
            assert not problems, problems  # first: a script error explains a blank viewer below

            canvases = page.query_selector_all("canvas.cloud")
            # the viewer replaces a canvas by a note when WebGL is missing: both clouds must remain
            assert len(canvases) == 2, page.inner_text("body")[:2000]
            for i, canvas in enumerate(canvases):
                canvas.scroll_into_view_if_needed()
                before = _pixels(canvas)
                # 2000 and 500 points of 1-4 px: a blank or black canvas has 0 or every pixel drawn
                assert 300 < _drawn(before) < 0.9 * before.shape[0] * before.shape[1], f"canvas {i} draws no points"
                box = canvas.bounding_box()
                cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                page.mouse.move(cx, cy)
                page.mouse.down()
                page.mouse.move(cx + 120, cy + 40, steps=6)
                page.mouse.up()
                after = _pixels(canvas)
                assert 300 < _drawn(after), f"canvas {i} draws nothing after the drag"
                changed = (np.abs(after.astype(int) - before.astype(int)).max(axis=-1) > 30).mean()
                assert changed > 0.002, f"canvas {i}: dragging did not turn the cloud ({changed:.4%} of pixels changed)"
        finally:
            browser.close()
    assert not blocked, f"the report asked the network for {blocked[:5]}"
    assert all(u.startswith(("file://", "data:")) for u in requests), [u[:100] for u in requests]
    assert not problems, problems
