"""The contract between a state machine and the inbox: the names both sides must agree on.

A human stage puts a ``HUMAN_TASK`` envelope on the intake queue and waits for its token;
a compiled failure branch puts a ``PROCESS_FAILURE`` notice there. The inbox answers a
human stage with SendTaskSuccess, or with SendTaskFailure and one of the error names
below, which the compiled Catch rules route. processes/schemas/ holds the envelopes' JSON
Schemas and docs/ENVELOPE.md publishes the whole contract. Code on either side imports
these names from here instead of spelling the literals again;
tests/processes/test_contract.py checks that the schemas and the golden ASL agree.
"""

import re

# Envelope kinds: the "kind" field of every message on the intake queue.
HUMAN_TASK = "human-task/v1"
PROCESS_FAILURE = "process-failure/v1"
KINDS = (HUMAN_TASK, PROCESS_FAILURE)

# Errors Step Functions hears from the inbox (SendTaskFailure) on a human stage.
REJECTED_ERROR = "HumanTask.Rejected"
TIMED_OUT_ERROR = "HumanTask.TimedOut"
HUMAN_TASK_ERRORS = (REJECTED_ERROR, TIMED_OUT_ERROR)

# The error a compiled execution ends with after its failure branch has notified the
# inbox, and the default error of a spec's fail stage.
PROCESS_FAILED_ERROR = "Process.Failed"

# The inbox sends this many SendTaskHeartbeat calls per HeartbeatSeconds of a stage (so
# one lost call is harmless); the deploy check sizes a stage's heartbeats with it.
HEARTBEATS_PER_PERIOD = 3

# Templated values in a spec. A title names data paths in braces ("Review {invoice_id}");
# a payload or input value that is "$" or starts with "$." is a path into the data.
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
# A data path in a placeholder, a condition or a display field: "invoice_id", "customer.name".
DATA_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
DATA_ROOT = "$"
DATA_PATH_PREFIX = "$."


def is_data_reference(value: object) -> bool:
    """Return True if value is a path into the execution's data ("$" or "$.a.b")."""
    return isinstance(value, str) and (value == DATA_ROOT or value.startswith(DATA_PATH_PREFIX))
