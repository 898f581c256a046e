"""Which pages may open the websockets: the rule of Django's CSRF origin check, applied to the
handshake's ``Origin`` header.

A socket is let in when its ``Origin`` is the site's own origin — the scheme (``https`` for a
``wss`` socket, or as ``SECURE_PROXY_SSL_HEADER`` says behind a proxy), the ``Host`` the
socket was opened on (which must pass ``ALLOWED_HOSTS``) and its port — or one of
``CSRF_TRUSTED_ORIGINS`` (``https://*.example.com`` covers the subdomains). Scheme and port
count: ``http://localhost:1`` is not ``http://localhost:8000``. The comparison is Channels'
(``OriginValidator.match_allowed_origin``); only the list of origins is the deployment's.

Channels' ``AllowedHostsOriginValidator`` compares host names only, so a page on another port
or scheme of a permitted host could open a socket with the users' cookies.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from channels.security.websocket import OriginValidator
from django.conf import settings
from django.http.request import split_domain_port, validate_host


class SameOriginValidator:
    """Wrap the websocket application with it, as with Channels' validators::

    "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))

    A refused handshake is denied (HTTP 403), before any consumer runs.
    """

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        # The origins depend on the socket's own Host and scheme: a validator per connection.
        validator = OriginValidator(self.application, allowed_origins(scope))
        return await validator(scope, receive, send)


def allowed_origins(scope: dict[str, Any]) -> list[str]:
    """The origins a page may open this socket from: its own (if its host is allowed) and
    ``CSRF_TRUSTED_ORIGINS``, as patterns of ``OriginValidator``."""
    headers = {
        name.decode("latin1").lower(): value.decode("latin1")
        for name, value in scope.get("headers", [])
    }
    origins = [_pattern(origin) for origin in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])]
    host = headers.get("host", "")
    domain, _port = split_domain_port(host)
    if domain and validate_host(domain, _allowed_hosts()):
        origins.append(f"{_scheme(scope, headers)}://{host}")
    return origins


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host(): with DEBUG and no ALLOWED_HOSTS, the local names.
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return allowed


def _scheme(scope: dict[str, Any], headers: dict[str, str]) -> str:
    """The scheme of the page that may open the socket: ``https`` for ``wss``, or behind a
    proxy that terminates TLS, as ``SECURE_PROXY_SSL_HEADER`` says (as ``request.scheme``)."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, secure = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower()
        if name in headers:
            return "https" if headers[name].split(",", 1)[0].strip() == secure else "http"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def _pattern(origin: str) -> str:
    """A ``CSRF_TRUSTED_ORIGINS`` entry as ``OriginValidator`` writes it: Django's
    ``https://*.example.com`` is its ``https://.example.com``."""
    parsed = urlparse(origin)
    if parsed.netloc.startswith("*."):
        return f"{parsed.scheme}://{parsed.netloc[1:]}"
    return origin
