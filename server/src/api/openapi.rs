//! The OpenAPI 3.1 document, generated from the handlers and model types and served at
//! `/api/v1/openapi.json`. A copy is committed (`openapi.json`) so API changes show up in review.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::AppState;

#[derive(OpenApi)]
#[openapi(
    info(title = "Switchyard", version = "1.0.0", description = "Control plane for model-serving endpoints: catalog and deploy, endpoint management, accounts."),
    paths(
        super::catalog::list,
        super::catalog::deploy_model,
        super::catalog::deploy_recipe,
        super::engines::list,
        super::engines::start_install,
        super::engines::remove,
        super::endpoints::list,
        super::endpoints::create,
        super::endpoints::read,
        super::endpoints::update,
        super::endpoints::remove,
        super::endpoints::pause,
        super::endpoints::resume,
        super::endpoints::scale_to_zero,
        super::endpoints::logs,
        super::endpoints::replicas,
        super::analytics::analytics,
        super::analytics::decisions,
        super::endpoints::hardware,
        super::accounts::whoami,
        super::admin::list_users,
        super::admin::create_user,
        super::admin::list_orgs,
        super::admin::create_org,
        super::admin::list_members,
        super::admin::set_member,
        super::admin::remove_member,
        super::admin::list_tokens,
        super::admin::create_token,
        super::admin::delete_token,
        super::admin::list_catalog,
        super::admin::put_catalog_item,
        super::admin::delete_catalog_item,
        super::admin::reload_catalog,
        super::admin::delete_user,
        super::admin::disable_user,
        super::admin::enable_user,
        super::admin::set_password,
        super::admin::delete_org,
        super::admin::show_quota,
        super::admin::set_quota,
        super::admin::list_domains,
        super::admin::list_servers,
        super::admin::assign_domain,
        super::admin::release_domain,
        super::oauth::apps::list,
        super::oauth::apps::create,
        super::oauth::apps::show,
        super::oauth::apps::update,
        super::oauth::apps::remove,
        super::oauth::apps::rotate_secret,
        super::oauth::apps::delete_secret,
        super::oauth::apps::audit_log,
        super::oauth::publishers::list,
        super::oauth::publishers::create,
        super::oauth::publishers::remove,
        super::notifications::list,
        super::notifications::stream,
        super::webhooks::list,
        super::webhooks::create,
        super::webhooks::get_one,
        super::webhooks::update,
        super::webhooks::remove,
        super::webhooks::enable,
        super::webhooks::disable,
        super::webhooks::deliveries,
        super::webhooks::replay,
        super::webhooks::replay_failed,
        super::webhooks::signing_secret,
        super::webhooks::rotate,
    ),
    modifiers(&BearerAuth, &Errors),
    tags(
        (name = "catalog", description = "Catalog of models and their deployment recipes"),
        (name = "endpoints", description = "Inference endpoint management (huggingface_hub compatible)"),
        (name = "accounts", description = "The caller's account"),
        (name = "engines", description = "The engines this server can run, which catalog recipes can run here, installing the built-in ones"),
        (name = "admin", description = "Instance administration"),
        (name = "oauth", description = "OAuth apps, trusted publishers for keyless sign-in from CI, and organizations' audit logs (the provider itself: /.well-known/openid-configuration)"),
        (name = "webhooks", description = "Webhooks (huggingface_hub compatible): watched changes POSTed to a URL, with their activity, replays and signing secrets"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// The error answers every operation may give, declared where each can happen (its status and
/// `{"error": …}`, with `issues` for an invalid body or `details` for invalid query parameters): 401 and 403
/// (a token missing, or not allowed), 404 where the path or the body names something, 400 where there is a query or a
/// body, 413 and 415 where there is a body (too large, not JSON), 409 where something is written, 500.
struct Errors;

impl Errors {
    /// The statuses an operation of `method` with `op`'s parameters and body may answer with an error.
    fn of(
        method: &str,
        op: &utoipa::openapi::path::Operation,
    ) -> Vec<(&'static str, &'static str)> {
        use utoipa::openapi::path::ParameterIn;
        let params = op.parameters.as_deref().unwrap_or_default();
        let has = |place: ParameterIn| params.iter().any(|p| p.parameter_in == place);
        let body = op.request_body.is_some();
        let mut codes = vec![
            ("401", "no token, or one that is not valid"),
            ("403", "the token may not do this"),
            ("500", "the server failed; the cause is logged, never sent"),
        ];
        if has(ParameterIn::Path) || body {
            codes.push(("404", "nothing of that name, or nothing the caller may see"));
        }
        if body || has(ParameterIn::Query) {
            codes.push((
                "400",
                "the request's parameters or body break the rules (each issue names its field)",
            ));
        }
        if body {
            codes.push(("413", "the body is larger than server.body_limit"));
            codes.push(("415", "the body is not sent as JSON"));
        }
        if matches!(method, "post" | "put" | "patch" | "delete") {
            codes.push(("409", "it clashes with what is there (a name or route taken, a state that does not allow it)"));
        }
        codes
    }
}

impl Modify for Errors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, ResponseBuilder, Type};
        let schema = ObjectBuilder::new()
            .property("error", ObjectBuilder::new().schema_type(Type::String))
            .required("error")
            .description(Some(
                "An error: what went wrong, in words; `issues` or `details` say where.",
            ));
        if let Some(components) = openapi.components.as_mut() {
            components.schemas.insert("Error".into(), schema.into());
        }
        for (_, item) in openapi.paths.paths.iter_mut() {
            let ops = [
                ("get", &mut item.get),
                ("put", &mut item.put),
                ("post", &mut item.post),
                ("delete", &mut item.delete),
                ("patch", &mut item.patch),
            ];
            for (method, op) in ops {
                let Some(op) = op.as_mut() else { continue };
                for (code, description) in Errors::of(method, op) {
                    op.responses
                        .responses
                        .entry(code.into())
                        .or_insert_with(|| {
                            let content =
                                ContentBuilder::new().schema(Some(Ref::from_schema_name("Error")));
                            ResponseBuilder::new()
                                .description(description)
                                .content("application/json", content.build())
                                .build()
                                .into()
                        });
                }
            }
        }
    }
}

/// The document as pretty JSON, exactly as served and committed.
pub fn document_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/api/v1/openapi.json",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "application/json")],
                document_json(),
            )
                .into_response()
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed copy must match what the code generates: regenerate it with
    /// `cargo run -- openapi > openapi.json` when the API changes on purpose.
    #[test]
    fn committed_document_is_current() {
        let committed = include_str!("../../../openapi.json");
        assert_eq!(
            committed.trim_end(),
            document_json().trim_end(),
            "openapi.json is stale: run `cargo run -- openapi > openapi.json`"
        );
    }

    #[test]
    fn document_is_openapi_3_1_with_the_spec_operations() {
        let doc: serde_json::Value = serde_json::from_str(&document_json()).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        for (path, method, op) in [
            ("/api/v1/catalog/list", "get", "listCatalogItems"),
            (
                "/api/v1/catalog/model/{author}/{model}/deploy",
                "post",
                "deployCatalogModel",
            ),
            (
                "/api/v1/catalog/recipe/{public_id}/deploy",
                "post",
                "deployCatalogRecipe",
            ),
        ] {
            assert_eq!(doc["paths"][path][method]["operationId"], op, "{path}");
        }
        assert!(doc["components"]["schemas"]["EndpointSpec"].is_object());
    }
}
