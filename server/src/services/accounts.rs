//! Account operations shared by the admin HTTP API and `switchyard admin`: users, organizations,
//! memberships, tokens, passwords, and the first administrator of a new store.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};

use super::Context;
use crate::crypto::{hash_token, new_token, write_private_file};
use crate::model::account::{
    validate_account_name, Account, AccountKind, Membership, Role, Scope, TokenInfo,
};
use crate::passwords::{self, PasswordError};
use crate::store::{NewAccount, NewToken, Session, Store, StoreError};

/// Name of the administrator created in an empty store.
pub const FIRST_ADMIN: &str = "admin";

/// File in the data dir that receives the first administrator's token.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// Longest lifetime a token may be given.
pub const MAX_TOKEN_LIFETIME_DAYS: i64 = 3650;

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("{0}")]
    Invalid(String),
    /// A password that breaks the rules, or a hash that could not be made.
    #[error(transparent)]
    Password(#[from] PasswordError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Creates a user or an organization; a user may be given a password (hashed before the unit of work
/// starts, then stored with the account, so a user is never created without the password asked for).
pub async fn create_account(
    store: &dyn Store,
    kind: AccountKind,
    name: &str,
    email: Option<String>,
    is_admin: bool,
    password: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Account, AccountError> {
    validate_account_name(name).map_err(AccountError::Invalid)?;
    if let Some(e) = &email {
        if !(e.contains('@') && e.len() <= 254 && !e.chars().any(char::is_whitespace)) {
            return Err(AccountError::Invalid(format!(
                "invalid email address {e:?}"
            )));
        }
    }
    if password.is_some() && kind != AccountKind::User {
        return Err(AccountError::Invalid(
            "only a user can have a password".into(),
        ));
    }
    let hash = match password {
        Some(p) => Some(passwords::hash_password(p).await?),
        None => None,
    };
    let mut unit = store.begin().await?;
    let account = insert_account(unit.as_mut(), kind, name, email, is_admin, now).await?;
    if let Some(hash) = &hash {
        unit.set_password_hash(&account.name, Some(hash)).await?;
    }
    unit.commit().await?;
    Ok(account)
}

/// Sets a user's password (hashed before the unit of work starts, so the hash never holds the store's
/// write lock); `NotFound` when there is no such user. Its tokens are unaffected.
pub async fn set_password(
    store: &dyn Store,
    name: &str,
    password: &str,
) -> Result<(), AccountError> {
    let hash = passwords::hash_password(password).await?;
    let mut unit = store.begin().await?;
    if !unit.set_password_hash(name, Some(&hash)).await? {
        return Err(StoreError::NotFound(format!("no user {name:?}")).into());
    }
    unit.commit().await?;
    Ok(())
}

/// The user a name (in any case) and password sign in as: an enabled user whose password this is.
/// `None` otherwise, after the same work whether or not the name exists or has a password, so the time
/// an answer takes does not tell which names do.
pub async fn check_password(
    store: &dyn Store,
    name: &str,
    password: &str,
) -> Result<Option<Account>, AccountError> {
    // The session is let go before the hash: no connection waits on it.
    let found = store.read().await?.password_hash_of(name).await?;
    let (account, hash) = match found {
        Some((account, hash)) if account.kind == AccountKind::User => (Some(account), hash),
        _ => (None, None),
    };
    let matches = passwords::verify_stored(password, hash.as_deref()).await;
    Ok(account.filter(|a| matches && a.disabled_at.is_none()))
}

async fn insert_account(
    unit: &mut dyn Session,
    kind: AccountKind,
    name: &str,
    email: Option<String>,
    is_admin: bool,
    now: DateTime<Utc>,
) -> Result<Account, AccountError> {
    Ok(unit
        .create_account(
            NewAccount {
                kind,
                name: name.to_string(),
                fullname: name.to_string(),
                email,
                is_admin: is_admin && kind == AccountKind::User,
            },
            now,
        )
        .await?)
}

pub async fn add_member(
    store: &dyn Store,
    org: &str,
    user: &str,
    role: Role,
    now: DateTime<Utc>,
) -> Result<Membership, AccountError> {
    let mut unit = store.begin().await?;
    let m = unit.set_membership(org, user, role, now).await?;
    unit.commit().await?;
    Ok(m)
}

/// Issues a token for a user; returns the token (shown once) and what is stored about it.
pub async fn issue_token(
    store: &dyn Store,
    user: &str,
    display_name: Option<String>,
    scopes: Option<Vec<Scope>>,
    expires_in: Option<Duration>,
    now: DateTime<Utc>,
) -> Result<(String, TokenInfo), AccountError> {
    let mut unit = store.begin().await?;
    let issued = insert_token(unit.as_mut(), user, display_name, scopes, expires_in, now).await?;
    unit.commit().await?;
    Ok(issued)
}

async fn insert_token(
    store: &mut dyn Session,
    user: &str,
    display_name: Option<String>,
    scopes: Option<Vec<Scope>>,
    expires_in: Option<Duration>,
    now: DateTime<Utc>,
) -> Result<(String, TokenInfo), AccountError> {
    let account = store
        .account_by_name(user)
        .await?
        .filter(|a| a.kind == AccountKind::User)
        .ok_or_else(|| AccountError::Invalid(format!("no user {user:?}")))?;
    if let Some(d) = expires_in {
        if d <= Duration::zero() || d > Duration::days(MAX_TOKEN_LIFETIME_DAYS) {
            return Err(AccountError::Invalid(format!(
                "expiry must be more than 0 and at most {MAX_TOKEN_LIFETIME_DAYS} days"
            )));
        }
    }
    if scopes.as_ref().is_some_and(Vec::is_empty) {
        return Err(AccountError::Invalid(
            "a restricted token needs at least one scope".into(),
        ));
    }
    let token = new_token();
    let display_name =
        display_name.unwrap_or_else(|| format!("{user}-{}", now.format("%Y%m%d%H%M%S")));
    if display_name.is_empty() || display_name.len() > 100 {
        return Err(AccountError::Invalid(
            "token name must be 1 to 100 characters".into(),
        ));
    }
    let info = store
        .create_token(
            NewToken {
                user_id: account.id,
                token_hash: hash_token(&token),
                display_name,
                scopes,
                expires_at: expires_in.map(|d| now + d),
            },
            now,
        )
        .await?;
    Ok((token, info))
}

/// On an empty store, creates the administrator and writes its token to `<data_dir>/admin-token`
/// (mode 0600). Returns the file's path when it did. The token itself is never logged.
pub async fn bootstrap_admin(
    store: &dyn Store,
    data_dir: &Path,
    now: DateTime<Utc>,
) -> Result<Option<PathBuf>, AccountError> {
    // One unit of work: the administrator never exists without its token.
    let mut unit = store.begin().await?;
    if unit.count_accounts().await? > 0 {
        return Ok(None);
    }
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    let admin = match insert_account(
        unit.as_mut(),
        AccountKind::User,
        FIRST_ADMIN,
        None,
        true,
        now,
    )
    .await
    {
        Ok(a) => a,
        // Another process bootstrapped the same store at the same moment.
        Err(AccountError::Store(StoreError::Conflict(_))) => return Ok(None),
        Err(e) => return Err(e),
    };
    let (token, _) = insert_token(
        unit.as_mut(),
        &admin.name,
        Some("bootstrap".into()),
        None,
        None,
        now,
    )
    .await?;
    unit.commit().await?;
    // A token file left over from an older store would be stale: replace it.
    let _ = std::fs::remove_file(&path);
    write_private_file(&path, format!("{token}\n").as_bytes())
        .map_err(|e| AccountError::Invalid(format!("writing {}: {e}", path.display())))?;
    Ok(Some(path))
}

pub async fn list_accounts(
    store: &dyn Store,
    kind: AccountKind,
) -> Result<Vec<Account>, AccountError> {
    Ok(store.read().await?.list_accounts(kind).await?)
}

/// The organization's members; `NotFound` when there is no such organization.
pub async fn list_members(store: &dyn Store, org: &str) -> Result<Vec<Membership>, AccountError> {
    let mut session = store.read().await?;
    if session
        .account_by_name(org)
        .await?
        .is_none_or(|a| a.kind != AccountKind::Org)
    {
        return Err(StoreError::NotFound(format!("no organization {org:?}")).into());
    }
    Ok(session.list_members(org).await?)
}

/// Removes a member; `NotFound` when the user is not one. Their access through the organization ends at
/// once, cached answers included.
pub async fn remove_member(ctx: &Context, org: &str, user: &str) -> Result<(), AccountError> {
    let mut unit = ctx.store.begin().await?;
    if !unit.remove_membership(org, user).await? {
        return Err(StoreError::NotFound(format!("{user:?} is not a member of {org:?}")).into());
    }
    unit.commit().await?;
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    Ok(())
}

/// The account by name, of the kind the command is about; `NotFound` otherwise.
async fn existing(
    unit: &mut dyn Session,
    name: &str,
    kind: AccountKind,
) -> Result<Account, AccountError> {
    unit.account_by_name(name)
        .await?
        .filter(|a| a.kind == kind)
        .ok_or_else(|| {
            let what = match kind {
                AccountKind::User => "user",
                AccountKind::Org => "organization",
            };
            StoreError::NotFound(format!("no {what} {name:?}")).into()
        })
}

/// The lock taken while the enabled administrators are counted.
const ADMINS_LOCK: &str = "instance-administrators";

/// Refuses to leave the instance without an enabled administrator.
async fn keep_an_admin(unit: &mut dyn Session, account: &Account) -> Result<(), AccountError> {
    if !account.is_admin || account.disabled_at.is_some() {
        return Ok(());
    }
    // Two writers each removing a different administrator must not both count the other one.
    unit.lock(ADMINS_LOCK).await?;
    let admins = unit
        .list_accounts(AccountKind::User)
        .await?
        .into_iter()
        .filter(|a| a.is_admin && a.disabled_at.is_none())
        .count();
    if admins <= 1 {
        return Err(AccountError::Invalid(format!(
            "{:?} is the last enabled instance administrator; make another user an administrator first",
            account.name
        )));
    }
    Ok(())
}

/// Deletes a user or an organization with everything it owns: its endpoints (each with its
/// `endpoint.deleted` event; the runtime stops their replicas), its memberships, its custom domains and,
/// for a user, its tokens, refused at once. Returns how many endpoints went with it.
pub async fn delete_account(
    ctx: &Context,
    name: &str,
    kind: AccountKind,
) -> Result<usize, AccountError> {
    let now = ctx.clock.now();
    let mut unit = ctx.store.begin().await?;
    let account = existing(unit.as_mut(), name, kind).await?;
    keep_an_admin(unit.as_mut(), &account).await?;
    let endpoints =
        super::endpoints::delete_all_in(unit.as_mut(), name, now, &ctx.public_url).await?;
    // A later account of the same name starts from the defaults, not from this one's quota.
    unit.set_namespace_quota(name, Default::default(), now)
        .await?;
    // Nor from its custom domains: they are free again.
    unit.release_domains_of(&account.name).await?;
    unit.delete_account(name).await?;
    unit.commit().await?;
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    (ctx.on_change)();
    tracing::info!(account = %name, endpoints, "account deleted");
    Ok(endpoints)
}

/// Disables a user (every token refused at once; its endpoints go on serving) or enables it again.
pub async fn set_disabled(
    ctx: &Context,
    name: &str,
    disabled: bool,
) -> Result<Account, AccountError> {
    let now = ctx.clock.now();
    let mut unit = ctx.store.begin().await?;
    let account = existing(unit.as_mut(), name, AccountKind::User).await?;
    if disabled {
        keep_an_admin(unit.as_mut(), &account).await?;
    }
    let at = disabled.then_some(account.disabled_at.unwrap_or(now));
    unit.set_account_disabled(name, at).await?;
    let account = existing(unit.as_mut(), name, AccountKind::User).await?;
    // What its webhooks still had to send is not sent (a replay brings it back once enabled).
    if disabled {
        unit.cancel_deliveries_of_owner(&account.id, now).await?;
    }
    unit.commit().await?;
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    tracing::info!(user = %name, disabled, "account access changed");
    Ok(account)
}

/// Names that differ only in case from an older account's (kept from before names were unique
/// without regard to case), for the start-up report.
pub async fn name_clashes(store: &dyn Store) -> Result<Vec<String>, AccountError> {
    Ok(store.read().await?.name_clashes().await?)
}

/// The organizations a user belongs to, with the user's role in each.
pub async fn orgs_of(
    store: &dyn Store,
    user_id: &str,
) -> Result<Vec<(Account, Role)>, AccountError> {
    Ok(store.read().await?.orgs_of(user_id).await?)
}

pub async fn list_tokens(store: &dyn Store, user: &str) -> Result<Vec<TokenInfo>, AccountError> {
    Ok(store.read().await?.list_tokens(user).await?)
}

/// Revokes a token at once (cached answers included); `NotFound` when there is none with this id.
pub async fn revoke_token(ctx: &Context, id: &str) -> Result<(), AccountError> {
    let mut unit = ctx.store.begin().await?;
    if !unit.delete_token(id).await? {
        return Err(StoreError::NotFound(format!("no token {id:?}")).into());
    }
    unit.commit().await?;
    crate::auth::revoke_everywhere(&ctx.revocations, ctx.store.as_ref()).await;
    Ok(())
}

/// Parses a lifetime such as `90m`, `12h`, `30d` or `2w`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("invalid duration {s:?}: use a number and a unit, e.g. 90m, 12h, 30d, 2w");
    let unit_at = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(unit_at);
    let n: i64 = num.parse().map_err(|_| bad())?;
    let d = match unit {
        "s" => Duration::try_seconds(n),
        "m" => Duration::try_minutes(n),
        "h" => Duration::try_hours(n),
        "d" => Duration::try_days(n),
        "w" => Duration::try_weeks(n),
        _ => None,
    };
    d.filter(|d| *d > Duration::zero()).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90m").unwrap(), Duration::minutes(90));
        assert_eq!(parse_duration("30d").unwrap(), Duration::days(30));
        assert_eq!(parse_duration("2w").unwrap(), Duration::weeks(2));
        for bad in [
            "",
            "h",
            "10",
            "0d",
            "-1d",
            "1y",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
