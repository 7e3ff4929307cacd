"""The web page in a real browser: Playwright driving Debian's Chromium against a served app.

Chromium comes from apt (`make test` installs `chromium` and `fonts-lohit-taml` when run as root);
`KFORMER_CHROMIUM` points elsewhere. Without it these tests skip, unless CI=true, where a missing
browser fails the run. Screenshots go to tests/artifacts/ (or KFORMER_TEST_ARTIFACTS).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KFORMER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("KFORMER_TEST_ARTIFACTS", Path(__file__).resolve().parent / "artifacts"))


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed (pip install -e '.[test]')"
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium fonts-lohit-taml, or set KFORMER_CHROMIUM)"
    import shutil
    import subprocess

    fonts = subprocess.run(["fc-list", ":lang=ta", "family"], capture_output=True, text=True, timeout=30).stdout \
        if shutil.which("fc-list") else ""
    if not fonts.strip():
        return "no Tamil font, so Tamil cannot render (apt-get install -y fonts-lohit-taml)"
    return None


if (_reason := _missing()) is not None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests cannot run on CI: {_reason}", pytrace=False)
    pytest.skip(f"browser tests skipped: {_reason}", allow_module_level=True)


@pytest.fixture(scope="module")
def served(tiny_models):
    """The three tiny models served on 127.0.0.1 from a thread; yields (base URL, library models)."""
    from server_helpers import uvicorn_thread

    import kformer
    from kformer.models import generation
    from kformer.server import ServeConfig, create_app

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "COMPILE", False)
        folders = tiny_models
        with uvicorn_thread(create_app(folders, ServeConfig())) as url:
            yield url, {name: kformer.load(folder) for name, folder in folders.items()}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30_000)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, served):
    url, _ = served
    context = browser.new_context(viewport={"width": 1100, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(url)
    page.wait_for_selector("#model option", state="attached")
    yield page
    context.close()


def _ask(page, model: str, text: str) -> None:
    page.select_option("#model", model)
    page.wait_for_function(f"document.getElementById('model-info').textContent.startsWith('{page_task(model)}')")
    page.fill("#text", text)


def page_task(model: str) -> str:
    return {"tickets": "classify", "en-ta": "translate", "arith": "arithmetic"}[model]


def _shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_a_ticket_gets_its_label_and_probability_bars(page, served):
    _, library = served
    ticket = "my laptop screen is flickering after the update"
    expected = library["tickets"].predict([ticket], top_k=3)[0]
    _ask(page, "tickets", ticket)
    page.click("#predict")
    page.wait_for_selector("#label")
    assert page.inner_text("#label") == expected["label"]
    assert page.locator(".bar").count() == len(expected["top_k"]) == 3
    assert page.locator(".bar-label").all_inner_texts() == [t["label"] for t in expected["top_k"]]
    _shot(page, "serve-ticket")


def test_a_sentence_is_translated_into_tamil(page, served):
    _, library = served
    expected = library["en-ta"].predict(["one two"])[0]["translation"]
    _ask(page, "en-ta", "one two")
    page.click("#predict")
    page.wait_for_selector("#translation")
    shown = page.inner_text("#translation")
    assert shown == expected and any("\u0b80" <= ch <= "\u0bff" for ch in shown)  # Tamil script
    # the Tamil glyphs have width: a font draws them (no zero-width or missing-glyph fallback)
    width = page.evaluate("() => document.getElementById('translation').getBoundingClientRect().width")
    assert width > 10 * len(shown.split())
    _shot(page, "serve-translation")


def test_attention_heat_map_is_drawn_with_layer_and_head_choice(page):
    _ask(page, "en-ta", "one two three")
    page.click("#explain")
    page.wait_for_selector("#attention:not([hidden])")
    assert page.locator("#map option").all_inner_texts() == ["encoder", "decoder self", "cross"]
    page.select_option("#map", "cross")
    page.select_option("#head", "0")
    canvas = page.locator("#heatmap")
    rows, cols = int(canvas.get_attribute("data-rows")), int(canvas.get_attribute("data-cols"))
    assert rows > 1 and cols > 1
    colours = page.evaluate("""() => {
        const c = document.getElementById('heatmap'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set(); for (let i = 0; i < d.length; i += 4 * 7) seen.add(`${d[i]},${d[i+1]},${d[i+2]}`);
        return seen.size; }""")
    assert colours > 20  # cells in many shades, not a blank canvas
    _shot(page, "serve-attention")


def test_api_errors_are_shown_in_words(page):
    _ask(page, "arith", "12*3")
    page.click("#predict")
    page.wait_for_selector("#error:not([hidden])")
    message = page.inner_text("#error")
    assert message.startswith("The service said:") and "instances[0]" in message
