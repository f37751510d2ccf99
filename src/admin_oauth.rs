//! `switchyard admin app …`, `admin key rotate` and `admin org exchange-ttl`: the OAuth provider's
//! administration from the shell.

use anyhow::{bail, Result};
use clap::Subcommand;
use serde_json::json;
use switchyard_server::model::account::Scope;
use switchyard_server::model::oauth::parse_scopes;
use switchyard_server::services::apps::{self, AppIn};
use switchyard_server::services::Context;

#[derive(Subcommand)]
pub enum AppCommand {
    /// Register an OAuth app; prints {"clientId", "clientSecret"} (clientSecret null for --public).
    Create {
        /// The owning namespace: a user, or an organization.
        #[arg(long, value_name = "NS")]
        owner: String,
        #[arg(long)]
        name: String,
        /// A redirect URI (repeat for several).
        #[arg(long = "redirect-uri", value_name = "URI")]
        redirect_uris: Vec<String>,
        /// The scopes it may ask for, space-separated: "openid profile email …".
        #[arg(long)]
        scopes: String,
        #[arg(long, value_name = "URL")]
        homepage: Option<String>,
        #[arg(long, value_name = "URL")]
        logo: Option<String>,
        /// No secret: the app signs in with PKCE or the device flow only.
        #[arg(long)]
        public: bool,
        /// Bind the app to the organization --owner with the token-exchange privilege.
        #[arg(long)]
        token_exchange: bool,
    },
    /// List a namespace's apps.
    List {
        #[arg(long, value_name = "NS")]
        owner: String,
    },
    /// Make a new secret (printed once); the old one stops working at once.
    RotateSecret { id: String },
    /// Delete the secret: the app becomes public.
    DeleteSecret { id: String },
    /// Delete an app with every grant and token it holds.
    Delete { id: String },
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Sign ID tokens with a new key from now on. The old public key stays in the JWKS until the ID
    /// tokens it signed have expired; running servers pick the new key up within a minute.
    Rotate,
}

fn scopes(s: &str) -> Result<Vec<Scope>> {
    parse_scopes(s).map_err(|e| anyhow::anyhow!("--scopes: {e}"))
}

pub async fn app(ctx: &Context, command: AppCommand) -> Result<()> {
    match command {
        AppCommand::Create {
            owner,
            name,
            redirect_uris,
            scopes: s,
            homepage,
            logo,
            public,
            token_exchange,
        } => {
            let input = AppIn {
                owner: Some(owner),
                name: Some(name),
                homepage_url: homepage,
                logo_url: logo,
                redirect_uris: Some(redirect_uris),
                scopes: Some(scopes(&s)?),
                public,
                token_exchange: Some(token_exchange),
            };
            let out = apps::create_as_admin(ctx, input).await?;
            let printed = json!({"clientId": out.app.id, "clientSecret": out.client_secret});
            println!("{printed}");
        }
        AppCommand::List { owner } => {
            for a in apps::list_as_admin(ctx, &owner).await? {
                let kind = if a.has_secret {
                    "confidential"
                } else {
                    "public"
                };
                let te = if a.token_exchange {
                    " token-exchange"
                } else {
                    ""
                };
                println!(
                    "{}\t{}\t{kind}{te}\t{}",
                    a.id,
                    a.name,
                    a.redirect_uris.join(" ")
                );
            }
        }
        AppCommand::RotateSecret { id } => {
            let out = apps::set_secret_as_admin(ctx, &id, true).await?;
            println!(
                "{}",
                json!({"clientId": id, "clientSecret": out.client_secret})
            );
        }
        AppCommand::DeleteSecret { id } => {
            apps::set_secret_as_admin(ctx, &id, false).await?;
            println!("{id} is now public (no secret)");
        }
        AppCommand::Delete { id } => {
            apps::delete_as_admin(ctx, &id).await?;
            println!("deleted app {id} and every token it held");
        }
    }
    Ok(())
}

pub async fn key(ctx: &Context, keep: chrono::Duration, command: KeyCommand) -> Result<()> {
    match command {
        KeyCommand::Rotate => {
            let (kid, from) = switchyard_server::oauth::keys::rotate(
                ctx.store.as_ref(),
                &ctx.secrets,
                ctx.clock.now(),
                keep,
            )
            .await?;
            let from = from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            println!(
                "key {kid} signs from {from}; running servers publish it within a minute, so \
                 clients that keep the JWKS have it by then"
            );
        }
    }
    Ok(())
}

/// `admin org exchange-ttl ORG DURATION|default`.
pub async fn exchange_ttl(ctx: &Context, org: &str, ttl: &str) -> Result<()> {
    let ttl = match ttl {
        "default" => None,
        s => match switchyard_server::services::accounts::parse_duration(s) {
            Ok(d) => Some(d),
            Err(e) => bail!("{s:?}: {e} (or \"default\" for 8h)"),
        },
    };
    apps::set_exchange_ttl(ctx, org, ttl).await?;
    match ttl {
        Some(t) => println!("{org}'s exchanged tokens now live {}s", t.num_seconds()),
        None => println!("{org}'s exchanged tokens now live the default 8h"),
    }
    Ok(())
}
