//! The OAuth provider through the real binary: apps and keys from `switchyard admin`, and
//! `switchyard login` / `logout` signing in by device code while a browser session approves.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common;
use common::{serve_with, BIN};

const PASSWORD: &str = "correct horse battery";

fn admin(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .arg("admin")
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run switchyard admin");
    let input = stdin.unwrap_or_default().to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A browser session: its cookie, and the pages' hidden fields.
struct Browser {
    http: reqwest::Client,
    base: String,
    cookie: String,
}

fn field(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().unwrap().to_string()
}

impl Browser {
    async fn send(&mut self, req: reqwest::RequestBuilder) -> (u16, String, Option<String>) {
        let resp = req.header("cookie", &self.cookie).send().await.unwrap();
        if let Some(c) = resp.headers().get("set-cookie") {
            self.cookie = c.to_str().unwrap().split(';').next().unwrap().to_string();
        }
        let location = resp
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_string());
        (resp.status().as_u16(), resp.text().await.unwrap(), location)
    }

    async fn get(&mut self, path: &str) -> (u16, String, Option<String>) {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> (u16, String, Option<String>) {
        let req = self.http.post(format!("{}{path}", self.base)).form(form);
        self.send(req).await
    }

    /// Signs in on the device page and approves `user_code`.
    async fn approve_device(&mut self, user_code: &str) {
        let (_, page, _) = self
            .get(&format!("/oauth/device?user_code={user_code}"))
            .await;
        let login = [
            ("csrf", field(&page, "csrf")),
            ("next", field(&page, "next")),
            ("request", String::new()),
            ("user_code", field(&page, "user_code")),
            ("username", "alice".into()),
            ("password", PASSWORD.into()),
        ];
        let login: Vec<(&str, &str)> = login.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, _, next) = self.post("/oauth/login", &login).await;
        assert_eq!(status, 303);
        let (_, entry, _) = self.get(&next.unwrap()).await;
        let csrf = field(&entry, "csrf");
        assert_eq!(
            field(&entry, "user_code"),
            user_code,
            "verification_uri_complete pre-fills"
        );
        let (_, confirm, _) = self
            .post(
                "/oauth/device/verify",
                &[("csrf", &csrf), ("user_code", user_code)],
            )
            .await;
        assert!(confirm.contains("Switchyard CLI"), "{confirm}");
        let decide = [
            ("csrf", csrf.as_str()),
            ("user_code", user_code),
            ("decision", "approve"),
        ];
        let (status, done, _) = self.post("/oauth/device/decide", &decide).await;
        assert_eq!(status, 200, "{done}");
    }
}

#[tokio::test]
async fn admin_apps_keys_and_login_by_device_code() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[oauth]\ndevice_interval_s = 1\n").unwrap();
    let server = serve_with(&data, &["--config".as_ref(), config.as_os_str()]);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    admin(
        &data,
        &[
            "user",
            "create",
            "alice",
            "--email",
            "alice@example.com",
            "--password-stdin",
        ],
        Some(&format!("{PASSWORD}\n")),
    );
    admin(&data, &["org", "create", "acme"], None);
    let made: Value = serde_json::from_str(&admin(
        &data,
        &[
            "app",
            "create",
            "--owner",
            "alice",
            "--name",
            "Notes",
            "--redirect-uri",
            "http://127.0.0.1/cb",
            "--redirect-uri",
            "https://notes.example/cb",
            "--scopes",
            "openid profile",
        ],
        None,
    ))
    .unwrap();
    assert!(made["clientId"].as_str().unwrap().starts_with("app_"));
    assert!(made["clientSecret"].as_str().unwrap().starts_with("sys_"));
    let public: Value = serde_json::from_str(&admin(
        &data,
        &[
            "app", "create", "--owner", "alice", "--name", "CLI", "--scopes", "openid", "--public",
        ],
        None,
    ))
    .unwrap();
    assert!(public["clientSecret"].is_null());
    let exchange: Value = serde_json::from_str(&admin(
        &data,
        &[
            "app",
            "create",
            "--owner",
            "acme",
            "--name",
            "backend",
            "--scopes",
            "read-endpoints",
            "--token-exchange",
        ],
        None,
    ))
    .unwrap();
    assert!(exchange["clientSecret"].is_string());
    assert!(admin(&data, &["app", "list", "--owner", "acme"], None).contains("token-exchange"));

    assert!(admin(&data, &["key", "rotate"], None).contains("signs from"));
    // An organization's exchanged tokens live up to 30 days.
    assert!(admin(&data, &["org", "exchange-ttl", "acme", "7d"], None).contains("604800s"));
    let too_long = Command::new(BIN)
        .args(["admin", "--data-dir"])
        .arg(&data)
        .args(["org", "exchange-ttl", "acme", "31d"])
        .output()
        .unwrap();
    assert!(!too_long.status.success());
    assert!(String::from_utf8_lossy(&too_long.stderr).contains("30 days"));
    let rows = admin(&data, &["app", "list", "--owner", "alice"], None);
    assert!(rows.contains("Notes") && rows.contains("public"), "{rows}");

    // `switchyard login`: prints the code, waits while a browser approves, keeps the token.
    let mut login = Command::new(BIN)
        .args(["login", "--server", &server.url, "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = login.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().unwrap().unwrap();
    let user_code = first.rsplit(' ').next().unwrap().to_string();
    assert!(first.contains("/oauth/device"), "{first}");
    assert_eq!(user_code.len(), 9, "{first}");
    let mut browser = Browser {
        http: http.clone(),
        base: server.url.clone(),
        cookie: String::new(),
    };
    browser.approve_device(&user_code).await;
    let status = tokio::task::spawn_blocking(move || login.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    let creds_path = dir.path().join("credentials.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&creds_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let creds: Value =
        serde_json::from_str(&std::fs::read_to_string(&creds_path).unwrap()).unwrap();
    let token = creds["servers"][server.url.as_str()]["accessToken"]
        .as_str()
        .unwrap()
        .to_string();
    let whoami = |token: String| {
        let http = http.clone();
        let url = server.url.clone();
        async move {
            http.get(format!("{url}/api/whoami-v2"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
        }
    };
    let me: Value = whoami(token.clone()).await.json().await.unwrap();
    assert_eq!(me["name"], "alice");
    assert_eq!(me["auth"]["app"]["clientId"], "switchyard-cli");

    let out = Command::new(BIN)
        .args(["logout", "--server", &server.url, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("revoked"));
    assert_eq!(whoami(token).await.status(), 401);
    let creds: Value =
        serde_json::from_str(&std::fs::read_to_string(&creds_path).unwrap()).unwrap();
    assert!(creds["servers"].as_object().unwrap().is_empty());
}
