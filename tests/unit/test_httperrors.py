"""A provider's error message keeps the provider's words but never the credential the request
carried (some providers echo the key they refused; the message is stored, logged, shown and
replicated)."""

from __future__ import annotations

import httpx
import pytest

from fredica.domain import errors
from fredica.executors import httperrors

KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    ("headers", "url"),
    [
        ({"Authorization": f"Bearer {KEY}"}, "https://api.example/v1/chat"),
        ({"Authorization": f"DeepL-Auth-Key {KEY}"}, "https://api.deepl.com/v2/translate"),
        ({"x-api-key": KEY}, "https://api.anthropic.com/v1/messages"),
        ({}, f"https://translation.example/v2?key={KEY}&q=hi"),
    ],
)
def test_the_key_a_provider_echoes_is_redacted(headers: dict[str, str], url: str) -> None:
    request = httpx.Request("POST", url, headers=headers)
    echoed = {"error": {"message": f"Incorrect API key provided: {KEY}. See the docs."}}
    response = httpx.Response(401, json=echoed, request=request)
    error = httperrors.for_status(response, "chat fake")
    assert isinstance(error, errors.PermanentError)
    assert KEY not in error.message
    assert error.message == (
        "chat fake: HTTP 401 unauthorized (is the API key valid?): "
        "Incorrect API key provided: [redacted]. See the docs."
    )
    text = httpx.Response(403, text=f"denied for {KEY}", request=request)
    assert httperrors.error_text(text) == "denied for [redacted]"


def test_a_message_without_a_key_or_a_request_is_kept_as_it_is() -> None:
    request = httpx.Request("POST", "https://x/v1", headers={"Authorization": f"Bearer {KEY}"})
    plain = httpx.Response(400, json={"error": "model not found"}, request=request)
    assert httperrors.error_text(plain) == "model not found"
    detached = httpx.Response(500, json={"message": "overloaded"})
    assert httperrors.error_text(detached) == "overloaded"
    long = httpx.Response(400, text="x" * 2000, request=request)
    assert httperrors.error_text(long) == "x" * 300
