"""The console in headless Chromium against a catalog that `shipyard demo` filled.

Opens every page, clicks from the trained model to its lineage graph and on to the crawl, and
moves an alias from the page: refused without the token, done with it. Screenshots of each
page land in the test's tmp directory.
"""

import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import free_port
from tests.web.servers import answers, shipyard_env, start, stop, wait_for

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(DRIVER).exists()),
        reason="needs Debian's chromium and chromium-driver (scripts/apt-packages.txt)",
    ),
]


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("demo") / "home"
    done = subprocess.run(
        [sys.executable, "-m", "shipyard", "demo"],
        env=shipyard_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return home


@pytest.fixture(scope="session")
def console_url(demo_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("ui") / "ui.log"
    process = start(["ui", "--port", str(port)], demo_home, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"console ({log})", answers(url + "/api/aliases"))
        yield url
    finally:
        stop(process)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator["webdriver.Chrome"]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=DRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


def _aliases(url: str) -> dict[str, str]:
    with urllib.request.urlopen(url + "/api/aliases", timeout=10) as reply:
        aliases: dict[str, str] = json.load(reply)
        return aliases


def test_every_page_opens(browser: "webdriver.Chrome", console_url: str, tmp_path: Path) -> None:
    pages = ["/", "/artifacts", "/runs", "/scheduler", "/data", "/queues", "/distribution"]
    pages += ["/api/docs"]
    for path in pages:
        browser.get(console_url + path)
        assert not browser.title.startswith("Error"), (path, browser.page_source[:500])
        browser.save_screenshot(str(tmp_path / f"page{path.replace('/', '_') or '_'}.png"))
    # A run's page and a data run's page, reached by clicking.
    browser.get(console_url + "/runs")
    browser.find_element(By.CSS_SELECTOR, "a.run-link").click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.heatmap"))
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline")  # the loss curve
    browser.save_screenshot(str(tmp_path / "run.png"))
    browser.get(console_url + "/data")
    browser.find_element(By.CSS_SELECTOR, "a.data-link").click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#funnel svg"))
    browser.save_screenshot(str(tmp_path / "data_run.png"))


def test_model_to_lineage_to_crawl(
    browser: "webdriver.Chrome", console_url: str, tmp_path: Path
) -> None:
    aliases = _aliases(console_url)
    trained, crawl = aliases["demo-trained"], aliases["demo-crawl"]
    browser.get(console_url + "/")
    browser.find_element(By.CSS_SELECTOR, f'#aliases a[href="/artifacts/{trained}"]').click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "lineage-up"))
    assert browser.find_element(By.ID, "artifact-id").text == trained
    browser.find_element(By.ID, "lineage-up").click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.lineage"))
    depth = browser.find_element(By.ID, "depth")
    depth.clear()
    depth.send_keys("20")
    browser.find_element(By.ID, "redraw").click()
    crawl_node = f'svg.lineage g.node[data-id="{crawl}"]'
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, crawl_node))
    browser.save_screenshot(str(tmp_path / "lineage.png"))
    browser.find_element(By.CSS_SELECTOR, crawl_node).click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "artifact-id"))
    assert browser.find_element(By.ID, "artifact-id").text == crawl
    assert "demo-crawl" in browser.page_source
    browser.save_screenshot(str(tmp_path / "crawl.png"))


def test_move_alias_needs_the_token(
    browser: "webdriver.Chrome", console_url: str, demo_home: Path, tmp_path: Path
) -> None:
    aliases = _aliases(console_url)
    before, target = aliases["demo-model"], aliases["demo-trained"]
    browser.get(f"{console_url}/artifacts/{target}")

    def submit() -> str:
        browser.find_element(By.ID, "alias-name").clear()
        browser.find_element(By.ID, "alias-name").send_keys("demo-model")
        browser.find_element(By.ID, "alias-expect").clear()
        browser.find_element(By.ID, "alias-expect").send_keys(before)
        browser.find_element(By.ID, "alias-move").click()
        result = browser.find_element(By.ID, "alias-result")
        WebDriverWait(browser, 20).until(lambda _: result.text)
        text: str = result.text
        browser.execute_script("arguments[0].textContent = ''", result)
        return text

    refused = submit()
    assert refused.startswith("refused (401)"), refused
    assert _aliases(console_url)["demo-model"] == before
    browser.save_screenshot(str(tmp_path / "alias_refused.png"))

    token = (demo_home / "tokens" / "console.token").read_text().strip()
    browser.find_element(By.ID, "token").send_keys(token)
    done = submit()
    assert done.startswith("done"), done
    assert _aliases(console_url)["demo-model"] == target
    browser.save_screenshot(str(tmp_path / "alias_moved.png"))
    audit = (demo_home / "audit" / "console.log").read_text().splitlines()
    assert [json.loads(line)["status"] for line in audit][-2:] == [401, 200]
