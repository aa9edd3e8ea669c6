"""The console's routes: its static page (``/console``, files shipped in the package, served
with a strict Content-Security-Policy) and its login, session and logout calls under
``/console/api/``. Everything else the page does goes through the admin API and the feed;
signing in through an OIDC issuer is ``console.oidc``.
"""

from __future__ import annotations

from importlib import resources

import orjson
from aiohttp import web

from a2a_gateway.auth.sessions import COOKIE, ConsoleSessions, Session, csrf_ok
from a2a_gateway.governance.audit import RefusedSignIns, record
from a2a_gateway.state import GATEWAY

CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def _static_files() -> dict[str, tuple[bytes, str]]:
    """File name → (content, content type) of every file in ``static/``, read once."""
    folder = resources.files(__package__) / "static"
    return {item.name: (item.read_bytes(), CONTENT_TYPES[suffix]) for item in folder.iterdir()
            if (suffix := "." + item.name.rpartition(".")[2]) in CONTENT_TYPES}


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json",
                        headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


async def login(request: web.Request) -> web.Response:
    """``{"key": "<operator key>"}`` → the session cookie, and its CSRF token in the body."""
    gateway = request.app[GATEWAY]
    sessions = gateway.operators.sessions
    try:
        key = orjson.loads(await request.read()).get("key")
    except (orjson.JSONDecodeError, AttributeError):
        key = None
    if not isinstance(key, str) or not key:
        raise web.HTTPBadRequest(reason='the body must be {"key": "<operator key>"}')
    ref = gateway.operators.key_ref(key)
    if sessions is None or ref is None:
        await request.app[REFUSED_SIGN_INS].record(  # the key tried is never recorded
            gateway.store, "unknown", {"method": "operator key"}
        )
        return _json({"error": "not a gateway operator key"}, status=401)
    session, cookie = sessions.issue(ref)
    await record(gateway.store, f"key:{ref}", "console.signed_in",
                 details={"method": "operator key"})
    response = _json(_session_body(session))
    set_session_cookie(response, sessions, cookie, secure=gateway.base_url(request).startswith("https://"))
    return response


def set_session_cookie(
    response: web.StreamResponse, sessions: ConsoleSessions, cookie: str, *, secure: bool
) -> None:
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(sessions.lifetime_seconds),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=secure,
    )


def _session_body(found: Session) -> dict[str, object]:
    """The session's CSRF token and expiry, and who is logged in (for the page to show)."""
    operator = (
        {"via": "oidc", "name": found.oidc.name, "issuer": found.oidc.issuer}
        if found.oidc is not None
        else {"via": "operator key"}
    )
    return {"csrf": found.csrf, "expires": found.expires, "operator": operator}


async def session(request: web.Request) -> web.Response:
    """The request's session (the page reads it again after a reload): its CSRF token and who
    is logged in. A session of a key or an issuer no longer configured is none."""
    operator = request.app[GATEWAY].operators.gateway_operator(request.headers)
    if operator is None or operator.session is None:
        return _json({"error": "not logged in"}, status=401)
    return _json(_session_body(operator.session))


async def logout(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    found = gateway.operators.sessions.read(request.headers) if gateway.operators.sessions else None
    if found is not None and not csrf_ok(found, request.headers):
        return _json({"error": "logging out needs the session's CSRF token"}, status=403)
    response = _json({"loggedOut": True})
    response.del_cookie(COOKIE, path="/")
    return response


REFUSED_SIGN_INS = web.AppKey("console_refused_sign_ins", RefusedSignIns)


def add_console_routes(app: web.Application) -> None:
    files = _static_files()

    def serve(name: str) -> web.Response:
        content, content_type = files[name]
        return web.Response(body=content, content_type=content_type, headers=SECURITY_HEADERS)

    async def page(request: web.Request) -> web.Response:
        return serve("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files:
            raise web.HTTPNotFound(reason="no such console file")
        return serve(name)

    app[REFUSED_SIGN_INS] = RefusedSignIns()
    app.router.add_get("/console", page)
    app.router.add_get("/console/", page)
    app.router.add_get("/console/static/{name}", asset)
    app.router.add_post("/console/api/login", login)
    app.router.add_get("/console/api/session", session)
    app.router.add_post("/console/api/logout", logout)
