import logging

import pytest
from cryptography.fernet import Fernet

from inbox.redaction import REDACTED, RedactTokens, redact
from inbox.tokens import TokenVaultError, token_decrypt, token_digest, token_encrypt, token_rotate

AWS_LIKE = "AQCEAAAAKgAAAAMAAAAAAAAAAY" + "x9Kq2Zr" * 120  # opaque, ~860 characters
UUID_LIKE = "3f2b8c1e-8a4d-4e0b-9b1a-2f6c7d8e9a0b"


@pytest.mark.parametrize("token", [AWS_LIKE, UUID_LIKE, "ünïcødé-token"])
def test_tokens_round_trip_and_are_not_stored_in_plain(token):
    ciphertext = token_encrypt(token)
    assert token.encode() not in ciphertext
    assert token_decrypt(ciphertext) == token


def test_digest_is_stable_keyed_and_independent_of_encryption():
    assert token_digest(UUID_LIKE) == token_digest(UUID_LIKE)
    assert token_digest(UUID_LIKE) != token_digest(UUID_LIKE + "x")
    assert token_encrypt(UUID_LIKE) != token_encrypt(UUID_LIKE)  # fresh IV each time
    assert UUID_LIKE not in token_digest(UUID_LIKE)


def test_rotation_reencrypts_under_the_new_key_and_old_ciphertexts_still_open(settings):
    old_ciphertext = token_encrypt(AWS_LIKE)
    new_key = Fernet.generate_key().decode()
    settings.INBOX_TOKEN_KEYS = [new_key, *settings.INBOX_TOKEN_KEYS]
    assert token_decrypt(old_ciphertext) == AWS_LIKE
    rotated = token_rotate(old_ciphertext)
    settings.INBOX_TOKEN_KEYS = [new_key]
    assert Fernet(new_key.encode()).decrypt(rotated).decode() == AWS_LIKE
    with pytest.raises(TokenVaultError) as caught:
        token_decrypt(old_ciphertext)
    assert AWS_LIKE not in str(caught.value)


def test_digest_key_change_changes_the_digest(settings):
    before = token_digest(UUID_LIKE)
    settings.INBOX_TOKEN_DIGEST_KEY = "another-digest-key"
    assert token_digest(UUID_LIKE) != before


@pytest.mark.parametrize("text", [
    f'{{"taskToken": "{UUID_LIKE}", "stage": "review"}}',
    f"{{'taskToken': '{UUID_LIKE}'}}",
    f"token={UUID_LIKE} stage=review",
    f"sent task_token: {UUID_LIKE}",
    f"opaque {AWS_LIKE} value",
])
def test_redact_removes_token_shaped_values(text):
    cleaned = redact(text)
    assert UUID_LIKE not in cleaned and AWS_LIKE not in cleaned
    assert REDACTED in cleaned


def test_redact_keeps_ordinary_text():
    text = "task 42 moved from queued to in_progress by ana@example.com"
    assert redact(text) == text


def test_logging_filter_redacts_arguments_and_exception_text():
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "envelope %s", ({"taskToken":
                               UUID_LIKE},), None)
    try:
        raise ValueError(f"bad token={UUID_LIKE}")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    RedactTokens().filter(record)
    assert UUID_LIKE not in record.getMessage()
    assert UUID_LIKE not in (record.exc_text or "")


def test_rotation_command_reencrypts_every_stored_token(make_task, settings):
    from io import StringIO

    from django.core.management import call_command

    from inbox.models import Task

    tasks = [make_task() for _ in range(3)]
    tokens = {t.pk: token_decrypt(t.token_ciphertext) for t in tasks}
    new_key = Fernet.generate_key().decode()
    settings.INBOX_TOKEN_KEYS = [new_key, *settings.INBOX_TOKEN_KEYS]
    out = StringIO()
    call_command("token_keys_rotate", stdout=out)
    assert "Re-encrypted 3 task token(s)" in out.getvalue()
    settings.INBOX_TOKEN_KEYS = [new_key]  # the old key is retired
    for task in Task.objects.all():
        assert token_decrypt(task.token_ciphertext) == tokens[task.pk]
