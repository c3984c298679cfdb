"""The project's exception hierarchy; each error carries an HTTP status."""


class InboxError(Exception):
    """Base of every error the project raises on purpose."""

    status = 400
    code = "invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(InboxError):
    status = 404
    code = "not_found"


class Forbidden(InboxError):
    """The actor's role does not allow the operation."""

    status = 403
    code = "forbidden"


class Conflict(InboxError):
    status = 409
    code = "conflict"


class ExternalServiceError(InboxError):
    """A call to AWS (or the emulator) failed; retryable says if trying again may help."""

    status = 502
    code = "external_service"

    def __init__(self, message: str, *, retryable: bool, error_code: str = "") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.error_code = error_code
