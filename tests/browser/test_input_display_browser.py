"""A reviewer reads a task's input as its process declares it, on a desktop and a phone."""

from pathlib import Path

import pytest

from inbox.services.worker import task_take_next
from processes.services import process_deploy
from tests.browser import keyboard
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD, PHONE
from tests.browser.test_layout_browser import sideways, widest
from tests.sfn import unique

pytestmark = [pytest.mark.browser, pytest.mark.emulator,
              pytest.mark.django_db(transaction=True)]

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
NOTES = ("Annual maintenance contract, second instalment: check the VAT line against the "
         "contract before approving. ") * 4
INPUT = {
    "notes": NOTES,
    "due_date": "2027-01-15",
    "currency": "EUR",
    "amount": 18250,
    "supplier": "Globex Corporation International Holdings",
    "invoice_id": "INV-2026-000001-GLOBEX-CORPORATION",
    "cost_centre": "CC-4410",
}


def test_the_task_page_shows_the_declared_fields_in_order_formatted_on_desktop_and_phone(
        browser, live_server, emulator, make_task, make_worker, screenshot):
    name = unique("invoice")
    text = (SPECS / "invoice-approval.yaml").read_text(encoding="utf-8")
    process_deploy(text=text.replace("process: invoice-approval", f"process: {name}"),
                   source="invoice")
    ana = make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(process={"name": name, "version": 1}, title="Review invoice INV-2026-000001",
              input=INPUT)
    task = task_take_next(worker=ana)

    for viewport, state in [(None, "desktop"), (PHONE, "phone")]:
        context = browser.new_context(base_url=live_server.url,
                                      **({"viewport": viewport} if viewport else {}))
        try:
            page = context.new_page()
            page.set_default_timeout(10_000)
            keyboard.sign_in(page, "ana@example.com", start=f"/tasks/{task.pk}/")
            page.get_by_role("heading", name="Review invoice INV-2026-000001").wait_for()

            card = page.locator("#task-input")
            labels = card.locator(":scope > dt").all_inner_texts()
            assert labels == ["Invoice", "Supplier", "Amount", "Due", "Notes"]
            values = card.locator(":scope > dd").all_inner_texts()
            assert values[2] == "18,250.00\u00a0EUR" and values[3] == "15 Jan 2027"
            link = card.get_by_role("link", name="INV-2026-000001-GLOBEX-CORPORATION")
            assert link.get_attribute("href") == (
                "https://erp.example.com/invoices/INV-2026-000001-GLOBEX-CORPORATION")
            assert link.get_attribute("rel") == "noopener noreferrer"
            assert sideways(page) == 0, widest(page)
            assert_accessible(page, f"task input as declared ({state})")
            screenshot(page, f"task-input-declared-{state}")

            # The rest of the input, and the whole of the notes, open from the keyboard.
            others = page.get_by_text("Other input (1 field)")
            others.focus()
            page.keyboard.press("Enter")
            page.get_by_text("CC-4410").wait_for()
            show_all = page.get_by_text(f"Show all {len(NOTES):,} characters")
            show_all.focus()
            page.keyboard.press("Enter")
            page.get_by_role("region", name=f"All {len(NOTES):,} characters").wait_for()
            assert sideways(page) == 0, widest(page)
            assert_accessible(page, f"task input, the rest and the notes opened ({state})")
            screenshot(page, f"task-input-opened-{state}")
        finally:
            context.close()
