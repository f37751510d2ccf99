//! `switchyard receive`: a webhook receiving server whose handlers are shell commands or files.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use switchyard_server::signing::SigningKey;
use switchyard_server::webhooks::receive::{Action, Receiver, DEFAULT_MAX_BODY};

use crate::logs::{self, Stream};

#[derive(Args)]
pub struct ReceiveArgs {
    /// Address to listen on, e.g. 127.0.0.1:8000 or 0.0.0.0:8000 (127.0.0.1:0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// Shared secret every request must carry in `X-Webhook-Secret`.
    #[arg(long, env = "WEBHOOK_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// Standard Webhooks signing secret (`whsec_…`): requests must be signed with it. Repeat it (or
    /// separate them with commas) to accept both secrets during a rotation.
    #[arg(
        long,
        env = "WEBHOOK_SIGNING_SECRET",
        hide_env_values = true,
        value_name = "WHSEC",
        value_delimiter = ','
    )]
    signing_secret: Vec<String>,
    /// Largest body accepted; larger ones get 413.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY)]
    max_body: usize,
    /// HTML file served at `/` instead of the generated instructions.
    #[arg(long, value_name = "FILE")]
    page: Option<PathBuf>,
    /// How long a `run:` command may take before it is killed (answer 504).
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    run_timeout: u64,
    /// A route and what it does: NAME=run:COMMAND (payload on stdin, a JSON object on stdout is the
    /// answer) or NAME=append:FILE (one JSON line per payload). NAME is a name or a path such as
    /// `/say_hello`; the route is POST /webhooks/NAME. Repeatable.
    #[arg(long = "handler", value_name = "NAME=ACTION", required = true)]
    handlers: Vec<String>,
}

pub async fn run(args: ReceiveArgs) -> Result<()> {
    let sink = crate::init_logs("info", Stream::Stdout);
    let signing_keys = args
        .signing_secret
        .iter()
        .map(|s| SigningKey::parse(s.trim()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("--signing-secret: {e}"))?;
    let page = args
        .page
        .as_ref()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .transpose()?;
    let mut builder = Receiver::builder()
        .secret(args.secret)
        .max_body(args.max_body)
        .landing_page(page)
        .run_timeout(Duration::from_secs(args.run_timeout));
    for key in signing_keys {
        builder = builder.signing_secret(Some(key));
    }
    for spec in &args.handlers {
        let Some((name, action)) = spec.split_once('=') else {
            bail!("--handler {spec:?}: expected NAME=run:COMMAND or NAME=append:FILE");
        };
        let action: Action = action
            .parse()
            .map_err(|e| anyhow!("--handler {spec:?}: {e}"))?;
        builder = builder.handler(name, action);
    }
    let receiver = builder.build().map_err(|e| anyhow!("--handler: {e}"))?;
    if receiver.is_open() {
        eprintln!(
            "warning: no secret (--secret, WEBHOOK_SECRET) and no signing secret: the webhook routes are open to everyone"
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    for (path, action) in receiver.routes() {
        tracing::info!(route = %path, %action, "handler");
    }
    // Scripts and tests wait for this exact line.
    logs::announce(&sink, &format!("listening on http://{addr}"));
    receiver
        .serve(listener, crate::shutdown_signal())
        .await
        .context("serving")
}
