//! `GET /api/whoami-v2`: the caller's account, organizations and token, in the shape the
//! `huggingface_hub` client reads.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiResult;
use super::AppState;
use crate::auth::{Credential, Principal};
use crate::model::account::Scope;
use crate::model::catalog::utc_timestamp;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/whoami-v2", get(whoami))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmIOut {
    /// Always `user`: only users hold tokens.
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub name: String,
    pub fullname: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub avatar_url: String,
    pub is_pro: bool,
    /// Instance administrators manage accounts and the catalog.
    pub is_admin: bool,
    pub orgs: Vec<OrgOut>,
    pub auth: AuthOut,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrgOut {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub name: String,
    pub fullname: String,
    pub role_in_org: String,
    pub avatar_url: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthOut {
    /// `access_token` for a personal token, `oauth` for one issued to an app.
    #[serde(rename = "type")]
    pub kind: String,
    pub access_token: AccessTokenOut,
    /// The app an OAuth token was issued to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<AppOut>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppOut {
    pub client_id: Option<String>,
    pub name: Option<String>,
    /// How the token was granted: `code`, `device`, `exchange` or `ci`.
    pub grant: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessTokenOut {
    pub display_name: String,
    /// `write` for an unrestricted token, `fineGrained` for one restricted to scopes.
    pub role: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub scopes: Option<Vec<Scope>>,
}

fn avatar(name: &str) -> String {
    format!("/avatars/{name}")
}

#[utoipa::path(get, path = "/api/whoami-v2", tag = "accounts",
    responses((status = 200, body = WhoAmIOut), (status = 401, description = "missing or invalid token")))]
pub async fn whoami(State(state): State<AppState>, who: Principal) -> ApiResult<Json<WhoAmIOut>> {
    let orgs = crate::services::accounts::orgs_of(state.store.as_ref(), &who.account.id).await?;
    let a = &who.account;
    let sees = |scope: Scope| who.scopes.as_ref().is_none_or(|s| s.contains(&scope));
    Ok(Json(WhoAmIOut {
        kind: "user".into(),
        id: a.id.clone(),
        name: a.name.clone(),
        fullname: a.fullname.clone(),
        email: a.email.clone().filter(|_| sees(Scope::Email)),
        email_verified: a.email.is_some() && sees(Scope::Email),
        avatar_url: avatar(&a.name),
        is_pro: false,
        is_admin: a.is_admin,
        orgs: orgs
            .into_iter()
            .filter(|(o, _)| sees(Scope::ReadMemberships) && who.reaches_org(&o.name))
            .map(|(o, role)| OrgOut {
                kind: "org".into(),
                avatar_url: avatar(&o.name),
                id: o.id,
                name: o.name,
                fullname: o.fullname,
                role_in_org: role.as_str().into(),
            })
            .collect(),
        auth: auth_out(&who),
    }))
}

fn auth_out(who: &Principal) -> AuthOut {
    let role = if who.scopes.is_some() {
        "fineGrained"
    } else {
        "write"
    };
    match &who.credential {
        Credential::PersonalToken(token) => AuthOut {
            kind: "access_token".into(),
            access_token: AccessTokenOut {
                display_name: token.display_name.clone(),
                role: role.into(),
                created_at: utc_timestamp(token.created_at),
                expires_at: token.expires_at.map(utc_timestamp),
                scopes: who.scopes.clone(),
            },
            app: None,
        },
        Credential::OAuth(t) => AuthOut {
            kind: "oauth".into(),
            access_token: AccessTokenOut {
                display_name: t.app_name.clone().unwrap_or_else(|| t.kind.as_str().into()),
                role: role.into(),
                created_at: utc_timestamp(t.created_at),
                expires_at: Some(utc_timestamp(t.expires_at)),
                scopes: who.scopes.clone(),
            },
            app: Some(AppOut {
                client_id: t.app_id.clone(),
                name: t.app_name.clone(),
                grant: t.kind.as_str().into(),
            }),
        },
    }
}
