"""Sign-in and consent in a real headless browser: Debian's chromium driven through playwright (its wheel ships the
driver; no browser is downloaded). The app is a tiny HTTP server on loopback that records where the browser lands.
"""

import base64
import hashlib
import http.server
import os
import secrets
import threading
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from conftest import skip_outside_ci
from oauth_support import PASSWORD, REDIRECT, make_world

CHROMIUM = os.environ.get("SWITCHYARD_CHROMIUM", "/usr/bin/chromium")
if not os.access(CHROMIUM, os.X_OK):
    # In CI, where scripts/test installs it (as root), this fails the run.
    skip_outside_ci(
        f"no chromium at {CHROMIUM}: install Debian's `chromium` (scripts/test does as root) or set SWITCHYARD_CHROMIUM",
        module=True,
    )

from playwright.sync_api import sync_playwright  # noqa: E402

PHONE = {"width": 390, "height": 844}
NO_OVERFLOW = "() => [document.documentElement.scrollWidth, window.innerWidth]"


class _App(http.server.BaseHTTPRequestHandler):
    """The app's redirect endpoint: records each request's path and Referer, and says the user is back."""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.server.paths.append(self.path)
        self.server.referers.append(self.headers.get("Referer"))
        body = b"<!doctype html><title>Back in the app</title><p>Signed in.</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def app_server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _App)
    httpd.paths = []
    httpd.referers = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def chromium():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


def fits_the_screen(page) -> None:
    scroll_width, inner_width = page.evaluate(NO_OVERFLOW)
    assert scroll_width <= inner_width, f"{page.url}: {scroll_width}px wide in a {inner_width}px viewport"


def test_sign_in_and_consent_in_a_real_browser(server, chromium, app_server):
    world = make_world(server)
    port = app_server.server_address[1]
    redirect = f"http://127.0.0.1:{port}/callback"  # the registered loopback URI, on the app's real port
    assert REDIRECT == "http://127.0.0.1/callback"
    state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    authorize = f"{server.url}/oauth/authorize?" + urlencode(
        {
            "response_type": "code",
            "client_id": world.client_id,
            "redirect_uri": redirect,
            "scope": "openid profile email",
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )

    # A phone: the pages must be usable at 390 px without scrolling sideways.
    context = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=3)
    try:
        page = context.new_page()
        page.goto(authorize)
        assert page.locator("h1").inner_text() == "Sign in"
        assert "Compat Notebook" in page.content()
        fits_the_screen(page)
        page.fill("#username", world.user)
        page.fill("#password", PASSWORD)
        page.click("button:has-text('Sign in')")

        page.wait_for_url(f"{server.url}/oauth/consent?**")
        assert "Authorize Compat Notebook" in page.locator("h1").inner_text()
        # Where the code goes, not the homepage the app claims.
        assert "127.0.0.1" in page.locator("main").inner_text()
        assert "notebook.example" not in page.content()
        fits_the_screen(page)
        page.check(f"input[name=org][value='{world.org_id}']")
        page.click("button:has-text('Authorize')")

        # The browser lands on the app, with the code, our state and the issuer.
        page.wait_for_url(f"{redirect}?**")
        assert "Signed in." in page.content()
        back = parse_qs(urlsplit(page.url).query)
        assert back["state"] == [state]
        assert back["iss"] == [server.url]
        code = back["code"][0]
        landed = urlsplit(page.url)
        callbacks = [(p, r) for p, r in zip(app_server.paths, app_server.referers) if p.startswith("/callback")]
        assert [p for p, _ in callbacks] == [f"{landed.path}?{landed.query}"]
        # The provider's pages (whose URLs hold the flow's parameters) are not sent to the app as a referrer.
        assert callbacks[0][1] is None

        # The session cookie: HttpOnly, SameSite=Lax, scoped to the provider's pages; not Secure on an http issuer.
        cookies = context.cookies()
        session = [c for c in cookies if c["name"] == "sy_session"]
        assert len(session) == 1, cookies
        assert session[0]["httpOnly"] is True
        assert session[0]["sameSite"] == "Lax"
        assert session[0]["secure"] is False
        assert session[0]["domain"] == "127.0.0.1"
        # No flow state in clear in any cookie (oauth-reference pitfall 13).
        for cookie in cookies:
            for secret in (state, nonce, challenge, verifier, code, redirect, world.client_id):
                assert secret not in cookie["value"] and secret not in cookie["name"], (cookie["name"], secret)

        # Signed in, the device page renders on the phone too.
        page.goto(f"{server.url}/oauth/device")
        assert page.locator("h1").inner_text() == "Connect a device"
        fits_the_screen(page)
    finally:
        context.close()

    # The code the browser carried is good for tokens (Basic auth, the PKCE verifier).
    resp = requests.post(
        f"{server.url}/oauth/token",
        auth=(world.client_id, world.client_secret),
        data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect, "code_verifier": verifier},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    token = resp.json()
    assert token["scope"] == "openid profile email"
    info = requests.get(
        f"{server.url}/oauth/userinfo", headers={"Authorization": f"Bearer {token['access_token']}"}, timeout=30
    ).json()
    assert [o["sub"] for o in info["organizations"]] == [world.org_id]
