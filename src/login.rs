//! `switchyard login --server URL` and `switchyard logout --server URL`: device-code sign-in to a
//! remote server (RFC 8628, through the `oauth2` crate). The code and the address to type it at are
//! printed, nothing is opened: it works the same over ssh. Tokens are kept per server in
//! `credentials.json` beside the config file (mode 0600); the console uses them for `--server URL`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, ClientId, DeviceAuthorizationUrl, RefreshToken, Scope,
    StandardDeviceAuthorizationResponse, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};

/// The client `switchyard login` signs in as (the server knows it without registration).
const CLIENT_ID: &str = "switchyard-cli";
/// What the console does with a server: endpoints, inference, webhooks, organizations.
pub const DEFAULT_SCOPES: &str =
    "openid profile read-memberships read-endpoints write-endpoints inference-api webhooks";

/// A server's tokens, as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// Seconds since the epoch.
    pub expires_at: Option<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Credentials {
    servers: BTreeMap<String, Saved>,
}

/// The server URL as a key: no trailing slash.
fn key(server: &str) -> String {
    server.trim_end_matches('/').to_string()
}

fn load(path: &Path) -> Result<Credentials> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Credentials::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes the file whole, readable by its owner only, through a temporary file and a rename.
fn save(path: &Path, creds: &Credentials) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(serde_json::to_string_pretty(creds)?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The saved tokens for a server, if any.
pub fn saved(path: &Path, server: &str) -> Option<Saved> {
    load(path).ok()?.servers.get(&key(server)).cloned()
}

fn http() -> Result<reqwest::Client> {
    // No redirects: a token request that is redirected goes nowhere.
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("building the HTTP client")
}

/// The provider's endpoints, from its discovery document.
async fn client(
    http: &reqwest::Client,
    server: &str,
) -> Result<(
    oauth2::Client<
        oauth2::basic::BasicErrorResponse,
        oauth2::basic::BasicTokenResponse,
        oauth2::basic::BasicTokenIntrospectionResponse,
        oauth2::StandardRevocableToken,
        oauth2::basic::BasicRevocationErrorResponse,
        oauth2::EndpointNotSet,
        oauth2::EndpointSet,
        oauth2::EndpointNotSet,
        oauth2::EndpointNotSet,
        oauth2::EndpointSet,
    >,
    serde_json::Value,
)> {
    let url = format!("{}/.well-known/openid-configuration", key(server));
    let resp = http
        .get(&url)
        .send()
        .await
        .with_context(|| format!("reaching {url}"))?;
    if !resp.status().is_success() {
        bail!(
            "{url} answered {}: is this a Switchyard server with sign-in on?",
            resp.status()
        );
    }
    let doc: serde_json::Value = resp
        .json()
        .await
        .context("reading the discovery document")?;
    let endpoint = |k: &str| {
        doc.get(k)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the discovery document has no {k}"))
    };
    let client = BasicClient::new(ClientId::new(CLIENT_ID.into()))
        .set_auth_type(AuthType::RequestBody)
        .set_token_uri(TokenUrl::new(endpoint("token_endpoint")?)?)
        .set_device_authorization_url(DeviceAuthorizationUrl::new(endpoint(
            "device_authorization_endpoint",
        )?)?);
    Ok((client, doc))
}

fn saved_from(token: &oauth2::basic::BasicTokenResponse) -> Saved {
    Saved {
        access_token: token.access_token().secret().clone(),
        refresh_token: token.refresh_token().map(|r| r.secret().clone()),
        expires_at: token
            .expires_in()
            .map(|d| chrono::Utc::now().timestamp() + i64::try_from(d.as_secs()).unwrap_or(0)),
    }
}

/// Signs in by device code and keeps the tokens for `server`.
pub async fn login(path: &Path, server: &str, scopes: &str) -> Result<()> {
    let http = http()?;
    let (client, _) = client(&http, server).await?;
    let details: StandardDeviceAuthorizationResponse = client
        .exchange_device_code()
        .add_scopes(scopes.split_whitespace().map(|s| Scope::new(s.to_string())))
        .request_async(&http)
        .await
        .map_err(|e| anyhow!("starting the sign-in: {e}"))?;
    println!(
        "To sign in, open {} in a browser and enter the code {}",
        details.verification_uri().as_str(),
        details.user_code().secret()
    );
    if let Some(complete) = details.verification_uri_complete() {
        println!("(or open {})", complete.secret());
    }
    println!(
        "Sign in there with a user name and password. A user has a password only once one is set: the \
         first `admin` gets one with `switchyard admin user set-password admin --password-stdin` on the \
         server's machine."
    );
    println!("Waiting for you to approve…");
    let token = client
        .exchange_device_access_token(&details)
        .request_async(&http, tokio::time::sleep, None)
        .await
        .map_err(|e| anyhow!("signing in: {e}"))?;
    let _lock = lock(path)?;
    let mut creds = load(path)?;
    creds.servers.insert(key(server), saved_from(&token));
    save(path, &creds)?;
    println!(
        "Signed in to {}; the token is kept in {}",
        key(server),
        path.display()
    );
    Ok(())
}

/// A fresh access token for `server` from the kept refresh token, saved; `None` when there is nothing
/// to refresh with.
pub async fn refreshed(path: &Path, server: &str) -> Result<Option<Saved>> {
    // One refresh at a time across processes: two consoles spending the same refresh token would look
    // like a stolen one, and the server would end the grant.
    let _lock = lock(path)?;
    let Some(current) = saved(path, server) else {
        return Ok(None);
    };
    let fresh_enough = current
        .expires_at
        .is_none_or(|t| t > chrono::Utc::now().timestamp() + 60);
    if fresh_enough {
        return Ok(Some(current));
    }
    let Some(rt) = current.refresh_token.clone() else {
        return Ok(None);
    };
    let http = http()?;
    let (client, _) = client(&http, server).await?;
    let token = client
        .exchange_refresh_token(&RefreshToken::new(rt))
        .request_async(&http)
        .await
        .map_err(|e| {
            anyhow!("refreshing the sign-in to {server} (run switchyard login again): {e}")
        })?;
    let fresh = saved_from(&token);
    let mut creds = load(path)?;
    creds.servers.insert(key(server), fresh.clone());
    save(path, &creds)?;
    Ok(Some(fresh))
}

/// An exclusive lock on the credentials (a file beside them), held until dropped.
fn lock(path: &Path) -> Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let lock_path = path.with_extension("json.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    Ok(file)
}

/// Revokes the server's kept tokens and forgets them.
pub async fn logout(path: &Path, server: &str) -> Result<()> {
    let _lock = lock(path)?;
    let mut creds = load(path)?;
    let Some(saved) = creds.servers.remove(&key(server)) else {
        println!("not signed in to {}", key(server));
        return Ok(());
    };
    let http = http()?;
    let revoke = format!("{}/oauth/revoke", key(server));
    // The refresh token ends the whole grant, its access tokens included.
    let token = saved.refresh_token.as_ref().unwrap_or(&saved.access_token);
    let revoked = http
        .post(&revoke)
        .form(&[("client_id", CLIENT_ID), ("token", token.as_str())])
        .send()
        .await;
    save(path, &creds)?;
    match revoked {
        Ok(r) if r.status().is_success() => {
            println!("signed out of {}; the token is revoked", key(server))
        }
        Ok(r) => println!(
            "signed out of {} (the server answered {} to the revocation)",
            key(server),
            r.status()
        ),
        Err(e) => println!(
            "signed out of {} (the revocation did not reach it: {e})",
            key(server)
        ),
    }
    Ok(())
}

/// Where the tokens are kept: beside the config file in use.
pub fn credentials_file(config: Option<&PathBuf>) -> Result<PathBuf> {
    let config = match config {
        Some(c) => c.clone(),
        None => switchyard_server::config::default_config_file()
            .ok_or_else(|| anyhow!("no config dir on this platform: pass --config"))?,
    };
    Ok(config.with_file_name("credentials.json"))
}
