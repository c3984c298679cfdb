"""The local Step Functions and SQS emulator: moto in server mode, for development only.

``./dev run``, the tests and the benchmarks start it with ``manage.py emulator``; production
talks to real AWS and never imports this package. It needs moto, which
requirements-emulator.txt installs and requirements.txt leaves out, so no production
module imports moto or this package, and the emulator command imports ``server`` only
when it runs (tests/config/test_production_imports.py checks both).

- ``server``: ``serve`` runs moto's server on loopback with ASL execution on and blocks
  until SIGTERM or SIGINT; ``config_read`` reads a running emulator's settings.
- ``shims``: patches of moto 5.2.5's internals, applied by ``serve`` (nested executions, the
  config report).
- ``status``: patches that make moto 5.2.5 report execution status as AWS does, applied by
  ``serve``: StopExecution aborts a waiting execution at once, and every status change
  puts AWS's "Step Functions Execution Status Change" event on the default EventBridge bus.
- ``cloudformation``: a patch that makes moto 5.2.5's CloudFormation create state machines
  where the API and its ASL interpreter find them, with their logging configuration,
  applied by ``serve``.
"""

from config.errors import InboxError


class EmulatorError(InboxError):
    """The emulator could not start or stopped working."""

    code = "emulator"
