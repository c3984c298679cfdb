"""The OpenAPI schema documents every error each operation can answer, in the one shape."""

from drf_spectacular.generators import SchemaGenerator

from config.openapi import ERROR_SCHEMA


def _operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield schema, path, method, operation


def _documented_errors(operation):
    return {
        code for code, response in operation["responses"].items()
        if code >= "400"
        and response["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"}
    }


def test_every_operation_documents_401_403_and_500_in_the_error_shape(db):
    """Also the errors views declare themselves (404, 409) point at the one component."""
    operations = list(_operations())
    assert operations
    schema = operations[0][0]
    assert schema["components"]["schemas"]["Error"] == ERROR_SCHEMA
    for _, path, method, operation in operations:
        assert {"401", "403", "500"} <= _documented_errors(operation), (method, path)
        errors = {code for code in operation["responses"] if code >= "400"}
        assert errors == _documented_errors(operation), (method, path)
    assert "InboxError" not in schema["components"]["schemas"]


def test_operations_with_a_body_document_400_413_and_415_and_with_an_id_404(db):
    for _, path, method, operation in _operations():
        errors = _documented_errors(operation)
        if "requestBody" in operation:
            assert {"400", "413", "415"} <= errors, (method, path)
        if "{" in path:
            assert "404" in errors, (method, path)
        if path.startswith("/api/processes/"):
            assert "502" in errors, (method, path)
