//! `switchyard webhooks …`: a server's webhooks managed over HTTP (`/api/settings/webhooks`), through
//! the typed client, as the caller the token signs in.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use switchyard_server::client::{Client, ClientError};
use switchyard_server::model::webhook::{AttemptOut, WebhookOut};

use crate::table::{line, table};

/// How long one `--follow` poll asks the server to hold (it holds at most 30 s; the client gives up
/// at 30 s).
const FOLLOW_WAIT_S: u64 = 25;

#[derive(Args)]
pub struct WebhooksArgs {
    /// The server, e.g. https://switchyard.example.com.
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Token (default: SWITCHYARD_TOKEN, then what `switchyard login` kept for --server, then
    /// <config dir>/token).
    #[arg(long, global = true, env = "SWITCHYARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the server's JSON answer instead of a table or summary.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: WebhooksCommand,
}

#[derive(Subcommand)]
pub enum WebhooksCommand {
    /// Create a webhook; prints it and its signing secret (whsec_…), which receivers verify with.
    Create {
        #[arg(long)]
        url: String,
        /// What to watch, TYPE:NAME with TYPE user, org or model (e.g. user:alice, model:acme/tiny);
        /// repeat for several.
        #[arg(long = "watch", value_name = "TYPE:NAME", required = true)]
        watch: Vec<String>,
        /// repo, endpoint or discussion; repeat for several (default: repo).
        #[arg(long = "domain", value_name = "DOMAIN")]
        domains: Vec<String>,
        /// Sent as the X-Webhook-Secret header of every delivery.
        #[arg(long)]
        secret: Option<String>,
        /// The organization that owns it (default: you).
        #[arg(long, value_name = "ORG")]
        owner: Option<String>,
    },
    /// List your webhooks and those of the organizations you administer.
    List,
    /// Show one webhook.
    Get { id: String },
    /// Change a webhook: what is given replaces what it had (`--secret ""` removes the secret).
    Update {
        id: String,
        #[arg(long)]
        url: Option<String>,
        #[arg(long = "watch", value_name = "TYPE:NAME")]
        watch: Vec<String>,
        #[arg(long = "domain", value_name = "DOMAIN")]
        domains: Vec<String>,
        #[arg(long)]
        secret: Option<String>,
    },
    /// Send deliveries again.
    Enable { id: String },
    /// Stop sending; pending deliveries are cancelled (`replay --failed-since` brings them back).
    Disable { id: String },
    /// Delete a webhook with its deliveries.
    Delete {
        id: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// The delivery attempts, oldest first.
    Deliveries {
        id: String,
        /// The last N attempts (default 100, at most 500).
        #[arg(long, value_name = "N")]
        limit: Option<i64>,
        /// Keep printing new attempts as they come, until Ctrl-C.
        #[arg(long)]
        follow: bool,
    },
    /// Send one delivery again, or every failed one since a time.
    Replay {
        id: String,
        #[arg(
            required_unless_present = "failed_since",
            conflicts_with = "failed_since"
        )]
        delivery_id: Option<String>,
        /// An RFC 3339 time (2024-05-01T12:00:00Z) or a duration back from now (90m, 2h, 1d).
        #[arg(long, value_name = "RFC3339|DURATION")]
        failed_since: Option<String>,
    },
    /// Make a new signing secret (printed); the previous ones keep signing during the grace period.
    RotateSecret {
        id: String,
        /// How long the previous secrets keep signing (default 86400, at most 604800).
        #[arg(long, value_name = "SECONDS")]
        grace: Option<i64>,
    },
    /// Print the current signing secret.
    SigningSecret { id: String },
}

/// The server's refusal as a person reads it: its message and, for a bad body, each issue.
fn api_error(e: ClientError) -> anyhow::Error {
    match e {
        // Kept whole: the caller says how to sign in (see `sign_in_hint` in main).
        e @ ClientError::Api {
            status: reqwest::StatusCode::UNAUTHORIZED,
            ..
        } => anyhow::Error::new(e),
        ClientError::Api { message, body, .. } => {
            let mut text = message;
            for issue in body
                .get("issues")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let path = issue.get("path").and_then(Value::as_str).unwrap_or("");
                let msg = issue.get("message").and_then(Value::as_str).unwrap_or("");
                text.push_str(&format!("\n  {path}: {msg}"));
            }
            anyhow!(text)
        }
        other => anyhow!(other),
    }
}

/// `TYPE:NAME` as the API's watched item.
fn watched(items: &[String]) -> Result<Vec<Value>> {
    items
        .iter()
        .map(|item| match item.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                Ok(json!({"type": kind, "name": name}))
            }
            _ => bail!("--watch {item:?}: write TYPE:NAME, e.g. user:alice or model:acme/tiny"),
        })
        .collect()
}

/// `--failed-since`: an RFC 3339 time, or a duration back from `now`.
fn since(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let back = switchyard_server::services::accounts::parse_duration(text)
        .map_err(|e| anyhow!("--failed-since: {e}, or an RFC 3339 time"))?;
    Ok(now - back)
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `3m ago`, to the largest whole unit.
fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - t).num_seconds().max(0);
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

fn watched_text(w: &WebhookOut) -> String {
    w.watched
        .iter()
        .map(|w| format!("{}:{}", w.kind.as_str(), w.name))
        .collect::<Vec<_>>()
        .join(",")
}

fn domains_text(w: &WebhookOut) -> String {
    w.domains
        .iter()
        .map(|d| d.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The last attempt in a word or three: `ok 200 (2m ago)`, `failed 503 (…)`, `failed connect (…)`.
fn last_result(w: &WebhookOut, now: DateTime<Utc>) -> String {
    let Some(a) = &w.last_attempt else {
        return "-".into();
    };
    let what = match (a.ok, a.status_code, a.error_class.as_deref()) {
        (true, Some(code), _) => format!("ok {code}"),
        (true, None, _) => "ok".into(),
        (false, Some(code), _) => format!("failed {code}"),
        (false, None, Some(class)) => format!("failed {class}"),
        (false, None, None) => "failed".into(),
    };
    format!("{what} ({})", ago(a.at, now))
}

fn webhook_table(hooks: &[WebhookOut], now: DateTime<Utc>) -> String {
    let rows: Vec<Vec<String>> = hooks
        .iter()
        .map(|w| {
            vec![
                w.id.clone(),
                w.url.clone(),
                watched_text(w),
                domains_text(w),
                if w.disabled { "no" } else { "yes" }.to_string(),
                last_result(w, now),
            ]
        })
        .collect();
    table(
        &["ID", "URL", "WATCHED", "DOMAINS", "ENABLED", "LAST RESULT"],
        &rows,
    )
}

/// One webhook, a field a line. The shared secret is not shown (`--json` shows it).
fn describe(w: &WebhookOut, now: DateTime<Utc>) -> String {
    let enabled = match (&w.disabled, &w.disabled_reason) {
        (false, _) => "yes".to_string(),
        (true, Some(reason)) => format!("no ({reason})"),
        (true, None) => "no".to_string(),
    };
    let fields = [
        ("id", w.id.clone()),
        ("url", w.url.clone()),
        ("owner", w.owner.clone()),
        ("watched", watched_text(w)),
        ("domains", domains_text(w)),
        (
            "secret",
            if w.secret.is_some() { "set" } else { "none" }.into(),
        ),
        ("enabled", enabled),
        ("last result", last_result(w, now)),
        ("created", rfc3339(w.created_at)),
        ("updated", rfc3339(w.updated_at)),
    ];
    fields
        .iter()
        .map(|(k, v)| format!("{:<12} {v}\n", format!("{k}:")))
        .collect()
}

const DELIVERY_HEADER: [&str; 8] = [
    "TIME",
    "EVENT",
    "ATTEMPT",
    "STATUS",
    "DURATION",
    "ERROR CLASS",
    "NEXT",
    "DELIVERY",
];
/// Fixed widths, so rows that `--follow` prints later line up under the header.
const DELIVERY_WIDTHS: [usize; 8] = [20, 24, 7, 6, 8, 11, 20, 0];

fn delivery_row(a: &AttemptOut) -> Vec<String> {
    let part = |k: &str| a.event.get(k).and_then(Value::as_str).unwrap_or("?");
    let attempt = match a.manual {
        true => format!("{} replay", a.attempt),
        false => a.attempt.to_string(),
    };
    vec![
        rfc3339(a.at),
        format!("{}/{}", part("scope"), part("action")),
        attempt,
        a.status_code.map_or("-".into(), |c| c.to_string()),
        format!("{}ms", a.duration_ms),
        a.error_class.clone().unwrap_or_else(|| "-".into()),
        a.next_attempt_at.map_or("-".into(), rfc3339),
        a.delivery_id.clone(),
    ]
}

fn fixed_line(cells: &[String]) -> String {
    line(cells, &DELIVERY_WIDTHS)
}

fn print_attempts(attempts: &[AttemptOut]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // The server answers newest first; a log reads oldest first.
    for a in attempts.iter().rev() {
        writeln!(out, "{}", fixed_line(&delivery_row(a)))?;
    }
    out.flush()?;
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T> {
    serde_json::from_value(v).context("unexpected answer from the server")
}

fn print_json(v: &Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Asks on the terminal; anything but y/yes is no.
fn confirm(question: &str) -> Result<bool> {
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// Runs one command against `client`; `json` prints the server's answers as they came.
pub async fn run(client: &Client, json: bool, command: WebhooksCommand) -> Result<()> {
    let now = Utc::now();
    match command {
        WebhooksCommand::Create {
            url,
            watch,
            domains,
            secret,
            owner,
        } => {
            let mut body = json!({"url": url, "watched": watched(&watch)?});
            set(
                &mut body,
                "domains",
                (!domains.is_empty()).then(|| json!(domains)),
            );
            set(&mut body, "secret", secret.map(|s| json!(s)));
            set(&mut body, "owner", owner.map(|o| json!(o)));
            create(client, &body, json, now).await
        }
        WebhooksCommand::List => list(client, json, now).await,
        WebhooksCommand::Get { id } => {
            let one: Value = client.webhook(&id).await.map_err(api_error)?;
            show(one, json, now)
        }
        WebhooksCommand::Update {
            id,
            url,
            watch,
            domains,
            secret,
        } => {
            let mut body = json!({});
            set(&mut body, "url", url.map(|u| json!(u)));
            if !watch.is_empty() {
                body["watched"] = json!(watched(&watch)?);
            }
            set(
                &mut body,
                "domains",
                (!domains.is_empty()).then(|| json!(domains)),
            );
            set(&mut body, "secret", secret.map(|s| json!(s)));
            if body.as_object().is_some_and(|o| o.is_empty()) {
                bail!("nothing to change: give --url, --watch, --domain or --secret");
            }
            let one: Value = client.update_webhook(&id, &body).await.map_err(api_error)?;
            show(one, json, now)
        }
        WebhooksCommand::Enable { id } => switch(client, &id, true, json).await,
        WebhooksCommand::Disable { id } => switch(client, &id, false, json).await,
        WebhooksCommand::Delete { id, yes } => delete(client, &id, yes, json).await,
        WebhooksCommand::Deliveries { id, limit, follow } => {
            deliveries(client, &id, limit, follow, json).await
        }
        WebhooksCommand::Replay {
            id,
            delivery_id,
            failed_since,
        } => replay(client, &id, delivery_id, failed_since, json, now).await,
        WebhooksCommand::RotateSecret { id, grace } => rotate(client, &id, grace, json).await,
        WebhooksCommand::SigningSecret { id } => {
            let out: Value = client
                .webhook_signing_secret(&id)
                .await
                .map_err(api_error)?;
            if json {
                return print_json(&out);
            }
            println!("{}", out["signingSecret"].as_str().unwrap_or_default());
            Ok(())
        }
    }
}

/// `body[key] = value` when there is a value.
fn set(body: &mut Value, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        body[key] = v;
    }
}

async fn create(client: &Client, body: &Value, json: bool, now: DateTime<Utc>) -> Result<()> {
    let created: Value = client.create_webhook(body).await.map_err(api_error)?;
    if json {
        return print_json(&created);
    }
    let webhook: WebhookOut = decode(created["webhook"].clone())?;
    let signing = created["signingSecret"].as_str().unwrap_or_default();
    print!("{}", describe(&webhook, now));
    println!();
    println!("signing secret: {signing}");
    println!(
        "Keep it: receivers verify each delivery's webhook-signature with it (Standard Webhooks). \
         It is shown here once; `switchyard webhooks signing-secret {}` reads it again.",
        webhook.id
    );
    Ok(())
}

async fn list(client: &Client, json: bool, now: DateTime<Utc>) -> Result<()> {
    let hooks: Value = client.webhooks().await.map_err(api_error)?;
    if json {
        return print_json(&hooks);
    }
    let hooks: Vec<WebhookOut> = decode(hooks)?;
    if hooks.is_empty() {
        println!("no webhooks");
    } else {
        print!("{}", webhook_table(&hooks, now));
    }
    Ok(())
}

async fn delete(client: &Client, id: &str, yes: bool, json: bool) -> Result<()> {
    if !yes
        && std::io::stdin().is_terminal()
        && !confirm(&format!("Delete webhook {id} and its deliveries?"))?
    {
        bail!("not deleted");
    }
    client.delete_webhook(id).await.map_err(api_error)?;
    if json {
        return print_json(&json!({}));
    }
    println!("deleted webhook {id}");
    Ok(())
}

async fn replay(
    client: &Client,
    id: &str,
    delivery_id: Option<String>,
    failed_since: Option<String>,
    json: bool,
    now: DateTime<Utc>,
) -> Result<()> {
    let (out, said): (Value, String) = match (delivery_id, failed_since) {
        (Some(delivery), _) => {
            let out: Value = client
                .replay_delivery(id, &delivery)
                .await
                .map_err(api_error)?;
            let new = out["deliveryId"].as_str().unwrap_or("?").to_string();
            (out, format!("replaying delivery {delivery} as {new}"))
        }
        (None, Some(text)) => {
            let t = rfc3339(since(&text, now)?);
            let out: Value = client.replay_failed(id, &t).await.map_err(api_error)?;
            let n = out["replayed"].as_u64().unwrap_or(0);
            (
                out,
                format!("replaying {n} failed or cancelled deliveries since {t}"),
            )
        }
        (None, None) => bail!("give a DELIVERY_ID or --failed-since"),
    };
    if json {
        return print_json(&out);
    }
    println!("{said}");
    Ok(())
}

async fn rotate(client: &Client, id: &str, grace: Option<i64>, json: bool) -> Result<()> {
    let out: Value = client
        .rotate_webhook_secret(id, grace)
        .await
        .map_err(api_error)?;
    if json {
        return print_json(&out);
    }
    let secret = out["signingSecret"].as_str().unwrap_or_default();
    println!("signing secret: {secret}");
    println!(
        "The previous secrets keep signing for {}s: give receivers the new one before then.",
        grace.unwrap_or(86_400)
    );
    Ok(())
}

/// A webhook answer (`{"webhook": …}`) as asked.
fn show(one: Value, json: bool, now: DateTime<Utc>) -> Result<()> {
    if json {
        return print_json(&one);
    }
    let webhook: WebhookOut = decode(one["webhook"].clone())?;
    print!("{}", describe(&webhook, now));
    Ok(())
}

async fn switch(client: &Client, id: &str, enable: bool, json: bool) -> Result<()> {
    let one: Value = client
        .set_webhook_enabled(id, enable)
        .await
        .map_err(api_error)?;
    if json {
        return print_json(&one);
    }
    match enable {
        true => println!("enabled webhook {id}"),
        false => println!("disabled webhook {id}; its pending deliveries are cancelled"),
    }
    Ok(())
}

/// The last `limit` attempts, then (with `follow`) each new one as it comes: long polls `after` the
/// newest seq seen, until Ctrl-C. With `json`, one attempt per line (JSON Lines).
async fn deliveries(
    client: &Client,
    id: &str,
    limit: Option<i64>,
    follow: bool,
    json: bool,
) -> Result<()> {
    let page: Value = client
        .webhook_deliveries(id, None, limit, None)
        .await
        .map_err(api_error)?;
    let emit = |page: &Value| -> Result<Option<i64>> {
        let attempts: Vec<AttemptOut> = decode(page.clone())?;
        if json {
            let mut out = std::io::stdout().lock();
            for a in page.as_array().into_iter().flatten().rev() {
                writeln!(out, "{a}")?;
            }
            out.flush()?;
        } else {
            print_attempts(&attempts)?;
        }
        Ok(attempts.iter().map(|a| a.seq).max())
    };
    if !json {
        println!("{}", fixed_line(&DELIVERY_HEADER.map(String::from)));
    }
    let mut last = emit(&page)?.unwrap_or(0);
    if !follow {
        return Ok(());
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let poll =
            client.webhook_deliveries::<Value>(id, Some(last), Some(500), Some(FOLLOW_WAIT_S));
        let page = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            page = poll => page,
        };
        match page {
            Ok(page) => {
                if let Some(seq) = emit(&page)? {
                    last = last.max(seq);
                }
            }
            // A server restarting or a network blip: say so once and keep trying.
            Err(ClientError::Transport(e)) => {
                eprintln!("warning: {e}; retrying");
                tokio::select! {
                    _ = &mut ctrl_c => return Ok(()),
                    _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                }
            }
            Err(e) => return Err(api_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_items_and_since_parse() {
        assert_eq!(
            watched(&["user:alice".into(), "model:acme/tiny".into()]).unwrap(),
            vec![
                json!({"type": "user", "name": "alice"}),
                json!({"type": "model", "name": "acme/tiny"})
            ]
        );
        assert!(watched(&["alice".into()]).is_err());
        assert!(watched(&[":alice".into()]).is_err());
        let now = DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(rfc3339(since("2h", now).unwrap()), "2024-05-01T10:00:00Z");
        assert_eq!(
            rfc3339(since("2024-04-30T01:02:03+02:00", now).unwrap()),
            "2024-04-29T23:02:03Z"
        );
        assert!(since("yesterday", now).is_err());
    }

    #[test]
    fn tables_line_up() {
        let t = table(
            &["ID", "URL"],
            &[
                vec!["a".into(), "http://x".into()],
                vec!["long-id".into(), "u".into()],
            ],
        );
        assert_eq!(t, "ID       URL\na        http://x\nlong-id  u\n");
        let now = Utc::now();
        assert_eq!(ago(now - chrono::Duration::seconds(150), now), "2m ago");
    }
}
