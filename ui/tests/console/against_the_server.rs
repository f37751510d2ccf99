//! The console against the real server on loopback (the apps and audit log views, the deploy form, a refused
//! token, a webhook's secret and deliveries): its effects run through the typed client, their answers go
//! through `update`, as the event loop does it.

use chrono::Utc;
use serde_json::{json, Value};
use switchyard_server::client::Client;
use switchyard_server::{Application, Config};
use switchyard_ui::forms::app::AppField;
use switchyard_ui::forms::deploy::Field;
use switchyard_ui::forms::input::Form;
use switchyard_ui::keymap::Keymap;
use switchyard_ui::perform;
use switchyard_ui::state::{
    update, Action, Analytics, ChartRange, Connection, Effect, Key, Overlay, Runs, State,
};

struct Console {
    state: State,
    client: Client,
    keymap: Keymap,
}

impl Console {
    /// Applies `action`, then runs every effect it asks for against the server and applies the answers, until
    /// nothing is left to run.
    async fn apply(&mut self, action: Action) {
        let mut pending = vec![action];
        while let Some(action) = pending.pop() {
            for effect in update(&mut self.state, action, &self.keymap) {
                // The live feeds (and the reads of the servers on the store) poll for ever; these views
                // need no more than a webhook's first page.
                let follows = matches!(
                    effect,
                    Effect::FollowNotifications { .. }
                        | Effect::FollowDeliveries { after: Some(_), .. }
                        | Effect::LoadServers { .. }
                );
                if follows {
                    continue;
                }
                if let Some(answer) = perform(&self.client, effect).await {
                    pending.push(answer);
                }
            }
        }
    }

    async fn keys(&mut self, keys: &[&str]) {
        for k in keys {
            self.apply(Action::Key(Key(k.to_string()))).await;
        }
    }

    async fn typed(&mut self, text: &str) {
        for c in text.chars() {
            let k = if c == ' ' {
                "space".to_string()
            } else {
                c.to_string()
            };
            self.keys(&[&k]).await;
        }
    }

    async fn command(&mut self, text: &str) {
        self.keys(&[":"]).await;
        self.typed(text).await;
        self.keys(&["enter"]).await;
    }

    /// The secret shown in the popup, if one is.
    fn shown_secret(&self) -> Option<String> {
        match &self.state.overlay {
            Overlay::Secret(issued) => Some(issued.secret.reveal().to_string()),
            _ => None,
        }
    }
}

/// A server on loopback (its data in `dir`): its URL and the admin's client.
async fn server(dir: &std::path::Path) -> (String, Client) {
    server_with(dir, |_| {}).await
}

/// The same, with `configure` changing the config first.
async fn server_with(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut Config),
) -> (String, Client) {
    let mut config = Config::default();
    configure(&mut config);
    config.store.data_dir = Some(dir.to_path_buf());
    config.runtime.engines_dir = Some(dir.join("engines"));
    // Whatever this machine has: the console is shown a server without GPUs.
    config.runtime.accelerators = Some(vec!["cpu".into()]);
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    let app = Application::build(&config).await.unwrap();
    let url = format!("http://{}", app.local_addr());
    let token = std::fs::read_to_string(dir.join("admin-token")).unwrap();
    tokio::spawn(app.run(std::future::pending()));
    let admin = Client::new(&url, Some(token.trim().to_string()));
    (url, admin)
}

/// A small CPU endpoint of a hub model that may scale to zero.
fn small_endpoint(name: &str) -> Value {
    json!({
        "name": name, "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x1",
                    "scaling": {"minReplica": 0, "maxReplica": 1}},
        "model": {"repository": "BAAI/bge-small-en-v1.5", "framework": "pytorch", "image": {"hub": {}}}
    })
}

/// The console on `client`, signed in (or refused) as it starts.
async fn console(url: &str, client: &Client) -> Console {
    let mut console = Console {
        state: State::new(url.to_string(), false, Utc::now(), String::new()),
        client: client.clone(),
        keymap: Keymap::builtin(),
    };
    let signed_in = perform(client, Effect::SignIn).await.unwrap();
    console.apply(signed_in).await;
    console
}

#[tokio::test(flavor = "multi_thread")]
async fn apps_and_the_audit_log_on_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let (url, admin) = server(dir.path()).await;
    let _: Value = admin.admin_create_org("acme").await.unwrap();
    let _: Value = admin
        .admin_create_user(&json!({"name": "bob"}))
        .await
        .unwrap();
    let _: Value = admin.admin_set_member("acme", "bob", "read").await.unwrap();
    let bob_token = admin.admin_create_token("bob", &json!({})).await.unwrap();

    let mut console = console(&url, &admin).await;
    console.command("apps").await;
    assert!(console.state.apps.is_empty() && console.state.apps_note.is_none());

    // A new confidential app: its secret shown once, the list with the app.
    console.keys(&["n"]).await;
    console.typed("Web dashboard").await;
    console.keys(&["tab"]).await;
    console.typed("https://dash.example.com/callback").await;
    console.keys(&["enter"]).await;
    let secret = console.shown_secret().expect("the new app's secret");
    assert!(secret.starts_with("sys_"), "{secret}");
    assert_eq!(console.state.apps.len(), 1);
    let web = console.state.apps[0].clone();
    assert!(!web.public && web.name == "Web dashboard");
    console.keys(&["esc"]).await;
    assert!(console.shown_secret().is_none());

    // A refused app: every issue under its field, the form still open.
    console.keys(&["n"]).await;
    console.keys(&["tab", "tab"]).await;
    console.typed(" everything").await;
    console.keys(&["enter"]).await;
    let Overlay::NewApp(form) = &console.state.overlay else {
        panic!("{:?}", console.state.overlay)
    };
    assert!(
        form.issues_of(AppField::Scopes)
            .any(|m| m.contains("scopes[2]") && m.contains("everything")),
        "{form:?}"
    );
    console.keys(&["esc"]).await;

    // Rotate (a new secret, shown once), delete the secret (public now), then delete the app.
    console.keys(&["S", "tab", "enter"]).await;
    let rotated = console.shown_secret().expect("the rotated secret");
    assert_ne!(rotated, secret);
    console.keys(&["enter"]).await;
    console.keys(&["X", "tab", "enter"]).await;
    assert!(console.state.apps[0].public, "{:?}", console.state.apps);
    console.keys(&["ctrl-d", "tab", "enter"]).await;
    assert!(console.state.apps.is_empty(), "{:?}", console.state.message);

    // The audit log: empty for its administrator (the instance admin), refused in words for a member.
    console.command("audit acme").await;
    assert_eq!(console.state.audit_note, None);
    console.client = Client::new(&url, Some(bob_token));
    console.keys(&["r"]).await;
    assert_eq!(
        console.state.audit_note.as_deref(),
        Some("only the organization's administrators see its audit log")
    );
    // Someone else's apps: the server's reason instead of a table.
    console.command("apps acme").await;
    assert!(
        console.state.apps_note.is_some(),
        "{:?}",
        console.state.apps
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_deploy_form_shows_every_issue_of_one_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (url, admin) = server(dir.path()).await;
    let mut console = console(&url, &admin).await;
    assert!(!console.state.catalog.is_empty());
    // No namespace and a bad name, sent at once: both come back in one answer, each beside its field.
    console.keys(&["D"]).await;
    for _ in "admin".chars() {
        console.keys(&["backspace"]).await;
    }
    console.keys(&["tab", "tab"]).await;
    console.typed("Bad_Name").await;
    console.keys(&["enter"]).await;
    let Overlay::Deploy(form) = &console.state.overlay else {
        panic!("{:?}", console.state.overlay)
    };
    assert!(!form.state.busy);
    assert!(form.issues_of(Field::Name).next().is_some(), "{form:?}");
    assert!(
        form.issues_of(Field::Namespace).next().is_some(),
        "{form:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_token_still_shows_the_public_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = server(dir.path()).await;
    let wrong = Client::new(&url, Some("sy_not-a-token".to_string()));
    let console = console(&url, &wrong).await;
    let Connection::Unauthorized(why) = &console.state.connection else {
        panic!("{:?}", console.state.connection)
    };
    assert!(why.starts_with("401"), "{why}");
    assert!(console.state.user.is_none());
    assert!(!console.state.catalog.is_empty(), "the catalog is public");
}

/// Writes the manifest an engine install leaves (the engine is never started here).
fn fake_install(dir: &std::path::Path, name: &str) {
    let engine = dir.join("engines").join(name);
    std::fs::create_dir_all(&engine).unwrap();
    let manifest = json!({"name": name, "command": ["/bin/true", "{port}"], "healthRoute": "/health",
                          "installedAt": "2026-11-24T00:00:00Z", "python": "/usr/bin/python3"});
    std::fs::write(engine.join("engine.json"), manifest.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_catalog_marks_what_runs_here_and_a_deploy_offers_the_engine_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let (url, admin) = server(dir.path()).await;
    let mut console = console(&url, &admin).await;
    let row = |c: &Console, repo: &str| {
        c.state
            .catalog
            .iter()
            .find(|r| r.repo_id == repo)
            .cloned()
            .unwrap()
    };
    let minilm = "sentence-transformers/all-MiniLM-L6-v2";
    let marks = |c: &Console, repo: &str| c.state.engines.model_mark(&row(c, repo)).mark();
    assert_eq!(marks(&console, minilm), "install");
    assert_eq!(marks(&console, "BAAI/bge-large-en-v1.5"), "no");
    fake_install(dir.path(), "minilm");
    console.keys(&["r"]).await;
    assert_eq!(marks(&console, minilm), "yes", "r reloads what runs here");
    assert_eq!(
        console
            .state
            .engines
            .recipe_note("all-minilm-l6-v2-cpu-tei", "cpu"),
        (Runs::Here, "runs here (minilm)".to_string())
    );
    // A GPU recipe on a server without GPUs lacks the compute, not an engine.
    assert_eq!(
        console
            .state
            .engines
            .recipe_note("bge-large-en-v1-5-gpu-tei", "gpu"),
        (Runs::No, "no gpu here".to_string())
    );
    std::fs::remove_dir_all(dir.path().join("engines/minilm")).unwrap();
    console.keys(&["r"]).await;

    // Deploying the model whose engine is missing: the endpoint is made, then the install is offered.
    console.keys(&["/"]).await;
    console.typed("all-minilm-l6").await;
    console.keys(&["enter", "D"]).await;
    console.keys(&["enter"]).await;
    let Overlay::Confirm { asked, yes } = &console.state.overlay else {
        panic!("{:?} {:?}", console.state.overlay, console.state.message)
    };
    assert!(!yes, "cancel by default");
    let Effect::InstallEngine { name, endpoint } = asked else {
        panic!("{asked:?}")
    };
    assert_eq!(name, "minilm");
    assert!(endpoint.starts_with("admin/"), "{endpoint}");
    let ep: Value = admin
        .get_endpoint("admin", endpoint.trim_start_matches("admin/"))
        .await
        .unwrap();
    assert_eq!(ep["model"]["repository"], minilm);
}

/// Waits until the webhook `id` is held (at most a minute: its deliveries need the outbox and a worker to
/// come round).
async fn until_held(client: &Client, id: &str) {
    for _ in 0..600 {
        if let Ok(v) = client.webhook::<Value>(id).await {
            if v["webhook"]["heldUntil"].is_string() {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("webhook {id} was never held")
}

/// A webhook made in the console: its signing secret is shown once. Its receiver is down: each attempt names
/// what changed and carries the request sent; failing twice in a row holds the webhook (its circuit breaker),
/// which the deliveries view says, with until when.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_made_here_shows_its_secret_once_and_its_deliveries_say_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (url, admin) = server_with(dir.path(), |c| {
        c.outbound.allow = vec!["127.0.0.0/8".into()];
        c.webhooks.retry_schedule = vec!["1h".into()];
        c.webhooks.breaker_failures = 2;
        c.webhooks.breaker_hold = "10m".into();
    })
    .await;
    // A port nothing listens on: every attempt fails to connect.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let mut console = console(&url, &admin).await;
    console.command("webhooks").await;
    console.keys(&["n"]).await;
    console.typed(&hook).await;
    console.keys(&["enter"]).await;
    let secret = console
        .shown_secret()
        .expect("the new webhook's signing secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    console.keys(&["esc"]).await;
    assert!(console.shown_secret().is_none());
    let id = console.state.webhooks[0].id.clone();

    // Two changes in the watched namespace: two failed attempts in a row hold the webhook.
    let _: Value = admin
        .create_endpoint("admin", &small_endpoint("hooked"))
        .await
        .unwrap();
    until_held(&admin, &id).await;

    // The list again, and the webhook's deliveries.
    console.keys(&["r", "enter"]).await;
    let feed = &console.state.deliveries;
    assert!(!feed.rows.is_empty(), "{:?}", console.state.message);
    let created = feed
        .rows
        .iter()
        .find(|r| r.change == "created")
        .expect("the create's attempt");
    assert_eq!(created.subject, "endpoint admin/hooked");
    assert_eq!(created.error_class, "connect");
    assert_eq!(created.payload["webhook"]["id"], json!(id));
    assert_eq!(created.payload["endpoint"]["name"], "hooked");
    let now = Utc::now();
    let standing = feed
        .hook
        .as_ref()
        .map(|h| h.standing(now))
        .unwrap_or_default();
    assert!(standing.starts_with("held until "), "{standing}");
    // Its details: the request sent and the (missing) answer.
    let at = feed
        .rows
        .iter()
        .position(|r| r.change == "created")
        .unwrap_or(0);
    for _ in 0..at {
        console.keys(&["j"]).await;
    }
    console.keys(&["d"]).await;
    let Overlay::Describe(pager) = &console.state.overlay else {
        panic!("{:?}", console.state.overlay)
    };
    let text = pager.lines.join("\n");
    for want in [
        "about      endpoint admin/hooked: created",
        &format!("POST {hook}"),
        "\"name\": \"hooked\"",
        "status     - (no answer)",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoints_describe_reads_its_charts_and_decisions_from_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (url, admin) = server(dir.path()).await;
    let _: Value = admin
        .create_endpoint("admin", &small_endpoint("charted"))
        .await
        .unwrap();
    let mut console = console(&url, &admin).await;
    console.command("endpoints").await;
    console.keys(&["enter"]).await;
    fn shown(c: &Console) -> Option<Result<Analytics, String>> {
        let charts = c.state.charts.of("admin", "charted")?;
        Some(charts.cloned().map_err(str::to_string))
    }
    let Some(Ok(hour)) = shown(&console) else {
        panic!(
            "{:?} {:?}",
            console.state.charts.shown, console.state.message
        )
    };
    assert_eq!(hour.range, ChartRange::Hour);
    // The server answered a point for every step of the hour, none with requests yet.
    assert!(hour.series.requests_per_second.len() >= 60, "{hour:?}");
    assert!(hour.series.requests_per_second.iter().all(|r| *r == 0.0));
    assert!(hour.to - hour.from >= chrono::Duration::hours(1));
    let Overlay::Describe(pager) = &console.state.overlay else {
        panic!("{:?}", console.state.overlay)
    };
    assert!(pager.charts, "the charts take the top of the pane");
    assert!(pager.lines.iter().any(|l| l == "decisions, newest first:"));
    // The next range is read from the server too.
    console.keys(&["t"]).await;
    let Some(Ok(day)) = shown(&console) else {
        panic!("{:?}", console.state.charts.shown)
    };
    assert_eq!(day.range, ChartRange::Day);
    assert!(day.to - day.from >= chrono::Duration::hours(24));
}
