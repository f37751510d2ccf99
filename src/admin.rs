//! `switchyard admin …`: account and catalog administration straight on the store, with or without a
//! server running on the same data dir.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use switchyard_server::clock::SystemClock;
use switchyard_server::model::account::{AccountKind, Role, Scope};
use switchyard_server::model::catalog::CatalogEntry;
use switchyard_server::services::{
    accounts, catalog, domains, quotas, Context as ServiceContext, Error as ServiceError,
};
use switchyard_server::store::copy::copy_store;
use switchyard_server::store::{SqlStore, Store, StoreUrl, Synchronous};
use switchyard_server::{Config, Services};

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Organizations and their members.
    Org {
        #[command(subcommand)]
        command: OrgCommand,
    },
    /// Access tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Catalog items. A running server picks changes up on restart or `POST /api/v1/admin/catalog/reload`.
    Catalog {
        #[command(subcommand)]
        command: CatalogCommand,
    },
    /// Per-namespace quotas (defaults in the config's [quotas]).
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// Custom domains: which namespace's endpoints may route under each.
    Domain {
        #[command(subcommand)]
        command: DomainCommand,
    },
    /// OAuth apps (the provider's clients).
    App {
        #[command(subcommand)]
        command: crate::admin_oauth::AppCommand,
    },
    /// The OAuth provider's ID-token signing keys.
    Key {
        #[command(subcommand)]
        command: crate::admin_oauth::KeyCommand,
    },
    /// The servers on this store (seen in the last day): where each listens, its version, when it started
    /// and last answered, and which one leads.
    Servers,
    /// The store as a whole: copy it to another backend.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Take a consistent online backup of the SQLite store into FILE (a new file), while a server
    /// may be running on it. For PostgreSQL, use pg_dump.
    Backup { file: PathBuf },
}

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Copy a whole store into an empty one (SQLite ⇄ PostgreSQL), checking each table's row count.
    /// URLs: postgres://user:password@host/db, sqlite://PATH or a file path. The target's schema is
    /// created; a target that holds any row is refused. Stop servers writing to the source first.
    Copy {
        #[arg(long, value_name = "URL")]
        from: String,
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

#[derive(Subcommand)]
pub enum UserCommand {
    /// Create a user.
    Create {
        name: String,
        #[arg(long)]
        email: Option<String>,
        /// Make the user an instance administrator.
        #[arg(long)]
        admin: bool,
        /// Give the user a password, read from the first line of stdin (8 characters to 1024 bytes).
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set a user's password, read from the first line of stdin (8 characters to 1024 bytes). Its
    /// tokens are unaffected.
    SetPassword {
        name: String,
        /// Read the password from the first line of stdin (the only way to give it).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// List users.
    List,
    /// Delete a user with its endpoints (their replicas stop), tokens and memberships.
    Delete { name: String },
    /// Refuse every token of a user from now on; its endpoints go on serving.
    Disable { name: String },
    /// Let a disabled user sign in again (its tokens work again).
    Enable { name: String },
}

#[derive(Subcommand)]
pub enum OrgCommand {
    /// Create an organization.
    Create { name: String },
    /// List organizations.
    List,
    /// Add a user to an organization, or change their role.
    AddMember {
        org: String,
        user: String,
        /// admin, write, contributor or read.
        #[arg(long)]
        role: String,
    },
    /// List an organization's members.
    Members { org: String },
    /// Remove a user from an organization (their access through it ends at once).
    RemoveMember { org: String, user: String },
    /// Delete an organization with its endpoints (their replicas stop) and memberships.
    Delete { name: String },
    /// How long tokens from the organization's token exchange live: a duration up to 30d (e.g. 8h,
    /// 7d), or "default" (8h).
    ExchangeTtl { org: String, ttl: String },
}

#[derive(Subcommand)]
pub enum QuotaCommand {
    /// A namespace's limits in effect, its own values and what it holds.
    Show { namespace: String },
    /// Set a namespace's own limits (an option left out keeps the server's default).
    Set {
        namespace: String,
        /// Endpoints the namespace may hold.
        #[arg(long)]
        endpoints: Option<u32>,
        /// Replicas its endpoints may run at once (the sum of their maxReplica).
        #[arg(long)]
        replicas: Option<u32>,
    },
}

#[derive(Subcommand)]
pub enum DomainCommand {
    /// Every claimed domain and the namespace it belongs to.
    List,
    /// Give a domain to a namespace (once its owner proved it theirs); refused while another namespace's
    /// endpoints route under it.
    Assign { domain: String, namespace: String },
    /// Let a domain go (the next endpoint to route under it claims it); refused while endpoints route under
    /// it.
    Release { domain: String },
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Issue a token for a user and print it (shown once; only its hash is kept).
    Create {
        user: String,
        /// Restrict the token to a scope (repeatable), e.g. --scope read-endpoints.
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        /// Lifetime, e.g. 12h, 30d, 2w. Default: no expiry.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
        /// A name to recognize the token by.
        #[arg(long)]
        name: Option<String>,
    },
    /// List a user's tokens (never the tokens themselves).
    List { user: String },
    /// Revoke a token by id.
    Revoke { id: String },
}

#[derive(Subcommand)]
pub enum CatalogCommand {
    /// List catalog items with their recipes.
    List,
    /// Add an item, or replace the one with the same repoId, from a JSON file (`-` for stdin).
    Put { file: PathBuf },
    /// Remove an item by repo id (author/model).
    Remove { repo_id: String },
}

/// The password on the first line of stdin, without its line ending. Stdin must be a pipe or a file:
/// typed at a terminal, the password would be shown as it is typed.
fn password_from_stdin() -> Result<String> {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!(
            "--password-stdin reads the password from a pipe or a file, not a terminal: \
             e.g. `switchyard admin … --password-stdin < password-file`"
        );
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let password = line
        .strip_suffix('\n')
        .map_or(line.as_str(), |l| l.strip_suffix('\r').unwrap_or(l));
    if password.is_empty() {
        bail!("no password on stdin");
    }
    switchyard_server::passwords::check_rules(password)?;
    Ok(password.to_owned())
}

fn fmt_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Opens the store at `url` as an operator names it (a SQLite source must already exist).
async fn open_store(url: &str, must_exist: bool) -> Result<SqlStore> {
    let url = StoreUrl::parse(url).map_err(|e| anyhow!(e))?;
    if let (true, StoreUrl::Sqlite(path)) = (must_exist, &url) {
        if !path.exists() {
            bail!("{} does not exist", path.display());
        }
    }
    SqlStore::open(&url, Synchronous::Normal)
        .await
        .with_context(|| format!("opening {}", url.redacted()))
}

/// Runs one `switchyard admin` command.
pub async fn run(config: &Config, command: AdminCommand) -> Result<()> {
    match command {
        // Whole-store commands work on the stores they name, without opening the service.
        AdminCommand::Store {
            command: StoreCommand::Copy { from, to },
        } => copy(&from, &to).await,
        AdminCommand::Backup { file } => backup(config, &file).await,
        AdminCommand::User { command } => user(config, command).await,
        AdminCommand::Org { command } => org(&open(config).await?.state, command).await,
        AdminCommand::Token { command } => token(&open(config).await?.state, command).await,
        AdminCommand::Catalog { command } => {
            catalog_items(&open(config).await?.state, command).await
        }
        AdminCommand::Quota { command } => quota(&open(config).await?.state, command).await,
        AdminCommand::Domain { command } => domain(&open(config).await?.state, command).await,
        AdminCommand::Servers => servers(&open(config).await?.state).await,
        AdminCommand::App { command } => {
            crate::admin_oauth::app(&open(config).await?.state, command).await
        }
        AdminCommand::Key { command } => {
            let keep = id_token_lifetime(config);
            crate::admin_oauth::key(&open(config).await?.state, keep, command).await
        }
    }
}

/// The service on the config's store, as the administrator's commands use it. Says where the token of the
/// first administrator is, if opening it made one.
async fn open(config: &Config) -> Result<Services> {
    let services = Services::open(config, Arc::new(SystemClock)).await?;
    if let Some(p) = &services.admin_token_file {
        eprintln!("created user 'admin'; its token is in {}", p.display());
    }
    Ok(services)
}

/// How long the ID tokens the provider signs live: a rotated-out signing key is kept that long.
fn id_token_lifetime(config: &Config) -> chrono::Duration {
    chrono::Duration::seconds(config.oauth.id_token_ttl_s as i64)
}

/// `switchyard admin store copy`: a whole store into an empty one, each table's count checked.
async fn copy(from: &str, to: &str) -> Result<()> {
    let (source, target) = (open_store(from, true).await?, open_store(to, false).await?);
    let report = copy_store(&source, &target).await?;
    for (table, rows) in &report {
        println!("{table:<16} {rows:>8} rows");
    }
    println!("copied; every table's count matches the source");
    Ok(())
}

/// `switchyard admin backup FILE`: an online backup of the config's SQLite store.
async fn backup(config: &Config, file: &Path) -> Result<()> {
    let url = config.store_url()?;
    let source = open_store(&url.url(), true).await?;
    source.backup(file).await?;
    println!("backed up {} to {}", url.redacted(), file.display());
    Ok(())
}

/// `switchyard admin user …`. A password is read and checked before the store opens, so a missing or
/// refused one leaves nothing behind.
async fn user(config: &Config, command: UserCommand) -> Result<()> {
    let password = match &command {
        UserCommand::Create {
            password_stdin: true,
            ..
        }
        | UserCommand::SetPassword { .. } => Some(password_from_stdin()?),
        _ => None,
    };
    let services = open(config).await?;
    let ctx: &ServiceContext = &services.state;
    let store = ctx.store.as_ref();
    match command {
        UserCommand::Create {
            name, email, admin, ..
        } => {
            let now = chrono::Utc::now();
            let a = accounts::create_account(
                store,
                AccountKind::User,
                &name,
                email,
                admin,
                password.as_deref(),
                now,
            )
            .await?;
            let with = if password.is_some() {
                " with a password"
            } else {
                ""
            };
            println!("created user {} ({}){with}", a.name, a.id);
        }
        UserCommand::SetPassword { name, .. } => {
            let password = password.context("no password")?;
            accounts::set_password(store, &name, &password).await?;
            println!("set the password of {name}");
        }
        UserCommand::Delete { name } => {
            let n = accounts::delete_account(ctx, &name, AccountKind::User).await?;
            println!("deleted user {name} and its {n} endpoint(s); a running server refuses its tokens within proxy.auth_cache_s");
        }
        UserCommand::Disable { name } => {
            accounts::set_disabled(ctx, &name, true).await?;
            println!("disabled {name}: its tokens are refused (by a running server's proxy within proxy.auth_cache_s); its endpoints go on serving");
        }
        UserCommand::Enable { name } => {
            accounts::set_disabled(ctx, &name, false).await?;
            println!("enabled {name}");
        }
        UserCommand::List => list_users(store).await?,
    }
    Ok(())
}

/// `switchyard admin user list`: every user, whether an administrator, and when made or disabled.
async fn list_users(store: &dyn Store) -> Result<()> {
    println!(
        "{:<24} {:<36} {:<6} {:<22} DISABLED",
        "NAME", "EMAIL", "ADMIN", "CREATED"
    );
    for a in accounts::list_accounts(store, AccountKind::User).await? {
        println!(
            "{:<24} {:<36} {:<6} {:<22} {}",
            a.name,
            a.email.as_deref().unwrap_or("-"),
            if a.is_admin { "yes" } else { "no" },
            fmt_time(a.created_at),
            a.disabled_at.map_or("-".to_string(), fmt_time)
        );
    }
    Ok(())
}

/// `switchyard admin org …`.
async fn org(ctx: &ServiceContext, command: OrgCommand) -> Result<()> {
    let store = ctx.store.as_ref();
    match command {
        OrgCommand::Create { name } => {
            let now = chrono::Utc::now();
            let a =
                accounts::create_account(store, AccountKind::Org, &name, None, false, None, now)
                    .await?;
            println!("created organization {} ({})", a.name, a.id);
        }
        OrgCommand::List => {
            println!("{:<24} CREATED", "NAME");
            for a in accounts::list_accounts(store, AccountKind::Org).await? {
                println!("{:<24} {}", a.name, fmt_time(a.created_at));
            }
        }
        OrgCommand::AddMember { org, user, role } => {
            let role = Role::parse(&role).ok_or_else(|| {
                anyhow!("unknown role {role:?}: use admin, write, contributor or read")
            })?;
            let m = accounts::add_member(store, &org, &user, role, chrono::Utc::now()).await?;
            println!("{} is now {} in {}", m.user, m.role.as_str(), m.org);
        }
        OrgCommand::RemoveMember { org, user } => {
            accounts::remove_member(ctx, &org, &user).await?;
            println!("{user} is no longer a member of {org}");
        }
        OrgCommand::Delete { name } => {
            let n = accounts::delete_account(ctx, &name, AccountKind::Org).await?;
            println!("deleted organization {name} and its {n} endpoint(s)");
        }
        OrgCommand::ExchangeTtl { org, ttl } => {
            crate::admin_oauth::exchange_ttl(ctx, &org, &ttl).await?
        }
        OrgCommand::Members { org } => {
            println!("{:<24} ROLE", "USER");
            for m in accounts::list_members(store, &org).await? {
                println!("{:<24} {}", m.user, m.role.as_str());
            }
        }
    }
    Ok(())
}

/// `switchyard admin token …`.
async fn token(ctx: &ServiceContext, command: TokenCommand) -> Result<()> {
    let store = ctx.store.as_ref();
    match command {
        TokenCommand::Create {
            user,
            scopes,
            expires_in,
            name,
        } => {
            let scopes = if scopes.is_empty() {
                None
            } else {
                Some(
                    scopes
                        .iter()
                        .map(|s| Scope::parse(s).ok_or_else(|| anyhow!("unknown scope {s:?}")))
                        .collect::<Result<Vec<_>>>()?,
                )
            };
            let expires = expires_in
                .as_deref()
                .map(accounts::parse_duration)
                .transpose()
                .map_err(|e| anyhow!(e))?;
            let now = chrono::Utc::now();
            let (token, info) =
                accounts::issue_token(store, &user, name, scopes, expires, now).await?;
            eprintln!("token {} for {} (shown once)", info.id, info.user);
            println!("{token}");
        }
        TokenCommand::List { user } => list_tokens(store, &user).await?,
        TokenCommand::Revoke { id } => {
            accounts::revoke_token(ctx, &id).await?;
            println!("revoked {id}");
        }
    }
    Ok(())
}

/// `switchyard admin token list USER`: a user's tokens by id and name, when made and when they expire, their
/// scopes.
async fn list_tokens(store: &dyn Store, user: &str) -> Result<()> {
    println!(
        "{:<26} {:<28} {:<22} {:<22} SCOPES",
        "ID", "NAME", "CREATED", "EXPIRES"
    );
    for t in accounts::list_tokens(store, user).await? {
        let scopes = t.scopes.as_ref().map_or("(all)".to_string(), |s| {
            s.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(",")
        });
        println!(
            "{:<26} {:<28} {:<22} {:<22} {}",
            t.id,
            t.display_name,
            fmt_time(t.created_at),
            t.expires_at.map_or("never".to_string(), fmt_time),
            scopes
        );
    }
    Ok(())
}

/// `switchyard admin catalog …`.
async fn catalog_items(ctx: &ServiceContext, command: CatalogCommand) -> Result<()> {
    match command {
        CatalogCommand::List => {
            let idx = ctx.catalog.get(ctx.store.as_ref()).await?;
            println!("{:<56} {:<26} {:<14} RECIPES", "REPO", "TASK", "LICENSE");
            for e in idx.entries() {
                let recipes: Vec<_> = e.recipes.iter().map(|r| r.public_id.as_str()).collect();
                println!(
                    "{:<56} {:<26} {:<14} {}",
                    e.repo_id,
                    e.task,
                    e.license,
                    recipes.join(" ")
                );
            }
        }
        CatalogCommand::Put { file } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading stdin")?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let entry: CatalogEntry =
                serde_json::from_str(&text).context("parsing the catalog item")?;
            let added = said(catalog::put_item(ctx, &entry).await)?;
            println!(
                "{} {}",
                if added { "added" } else { "replaced" },
                entry.repo_id
            );
        }
        CatalogCommand::Remove { repo_id } => {
            catalog::delete_item(ctx, &repo_id).await?;
            println!("removed {repo_id}");
        }
    }
    Ok(())
}

/// `switchyard admin quota …`: a namespace's limits, shown or set, printed as JSON.
async fn quota(ctx: &ServiceContext, command: QuotaCommand) -> Result<()> {
    let shown = match command {
        QuotaCommand::Show { namespace } => quotas::show(ctx, &namespace).await?,
        QuotaCommand::Set {
            namespace,
            endpoints,
            replicas,
        } => {
            let set = quotas::QuotaOverrideOut {
                endpoints,
                replicas,
            };
            quotas::set(ctx, &namespace, set).await?
        }
    };
    println!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(())
}

/// A service's answer, an invalid input's first issue said as `path: message`.
fn said<T>(r: Result<T, ServiceError>) -> Result<T> {
    match r {
        Err(ServiceError::Invalid(issues)) => match issues.first() {
            Some(i) => Err(anyhow!("{}: {}", i.path, i.message)),
            None => Err(anyhow!("invalid input")),
        },
        other => other.map_err(anyhow::Error::from),
    }
}

/// `switchyard admin servers`: the servers on this store, where each listens, its version, when it started
/// and last answered, and which one leads.
async fn servers(ctx: &ServiceContext) -> Result<()> {
    use switchyard_server::services::servers::{self, ServerState};
    let rows: Vec<Vec<String>> = servers::list(ctx)
        .await?
        .into_iter()
        .map(|s| {
            let state = match s.state {
                ServerState::Running => "running",
                ServerState::NotAnswering => "not answering",
                ServerState::Stopped => "stopped",
            };
            let at = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S").to_string();
            vec![
                s.address,
                s.version,
                at(s.started_at),
                at(s.last_heartbeat),
                state.to_string(),
                if s.leader { "leader" } else { "" }.to_string(),
                s.public_url,
            ]
        })
        .collect();
    let header = [
        "ADDRESS",
        "VERSION",
        "STARTED",
        "LAST HEARTBEAT",
        "STATE",
        "ROLE",
        "PUBLIC URL",
    ];
    print!("{}", crate::table::table(&header, &rows));
    Ok(())
}

/// `switchyard admin domain …`, as the administrator `admin`.
async fn domain(ctx: &ServiceContext, command: DomainCommand) -> Result<()> {
    match command {
        DomainCommand::List => {
            println!("{:<48} {:<24} ASSIGNED BY", "DOMAIN", "NAMESPACE");
            for d in domains::list(ctx).await? {
                let by = d.assigned_by.as_deref().unwrap_or("(its first endpoint)");
                println!("{:<48} {:<24} {by}", d.domain, d.namespace);
            }
        }
        DomainCommand::Assign { domain, namespace } => {
            let d = said(domains::assign(ctx, "admin", &domain, &namespace).await)?;
            println!("{} belongs to {}", d.domain, d.namespace);
        }
        DomainCommand::Release { domain } => {
            said(domains::release(ctx, "admin", &domain).await)?;
            println!("released {domain}");
        }
    }
    Ok(())
}
