"""Start a few executions of the demo processes, so tasks flow in a fresh demo."""

from django.core.management.base import BaseCommand
from django.utils import timezone

from processes.services import process_start

DEMO_STARTS = [
    ("invoice-approval", {"invoice_id": "INV-1001", "supplier": "Acme Paper", "amount": 4200,
                          "currency": "EUR", "due_date": "2026-12-31"}),
    ("invoice-approval", {"invoice_id": "INV-1002", "supplier": "Globex", "amount": 18250,
                          "currency": "EUR", "due_date": "2027-01-15",
                          "notes": "Annual maintenance contract, second instalment. The "
                                   "purchase order was raised in March; the quote attached "
                                   "to it lists the same amount, but the previous instalment "
                                   "was invoiced without VAT, so check the VAT line against "
                                   "the contract before approving. Payment terms: 30 days "
                                   "net, early-payment discount of 2% within 10 days."}),
    ("invoice-approval", {"invoice_id": "INV-1003", "supplier": "Initech", "amount": 730.5,
                          "currency": "USD", "due_date": "2026-12-20"}),
    ("document-check", {"customer": "C-2291 Jane Roe"}),
    ("document-check", {"customer": "C-2292 John Doe"}),
]


class Command(BaseCommand):
    help = "Start demo executions (new business keys each run: the emulator forgets on restart)."

    def handle(self, *args, **options) -> None:
        stamp = timezone.now().strftime("%Y%m%d%H%M%S")
        for number, (process, data) in enumerate(DEMO_STARTS, start=1):
            key = f"demo-{stamp}-{number}"
            execution, _ = process_start(name=process, input=data, business_key=key)
            self.stdout.write(f"started {process} {key}: {execution.execution_arn}")
