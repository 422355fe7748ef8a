"""`/inbox` in a real browser (DESIGN 14): headless Chromium opens the page with a person's token in the URL
fragment, sees a plan an assistant proposed through MCP (its input holding HTML and a script, shown as
text and never run), and confirms it with a click; the transfer then happens. Screenshots are saved into
the test's tmp dir (their paths printed). Chromium is installed when missing (as root); the test skips
only where it cannot be."""

from __future__ import annotations

import json
import time

import httpx
import pytest

pytest.importorskip("websockets", reason="the browser test drives Chromium over websockets (pip install websockets)")

from cdp import Browser, find_or_install_chromium  # noqa: E402
from helpers import balance  # noqa: E402
from mcp_helpers import EVERYTHING, call_tool, funded_accounts  # noqa: E402
from mcp_helpers import examples, served, settings  # noqa: E402,F401  (fixtures)
from planned_helpers import confirm_desk, moving, new_client, plan_of  # noqa: E402

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>'


@pytest.fixture(scope="module")
def chromium() -> str:
    executable, why = find_or_install_chromium()
    if executable is None:
        pytest.skip(f"no headless Chromium: {why}")
    return executable


def test_the_inbox_shows_a_plan_as_text_and_a_click_on_confirm_confirms_it(served, examples, worker, chromium,
                                                                           tmp_path):
    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    _, agent = new_client(examples, "assistant", EVERYTHING, mcp_server=server_id)
    planned = call_tool(f"{served}/mcp/desk", agent, "transfer", moving(payer, payee, 321, memo=HOSTILE))
    assert planned.is_error is False, planned.content
    plan_id = planned.structured_content["plannedActionId"]
    _, person = new_client(examples, "person", EVERYTHING)

    browser = Browser(chromium)
    try:
        browser.send("Page.enable")
        browser.send("Runtime.enable")
        browser.send("Page.navigate", {"url": f"{served}/inbox#token={person}"})
        browser.wait_for(f"document.querySelector('section.plan[data-plan-id=\"{plan_id}\"]') !== null", timeout=30,
                         what="the plan's card")
        # The token left the address bar and stays in the browser.
        assert browser.evaluate("window.location.hash") == ""
        assert browser.evaluate("window.localStorage.getItem('ledger-token')") == person
        # The model-written memo is text: nothing of it became an element, and its script never ran.
        shown = json.loads(browser.evaluate("document.querySelector('section.plan pre.input').textContent"))
        assert shown["memo"] == HOSTILE
        assert browser.evaluate("document.querySelectorAll('main script, main img, main b').length") == 0
        assert browser.evaluate("typeof window.__pwned") == "undefined"
        assert browser.evaluate("document.querySelector('section.plan h2').textContent") == "transfer (version 1)"
        assert "Preview: SUCCEEDED" in browser.evaluate("document.querySelector('section.plan').textContent")
        before = browser.screenshot(tmp_path / "inbox-proposed.png")

        browser.click("section.plan button.confirm")
        browser.wait_for("document.querySelector('section.plan').dataset.status === 'CONFIRMED'", timeout=20,
                         what="the confirm to answer")
        outcome = browser.evaluate("document.querySelector('section.plan .outcome').textContent")
        after = browser.screenshot(tmp_path / "inbox-confirmed.png")
    finally:
        browser.close()
    print(f"\ninbox screenshots: {before} {after}")
    assert before.stat().st_size > 10_000 and after.stat().st_size > 10_000

    plan = plan_of(examples, plan_id)
    assert plan["status"] == "CONFIRMED" and outcome == f"CONFIRMED: started execution {plan['executionId']}"
    deadline = time.monotonic() + 30
    while balance(examples, payee) != 321 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (balance(examples, payer), balance(examples, payee)) == (10_000 - 321, 321)


def test_the_inbox_page_is_served_whole_and_never_framed(served):
    response = httpx.get(f"{served}/inbox", timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    # Everything it needs is in the page: it loads nothing from anywhere (it works offline).
    assert "src=" not in response.text and "href=" not in response.text
    assert "innerHTML" not in response.text
