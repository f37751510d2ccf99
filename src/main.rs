//! `switchyard`: the command line. Parses arguments, loads the config, and runs the server or an
//! administration command against the store.

mod admin;
mod admin_oauth;
mod engines;
mod login;
mod logs;
mod receive;
mod table;
mod webhooks;

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use switchyard_server::config::resolve_typed_path;
use switchyard_server::{Application, Config};

use crate::logs::{LogSink, Stream};

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "Control plane for model-serving endpoints"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    console: ConsoleArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

/// With no command: the operator console, on an in-process server or on `--server`.
#[derive(Args, Clone, Default)]
struct ConsoleArgs {
    /// Open the console on this remote server instead of an in-process one.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Token for --server (default: SWITCHYARD_TOKEN, then <config dir>/token).
    #[arg(long, env = "SWITCHYARD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// No action that changes anything.
    #[arg(long)]
    read_only: bool,
    /// Address of the in-process server (as for `serve`).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Mouse support: the wheel scrolls, a click selects (hold shift to select text in the terminal).
    #[arg(long)]
    mouse: bool,
}

#[derive(Args, Clone, Default)]
struct Common {
    /// Config file (TOML). Default: the platform config dir's config.toml, when it exists.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory: database, secrets key, first admin token.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

impl Common {
    /// The paths as typed, `~` expanded and made absolute against the working directory.
    fn resolved(&self) -> Result<Common> {
        Ok(Common {
            config: typed_path("--config", self.config.as_ref())?,
            data_dir: typed_path("--data-dir", self.data_dir.as_ref())?,
        })
    }
}

fn typed_path(flag: &str, path: Option<&PathBuf>) -> Result<Option<PathBuf>> {
    path.map(|p| resolve_typed_path(p).map_err(|e| anyhow!("{flag}: {e}")))
        .transpose()
}

#[derive(Subcommand)]
enum Command {
    /// Run the server headless: public API; logs to stdout.
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:8080 or 0.0.0.0:8080 (127.0.0.1:0 picks a free port).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// Manage users, organizations, tokens and the catalog directly in the store.
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    /// Sign in to a remote server by device code (prints a code and where to enter it) and keep the
    /// token for it (credentials.json beside the config file, mode 0600); the console then uses it for
    /// `--server URL`.
    Login {
        #[arg(long, value_name = "URL")]
        server: String,
        /// The scopes to ask for, space-separated.
        #[arg(long, default_value = login::DEFAULT_SCOPES)]
        scopes: String,
    },
    /// Revoke and forget the token `switchyard login` kept for a server.
    Logout {
        #[arg(long, value_name = "URL")]
        server: String,
    },
    /// Validate a config file.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Receive webhooks: POST /webhooks/NAME runs a command or appends to a file, behind a shared
    /// secret and/or Standard Webhooks signatures; prints `listening on http://ADDR` when ready.
    Receive(receive::ReceiveArgs),
    /// Manage a server's webhooks over HTTP (--server URL; token from --token, SWITCHYARD_TOKEN, what
    /// `switchyard login` kept for that server, or <config dir>/token).
    Webhooks(webhooks::WebhooksArgs),
    /// The engines this server can run: list them, install or remove a built-in one (in the data dir).
    Engines {
        #[command(subcommand)]
        command: engines::EnginesCommand,
    },
    /// Print the OpenAPI document of the public API.
    Openapi,
    /// Print the console's keymap as a cheat-sheet (Markdown).
    Keys,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Run start-up's checks on a config file (and the environment), binding and writing nothing, and
    /// print the effective settings.
    Check {
        /// The file to check; default: --config or the platform config file.
        file: Option<PathBuf>,
    },
}

/// File, then environment, then flags.
fn load_config(common: &Common, file: Option<&PathBuf>) -> Result<Config> {
    let path = file.or(common.config.as_ref());
    let mut config = Config::load_file(path.map(PathBuf::as_path))?;
    config.apply_env(std::env::vars())?;
    if let Some(d) = &common.data_dir {
        config.store.data_dir = Some(d.clone());
    }
    Ok(config)
}

/// Logs to `stream`, through a sink that a closed reader cannot turn into a failure; returns the sink.
fn init_logs(level: &str, stream: Stream) -> LogSink {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a terminal: piped or redirected logs stay plain text.
    let colour = match stream {
        Stream::Stderr => std::io::stderr().is_terminal(),
        Stream::Stdout => std::io::stdout().is_terminal(),
    };
    let sink = LogSink::new(stream);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colour)
        .with_writer(sink.clone())
        .init();
    sink
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}

/// What the server makes is its user's alone, as the data dir's checks want (the store's files, the
/// console's daily logs and the pid files are made as the umask says). Replica and engine dirs set their
/// own modes.
fn private_files() {
    // SAFETY: umask has no preconditions.
    unsafe {
        libc::umask(0o077);
    }
}

async fn serve(common: &Common, listen: Option<SocketAddr>) -> Result<()> {
    private_files();
    let mut config = load_config(common, None)?;
    if let Some(l) = listen {
        config.server.listen = l;
    }
    let sink = init_logs(&config.log.level, Stream::Stdout);
    let app = Application::build(&config).await?;
    let addr = app.local_addr();
    tracing::info!(data_dir = %app.data_dir().display(), "store ready");
    if let Some(private) = app.private_addr() {
        tracing::info!(%private, "private entry point listening (proxy.private_listen)");
    }
    // Scripts and tests wait for this exact line.
    logs::announce(&sink, &format!("switchyard listening on http://{addr}"));
    app.run(shutdown_signal()).await.context("serving")?;
    Ok(())
}

/// A file of the user's beside the config file in use (`--config`, else the platform config dir's).
fn user_file(common: &Common, name: &str) -> Option<String> {
    let config = match &common.config {
        Some(c) => c.clone(),
        None => switchyard_server::config::default_config_file()?,
    };
    std::fs::read_to_string(config.with_file_name(name)).ok()
}

/// The token for a remote server: the flag or environment, then what `switchyard login` kept for
/// that server, then the config dir's `token` file.
async fn remote_token(common: &Common, url: &str, flag: Option<String>) -> Result<Option<String>> {
    if flag.is_some() {
        return Ok(flag);
    }
    let path = login::credentials_file(common.config.as_ref())?;
    let signed_in = login::refreshed(&path, url).await?.map(|s| s.access_token);
    Ok(signed_in.or_else(|| user_file(common, "token").map(|t| t.trim().to_string())))
}

/// The operator console: an in-process server (the same config and flags as `serve`) or `--server URL`.
async fn console(common: &Common, args: &ConsoleArgs) -> Result<()> {
    let mut config = load_config(common, None)?;
    if let Some(l) = args.listen {
        config.server.listen = l;
    }
    private_files();
    // The console owns the terminal: logs go to a daily file.
    let log_dir = config.data_dir()?.join("logs");
    std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(tracing_appender::rolling::daily(&log_dir, "console.log"))
        .init();
    let log_file = log_dir.join("console.log.<date>").display().to_string();
    let keymap_text = user_file(common, "keymap.toml");
    if let Some(url) = &args.server {
        let remote_token = remote_token(common, url, args.token.clone()).await?;
        let options = switchyard_ui::Options {
            client: switchyard_server::client::Client::new(url, remote_token.clone()),
            server_label: url.clone(),
            read_only: args.read_only,
            log_file,
            keymap_text,
            remote_token: remote_token.map(|t| (url.clone(), t)),
            mouse: args.mouse,
            server_stopped: None,
        };
        return switchyard_ui::run(options).await.context("console");
    }
    // A developer's machine often has the configured port taken: the console takes a free one instead
    // (unless --listen asked for that address), and says so in the status line.
    let taken =
        args.listen.is_none() && switchyard_server::app::address_taken(config.server.listen);
    let wanted = config.server.listen;
    if taken {
        config.server.listen.set_port(0);
        tracing::warn!(%wanted, "the configured address is taken; the in-process server takes a free port");
    }
    let app = Application::build(&config).await?;
    let url = format!("http://{}", app.local_addr());
    let server_label = match taken {
        true => format!("in-process {url} ({wanted} was taken)"),
        false => format!("in-process {url}"),
    };
    let token = match std::fs::read_to_string(app.data_dir().join("admin-token")) {
        Ok(t) => t.trim().to_string(),
        // The first start's token file was removed: a console session gets a token of its own.
        Err(_) => {
            let state = app.state();
            let (token, _) = switchyard_server::services::accounts::issue_token(
                state.store.as_ref(),
                "admin",
                Some("console".into()),
                None,
                Some(chrono::Duration::days(1)),
                state.clock.now(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("signing the console in as admin: {e}"))?;
            token
        }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // A server that stops on its own says why, in the console.
    let (failed, server_stopped) = tokio::sync::oneshot::channel::<String>();
    let server = tokio::spawn(async move {
        let result = app
            .run(async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = &result {
            tracing::error!(error = %e, "the in-process server stopped");
            let _ = failed.send(e.to_string());
        }
        result
    });
    tracing::info!(%url, "in-process server listening");
    let options = switchyard_ui::Options {
        client: switchyard_server::client::Client::new(&url, Some(token)),
        server_label,
        read_only: args.read_only,
        log_file,
        keymap_text,
        remote_token: None,
        mouse: args.mouse,
        server_stopped: Some(server_stopped),
    };
    let result = switchyard_ui::run(options).await.context("console");
    let _ = stop.send(());
    // Replicas stop with the server.
    let _ = server.await;
    result
}

/// A refused credential (401) says how to get one that the server takes.
fn sign_in_hint(e: anyhow::Error, server: &str) -> anyhow::Error {
    let refused = e
        .chain()
        .filter_map(|c| c.downcast_ref::<switchyard_server::client::ClientError>())
        .any(|c| c.status() == Some(reqwest::StatusCode::UNAUTHORIZED));
    match refused {
        true => e.context(format!(
            "the server wants a token: sign in with `switchyard login --server {server}`, or give \
             --token or SWITCHYARD_TOKEN"
        )),
        false => e,
    }
}

/// Whether `e` is a write to a reader that went away (`switchyard … | head`).
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// A command that only prints ends quietly, as other programs do, once its reader is gone: the default
/// SIGPIPE action. The server and the console keep Rust's (ignored): `serve | head` goes on serving.
fn die_on_closed_pipe(command: &Option<Command>) {
    let long_running = matches!(
        command,
        None | Some(Command::Serve { .. }) | Some(Command::Receive(_))
    );
    if !long_running {
        // SAFETY: setting a signal's disposition to the default has no preconditions.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    die_on_closed_pipe(&cli.command);
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if closed_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain, one line, for a person; no backtrace (and no panic on a closed stderr).
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            if engines::registry_unreachable(&e) {
                return std::process::ExitCode::from(engines::REGISTRY_UNREACHABLE);
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(mut cli: Cli) -> Result<()> {
    cli.common = cli.common.resolved()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Some(Command::Serve { listen }) => rt.block_on(serve(&cli.common, listen)),
        Some(Command::Admin { command }) => {
            private_files();
            let config = load_config(&cli.common, None)?;
            init_logs("warn", Stream::Stderr);
            rt.block_on(admin::run(&config, command))
        }
        Some(Command::Config {
            command: ConfigCommand::Check { file },
        }) => {
            let file = typed_path("the config file", file.as_ref())?;
            let config = load_config(&cli.common, file.as_ref())?;
            // Exactly what start-up checks, short of binding, connecting and writing.
            switchyard_server::app::check(&config)?;
            if let Some(p) = file.as_ref().or(cli.common.config.as_ref()) {
                println!("# {} is valid", p.display());
            }
            print!("{}", config.to_redacted_toml());
            Ok(())
        }
        Some(Command::Login { server, scopes }) => {
            let path = login::credentials_file(cli.common.config.as_ref())?;
            rt.block_on(login::login(&path, &server, &scopes))
        }
        Some(Command::Logout { server }) => {
            let path = login::credentials_file(cli.common.config.as_ref())?;
            rt.block_on(login::logout(&path, &server))
        }
        Some(Command::Receive(args)) => rt.block_on(receive::run(args)),
        Some(Command::Webhooks(args)) => {
            // `switchyard --server URL webhooks …` works too.
            let server = args
                .server
                .or(cli.console.server)
                .ok_or_else(|| anyhow!("which server? give --server URL"))?;
            rt.block_on(async {
                let flag = args.token.or(cli.console.token);
                let token = remote_token(&cli.common, &server, flag).await?;
                let client = switchyard_server::client::Client::new(&server, token);
                let done = webhooks::run(&client, args.json, args.command).await;
                done.map_err(|e| sign_in_hint(e, &server))
            })
        }
        Some(Command::Engines { command }) => {
            let config = load_config(&cli.common, None)?;
            init_logs("warn", Stream::Stderr);
            engines::run(&config, command)
        }
        Some(Command::Openapi) => {
            println!("{}", switchyard_server::api::openapi::document_json());
            Ok(())
        }
        Some(Command::Keys) => {
            let text = user_file(&cli.common, "keymap.toml");
            let (keymap, problems) = switchyard_ui::keymap::Keymap::with_overrides(text.as_deref());
            for p in problems {
                eprintln!("warning: {p}");
            }
            print!("{}", keymap.cheat_sheet());
            Ok(())
        }
        None => rt.block_on(console(&cli.common, &cli.console)),
    }
}
