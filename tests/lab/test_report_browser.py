"""The report as a browser draws it: every image decodes and nothing is wider than the page.

Runs a headless Chromium (``chromium --headless --dump-dom``) on a copy of ``report.html``
with a script appended that measures the laid-out page and writes the numbers into the DOM;
the test reads them back from the dumped DOM. Skipped when no Chromium or Chrome is on PATH
(``apt-get install chromium`` on Debian). No network: the page and its images are one file.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from posenc.lab.report import write_report
from tests.lab.test_report import REGISTRY, make_run_folder

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

# Measures the page after load: the images, the document's scroll width, and every element
# wider than the viewport or reaching past its right edge, except those inside a scroll
# container (the raw rows). Then it opens every <details> and measures again.
MEASURE = """
<script>
window.addEventListener("load", () => {
  const scrolls = (element) => {
    for (let up = element.parentElement; up; up = up.parentElement) {
      if (["auto", "scroll", "hidden"].includes(getComputedStyle(up).overflowX)) return true;
    }
    return false;
  };
  const measure = () => {
    const width = window.innerWidth;
    const wide = [];
    for (const element of document.body.querySelectorAll("*")) {
      const box = element.getBoundingClientRect();
      if ((box.width > width || box.right > width + 0.5) && !scrolls(element)) {
        wide.push(`${element.tagName}.${element.className} ${Math.round(box.width)}px`);
      }
    }
    return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width,
            wide: wide.slice(0, 20)};
  };
  const result = {
    images: Array.from(document.images, (image) => ({
      alt: image.alt, complete: image.complete, naturalWidth: image.naturalWidth})),
    closed: measure(),
  };
  document.querySelectorAll("details").forEach((details) => { details.open = true; });
  result.open = measure();
  const out = document.createElement("output");
  out.id = "posenc-layout";
  out.hidden = true;
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>
"""


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found is not None:
            probe = subprocess.run([found, "--version"], capture_output=True, timeout=60)
            if probe.returncode == 0:
                return found
    pytest.skip("no headless Chromium or Chrome on PATH (apt-get install chromium)")


def layout(page: Path, width: int, profile: Path) -> dict[str, Any]:
    """The numbers that ``MEASURE`` writes, from a headless browser ``width`` pixels wide."""
    probe = page.with_name("measured.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"))
    command = [
        _browser(),
        "--headless=new",
        "--disable-gpu",
        "--no-sandbox",  # the test may run as root (CI containers)
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        f"--window-size={width},900",
        "--dump-dom",
        probe.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    found = re.search(r'<output id="posenc-layout"[^>]*>(.*?)</output>', done.stdout, re.S)
    assert found is not None, f"no measurements in the dumped DOM: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _browser()
    folder = make_run_folder(tmp_path_factory.mktemp("run"))
    return write_report(folder, title="browser run", experiments=REGISTRY)


@pytest.mark.parametrize("width", [1200, 800])
def test_the_report_draws_every_image_and_fits_the_page(
    report_page: Path, width: int, tmp_path: Path
) -> None:
    measured = layout(report_page, width, tmp_path / "profile")
    images = measured["images"]
    assert len(images) == 8
    assert all(image["complete"] and image["naturalWidth"] > 0 for image in images), images
    for state in ("closed", "open"):  # raw rows collapsed, then expanded
        page = measured[state]
        assert page["innerWidth"] == width
        assert page["scrollWidth"] <= page["innerWidth"], (state, page)
        assert page["wide"] == [], (state, page["wide"])
