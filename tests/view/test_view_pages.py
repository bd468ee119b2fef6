"""`rstar2 view` in a real browser: Debian's Chromium, headless, driven by Playwright.

Each page of a small recorded run (`run_files.write_run`, a run still going, plus an eval file)
is loaded, filtered or clicked through, and checked on screen; a screenshot of each is saved
under `$RSTAR2_VIEW_SCREENSHOTS` (default: this session's pytest temporary directory,
`view-screenshots/`). Skipped, saying why, where Playwright's Python package or a Chromium
binary is missing or that Chromium does not start (`scripts/install.sh test` installs both where it can: Chromium from apt,
never a browser download).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.view.conftest import Viewer

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed (pip install playwright)"
)
CHROMIUM = os.environ.get("RSTAR2_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None
)
if CHROMIUM is None:
    pytest.skip(
        "no Chromium binary (apt-get install chromium, or set RSTAR2_CHROMIUM)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("RSTAR2_VIEW_SCREENSHOTS")
    path = Path(out) if out else tmp_path_factory.mktemp("view-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(viewer: Viewer) -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
            )
        except sync_api.Error as e:  # the machine's Chromium, not the viewer: skip, say why
            pytest.skip(f"{CHROMIUM} does not start here: {str(e).splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser) -> Iterator[object]:  # noqa: ANN001
    """A fresh tab per test (the page keeps its filters while its address stays)."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.set_default_timeout(10_000)
    try:
        yield page
    finally:
        page.close()


def test_the_run_page_shows_config_stages_curves_and_recorded_sets(
    page, viewer: Viewer, shots: Path
) -> None:  # noqa: ANN001
    page.goto(viewer.url)
    page.wait_for_selector(".chart svg")
    assert page.locator(".chart").count() == 6  # reward ... step time split
    assert "running" in page.inner_text("section.source h2")
    labels = page.locator("table.sets a").all_inner_texts()
    assert labels == [
        "validation at step 0 (sft)", "step 1 (rl1)", "step 5 (rl1)", "eval.jsonl",
    ]  # fmt: skip
    page.screenshot(path=str(shots / "run.png"), full_page=True)


def test_a_step_filters_and_sorts_its_rollouts(page, viewer: Viewer, shots: Path) -> None:  # noqa: ANN001
    page.goto(viewer.url + "#/set/0.1")
    page.wait_for_selector("#rollouts")
    assert page.inner_text("#count") == "8 of 8 rollouts"
    assert "reward_mean 0.100" in page.inner_text("#step-metrics")  # its metrics row
    page.click("button[data-filter='failed calls']")
    assert page.inner_text("#count") == "2 of 8 rollouts"
    page.click("button[data-filter='truncated']")
    assert page.inner_text("#count") == "2 of 8 rollouts"
    assert page.locator("#rollouts tr").nth(1).inner_text().count("budget") == 1
    page.click("button[data-filter='all']")
    page.select_option("#group", "1")
    assert page.inner_text("#count") == "4 of 8 rollouts"
    page.click("th[data-sort='reward']")
    page.click("th[data-sort='reward']")  # descending: the correct one first
    first = page.locator("#rollouts tr").nth(1)
    assert "correct" in first.get_attribute("class")
    page.screenshot(path=str(shots / "step.png"), full_page=True)


def test_a_rollout_shows_its_conversation_reward_and_group(
    page, viewer: Viewer, shots: Path
) -> None:  # noqa: ANN001
    page.goto(viewer.url + "#/set/0.1")
    page.wait_for_selector("#rollouts")
    page.click("#rollouts a >> text='1'")
    page.wait_for_selector("#conversation")
    assert page.locator("#conversation .turn.tool.failed").count() == 1
    assert "SyntaxError" in page.inner_text("#conversation .turn.tool.failed")
    assert page.locator("#conversation .call").count() == 2
    assert "matches the reference 42" in page.inner_text("#verdict")
    assert page.locator("#group tr").count() == 5  # its four samples
    assert "not kept by RoC" in page.inner_text("h2")
    page.screenshot(path=str(shots / "rollout.png"), full_page=True)
    page.goto(viewer.url + "#/rollout/0.1/2")  # the same page: wait for the new rollout
    page.wait_for_selector("#verdict:has-text('does not match the reference 42')")
    assert "kept by RoC (trained on)" in page.inner_text("h2")


def test_two_sets_side_by_side(page, viewer: Viewer, shots: Path) -> None:  # noqa: ANN001
    page.goto(viewer.url)
    page.wait_for_selector("table.sets")
    page.check("input.pick[value='0.0']")
    page.check("input.pick[value='0.2']")
    page.click("#compare")
    page.wait_for_selector("#problems")
    assert page.locator("#problems tr").count() == 3  # both problems
    page.click("#problems a >> text='0'")
    page.wait_for_selector("#side")
    assert page.locator("#side > div").count() == 2
    assert "What is 6 * 7?" in page.inner_text("main")
    page.screenshot(path=str(shots / "compare.png"), full_page=True)


def test_an_eval_file_and_a_run_in_progress(page, viewer: Viewer, shots: Path) -> None:  # noqa: ANN001
    page.goto(viewer.url + "#/set/1.0")
    page.wait_for_selector("#rollouts")
    assert page.inner_text("#count") == "2 of 2 rollouts"
    page.goto(viewer.url)
    page.wait_for_selector("table.sets")
    log = viewer.run / "trajectories.jsonl"
    first = json.loads(log.read_text().splitlines()[0])
    with log.open("a") as f:  # the run goes on: its final evaluation arrives
        f.write(json.dumps({**first, "step": 5, "stage": "final"}) + "\n")
    page.wait_for_selector("text=validation at step 5 (final)", timeout=10_000)
    page.screenshot(path=str(shots / "run-updated.png"), full_page=True)
