"""What the OAuth tests share: accounts made over the admin API, apps, and reading the provider's HTML forms.

Independent of the server's own code: the pages are read as a browser would, from their `<form>` elements.
"""

import uuid
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urlsplit

import requests

PASSWORD = "correct horse battery staple"
# The app's registered redirect URI. Loopback: any port may be used at authorize time (spec 5.5).
REDIRECT = "http://127.0.0.1/callback"
APP_SCOPES = ["openid", "profile", "email", "read-endpoints", "read-memberships"]


def admin_call(server, method: str, path: str, token: str | None = None, **kwargs) -> dict:
    """One call of the server's JSON API (the instance admin's token unless `token` is given); fails on non-2xx."""
    resp = requests.request(
        method,
        server.url + path,
        headers={"Authorization": f"Bearer {token or server.admin_token}"},
        timeout=30,
        **kwargs,
    )
    assert resp.ok, f"{method} {path} -> {resp.status_code}: {resp.text}"
    return resp.json() if resp.content else {}


@dataclass
class OAuthWorld:
    """A user with a password, member (`write`) of an org, and the user's own confidential app."""

    user: str
    email: str
    user_id: str
    user_token: str  # an unrestricted personal token, for the app API
    org: str
    org_id: str
    client_id: str
    client_secret: str


def make_world(server) -> OAuthWorld:
    suffix = uuid.uuid4().hex[:6]
    user, org = f"olga-{suffix}", f"orbit-{suffix}"
    email = f"Olga.{suffix}@Example.test"
    account = admin_call(
        server, "POST", "/api/v1/admin/users", json={"name": user, "email": email, "password": PASSWORD}
    )
    org_account = admin_call(server, "POST", "/api/v1/admin/orgs", json={"name": org})
    admin_call(server, "PUT", f"/api/v1/admin/orgs/{org}/members/{user}", json={"role": "write"})
    user_token = admin_call(server, "POST", f"/api/v1/admin/users/{user}/tokens", json={})["token"]
    app = admin_call(
        server,
        "POST",
        "/api/v1/oauth/apps",
        token=user_token,
        json={
            "name": "Compat Notebook",
            "homepageUrl": "https://notebook.example/home",
            "redirectUris": [REDIRECT],
            "scopes": APP_SCOPES,
        },
    )
    return OAuthWorld(
        user=user,
        email=email,
        user_id=account["id"],
        user_token=user_token,
        org=org,
        org_id=org_account["id"],
        client_id=app["app"]["id"],
        client_secret=app["clientSecret"],
    )


@dataclass
class HtmlForm:
    action: str
    method: str
    fields: dict  # name -> value of every <input> with a name (hidden, text, checkbox...)
    buttons: list  # (name, value) of every submit button


class _FormParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms: list[HtmlForm] = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self.forms.append(HtmlForm(a.get("action", ""), a.get("method", "get").lower(), {}, []))
        elif not self.forms:
            return
        elif tag == "input" and a.get("name"):
            self.forms[-1].fields[a["name"]] = a.get("value", "")
        elif tag == "button" and a.get("type", "submit") == "submit":
            self.forms[-1].buttons.append((a.get("name", ""), a.get("value", "")))


def form_of(html: str, action: str) -> HtmlForm:
    """The page's form that posts to `action`; fails with the page when there is none."""
    parser = _FormParser()
    parser.feed(html)
    for form in parser.forms:
        if form.action == action:
            return form
    raise AssertionError(f"no form posting to {action} in the page:\n{html[:3000]}")


def sign_in(browser: requests.Session, page: requests.Response, username: str) -> requests.Response:
    """Fill the sign-in page's form as a user would and submit it. Redirects are followed while they stay on the
    provider (to the consent or device page); one that leaves it (back to the app) is returned unfollowed."""
    assert page.status_code == 200, f"{page.url} -> {page.status_code}: {page.text[:2000]}"
    form = form_of(page.text, "/oauth/login")
    data = dict(form.fields, username=username, password=PASSWORD)
    origin = origin_of(page.url)
    resp = browser.post(origin + form.action, data=data, allow_redirects=False, timeout=30)
    for _ in range(5):
        location = resp.headers.get("Location", "")
        if location.startswith("/"):
            location = origin + location
        if not resp.is_redirect or not location.startswith(origin + "/"):
            break
        resp = browser.get(location, allow_redirects=False, timeout=30)
    return resp


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
