//! A browser for the OAuth provider's pages, as the tests drive them: one cookie jar (the session
//! cookie, whose flags it checks), redirects read and never followed, and the pages' hidden fields.

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A browser: one cookie jar (the session cookie), redirects read by the test.
pub struct Browser {
    pub http: reqwest::Client,
    pub base: String,
    pub cookie: Option<String>,
    /// Sent as `X-Forwarded-For`: the address a trusted proxy says the browser has.
    pub forwarded_for: Option<String>,
}

impl Browser {
    pub fn new(base: &str) -> Browser {
        Browser {
            http: http(),
            base: base.to_string(),
            cookie: None,
            forwarded_for: None,
        }
    }

    fn keep_cookie(&mut self, resp: &reqwest::Response) {
        if let Some(c) = resp.headers().get("set-cookie") {
            let c = c.to_str().expect("cookie");
            assert!(c.contains("HttpOnly") && c.contains("SameSite=Lax"), "{c}");
            self.cookie = Some(c.split(';').next().expect("pair").to_string());
        }
    }

    pub async fn get(&mut self, path: &str) -> reqwest::Response {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        if let Some(a) = &self.forwarded_for {
            req = req.header("x-forwarded-for", a);
        }
        let resp = req.send().await.expect("get");
        self.keep_cookie(&resp);
        resp
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        let body = serde_urlencoded::to_string(form).expect("form");
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        if let Some(a) = &self.forwarded_for {
            req = req.header("x-forwarded-for", a);
        }
        let resp = req.send().await.expect("post");
        self.keep_cookie(&resp);
        resp
    }
}

pub fn location(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("location")
        .unwrap_or_else(|| panic!("no Location on a {}", resp.status()))
        .to_str()
        .expect("location")
        .to_string()
}

/// The value of a hidden input of a page.
pub fn field(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().expect("value").to_string()
}

pub fn query_of(url: &str) -> Vec<(String, String)> {
    let q = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    serde_urlencoded::from_str(q).expect("query")
}

pub fn param(url: &str, key: &str) -> Option<String> {
    query_of(url)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}
