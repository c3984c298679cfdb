"""./dev run: quiet by default, everything with -v, links that follow its port.

The commands and environment ./dev run builds are tested, and the settings read from that
environment in a real Django process; the whole system is not started here.
"""

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dev():
    loader = importlib.machinery.SourceFileLoader("dev_script", str(ROOT / "dev"))
    spec = importlib.util.spec_from_loader("dev_script", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


dev = _dev()


def _child(name: str, *, verbose: bool):
    return next(c for c in dev.children(port="8000", verbose=verbose) if c.name == name)


def _django_logging(env: dict[str, str]) -> dict[str, str]:
    """Return the effective level of a few loggers in a Django process started with env."""
    script = (
        "import django, logging; django.setup(); "
        "names = ['', 'inbox.tasks.changes', 'inbox.services.intake', 'inbox.audit', "
        "'celery.beat', 'celery.apps.worker']; "
        "print(' '.join(logging.getLevelName(logging.getLogger(n).getEffectiveLevel()) "
        "for n in names))"
    )
    full = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": "config.settings"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=full,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    names = ["root", "changes", "intake", "audit", "beat", "worker"]
    return dict(zip(names, result.stdout.split(), strict=True))


def test_dev_run_quiet_by_default_starts_celery_at_warning_without_banners():
    worker, beat = _child("worker", verbose=False), _child("beat", verbose=False)
    assert worker.args[worker.args.index("-l") + 1] == "WARNING"
    assert beat.args[beat.args.index("-l") + 1] == "WARNING"
    # -q: no banner of 25 lines at start.
    assert "-q" in worker.args and "-q" in beat.args
    # Quiet, beat has no start line to wait for; the worker's "ready." stays at INFO.
    assert beat.ready is None and worker.ready == " ready."
    web = _child("web", verbose=False)
    assert "--no-access-log" in web.args
    # uvicorn's four start lines no longer push the URL and passwords up: it starts at
    # WARNING, and ./dev run waits for its port instead of a line it no longer prints.
    assert web.args[web.args.index("--log-level") + 1] == "warning"
    assert web.args[web.args.index("--lifespan") + 1] == "off"
    assert web.ready == "port 8000"
    assert _child("web", verbose=True).ready == "Uvicorn running on"


def test_waiting_for_a_port_returns_once_it_answers_and_fails_when_the_child_exits():
    import socket
    import subprocess
    import sys

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            dev.wait_for_port(port, child=alive, name="web", timeout=5)
        finally:
            alive.kill()
            alive.wait()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(SystemExit, match="web exited before it was ready"):
        dev.wait_for_port(port, child=dead, name="web", timeout=5)


def test_dev_run_quiet_environment_shows_warnings_and_one_line_per_task_change():
    env = dev.child_env(port="8000", verbose=False, environ={})
    assert env["LOG_LEVEL"] == "WARNING"
    assert env["DJANGO_EMAIL_BACKEND"] == "django.core.mail.backends.filebased.EmailBackend"
    levels = _django_logging(env)
    assert levels == {"root": "WARNING", "changes": "INFO", "intake": "INFO",
                      "audit": "WARNING", "beat": "WARNING", "worker": "INFO"}


def test_dev_run_verbose_logs_everything_as_before():
    port, verbose = dev.run_options(["-v"], {})
    assert (port, verbose) == ("8000", True)
    worker, beat = _child("worker", verbose=True), _child("beat", verbose=True)
    assert worker.args[worker.args.index("-l") + 1] == "INFO"
    assert beat.args[beat.args.index("-l") + 1] == "INFO"
    assert "-q" not in worker.args and beat.ready == "beat: Starting"
    env = dev.child_env(port="8000", verbose=True, environ={})
    assert "LOG_LEVEL" not in env and "LOG_LEVELS" not in env
    assert "DJANGO_EMAIL_BACKEND" not in env
    assert _django_logging(env)["root"] == "INFO"


def test_dev_run_keeps_log_variables_the_user_set():
    env = dev.child_env(port="8000", verbose=False,
                        environ={"LOG_LEVEL": "INFO", "LOG_LEVELS": "celery.beat=DEBUG"})
    assert env["LOG_LEVEL"] == "INFO"
    # Theirs last, so it wins over ours for the same logger.
    assert env["LOG_LEVELS"].endswith(",celery.beat=DEBUG")
    assert "inbox.tasks.changes=INFO" in env["LOG_LEVELS"]


@pytest.mark.parametrize(("argv", "environ", "port"), [
    (["8123"], {}, "8123"),
    (["-v", "8123"], {}, "8123"),
    ([], {"INBOX_PORT": "9001"}, "9001"),
])
def test_dev_run_points_e_mail_links_at_the_port_it_serves(argv, environ, port):
    chosen, _ = dev.run_options(argv, environ)
    assert chosen == port
    for verbose in (False, True):
        env = dev.child_env(port=chosen, verbose=verbose, environ=environ)
        assert env["INBOX_BASE_URL"] == f"http://127.0.0.1:{port}"
        web = next(c for c in dev.children(port=chosen, verbose=verbose) if c.name == "web")
        assert web.args[web.args.index("--port") + 1] == port


def test_dev_run_base_url_reaches_django_settings():
    env = dev.child_env(port="8123", verbose=False, environ={})
    script = ("import django; django.setup(); from django.conf import settings; "
              "print(settings.INBOX_BASE_URL)")
    full = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": "config.settings"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=full,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "http://127.0.0.1:8123"


def test_dev_run_keeps_a_base_url_the_user_set():
    """Behind a tunnel or proxy, the address people reach is not the local port."""
    env = dev.child_env(port="8123", verbose=False,
                        environ={"INBOX_BASE_URL": "https://inbox.example.com"})
    assert env["INBOX_BASE_URL"] == "https://inbox.example.com"


@pytest.mark.parametrize("argv", [["abc"], ["0"], ["70000"], ["8000", "9000"]])
def test_dev_run_refuses_an_argument_that_is_not_a_port(argv):
    with pytest.raises(SystemExit, match="is not a port"):
        dev.run_options(argv, {})


def test_dev_run_says_where_passwords_and_e_mails_are():
    text = dev.demo_text("Demo users (passwords shown only now):\n  a@example.com x y\n",
                         verbose=False)
    assert "demo_setup --reset-passwords" in text
    assert "E-mails are written to" in text and "./dev run -v" in text
    assert "E-mails" not in dev.demo_text("Demo users ...\n", verbose=True)


def test_dev_run_starts_the_callbacks_sender_and_it_starts_and_stops_as_told():
    """The sender is one of ./dev run's processes; the line ./dev run waits for is the one
    the command prints, and SIGTERM stops it between rounds (a real process)."""
    import signal

    sender = _child("sender", verbose=False)
    assert sender.args[-2:] == ["manage.py", "callbacks_run"]
    names = [child.name for child in dev.children(port="8000", verbose=False)]
    assert names.index("sender") < names.index("web")
    process = subprocess.Popen(sender.args, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"})
    try:
        seen = [process.stdout.readline() for _ in range(1)]
        while sender.ready not in seen[-1] and seen[-1] and len(seen) < 50:
            seen.append(process.stdout.readline())  # a log line before it, if any
        assert sender.ready in seen[-1], seen
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, out
    assert out.splitlines()[-1] == "Callbacks sender stopped.", out
