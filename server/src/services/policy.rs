//! What a spec may ask of the host, and who may ask it: custom commands, variables and launcher
//! arguments outside the per-launcher allowlists (the `custom_commands` permission), the variables
//! only the server sets, and the response cache (instance administrators).

use std::collections::BTreeMap;

use super::{Context, Error, Result};
use crate::auth::Principal;
use crate::config::{CustomCommands, RuntimeConfig};
use crate::model::{EndpointSpec, Issue, ModelImage};

/// The response cache is restricted to instance administrators (spec 2.7): enabling it (on create, or
/// turning it on in an update) needs one.
pub(super) fn check_cache(
    who: &Principal,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Result<()> {
    let on =
        |s: &EndpointSpec| s.cache_http_responses || s.experimental_features.cache_http_responses;
    if on(spec) && !before.is_some_and(on) && !who.is_admin() {
        return Err(Error::Forbidden(
            "the response cache (cacheHttpResponses) can only be enabled by an instance administrator".into(),
        ));
    }
    Ok(())
}

/// Environment variables that change what a program runs (a preload, a startup script, a search path).
/// Setting them is code execution on the host, like a custom command, whatever the allowlists say.
fn runs_code(var: &str) -> bool {
    const EXACT: [&str; 11] = [
        "PATH",
        "BASH_ENV",
        "ENV",
        "BROWSER",
        "NODE_OPTIONS",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
    ];
    let upper = var.to_ascii_uppercase();
    EXACT.contains(&upper.as_str()) || upper.starts_with("LD_") || upper.starts_with("PYTHON")
}

/// Variables the server sets for every replica and router (its port, its id): nobody sets them in a spec.
const SET_BY_SERVER: [&str; 2] = ["PORT", "REPLICA_ID"];

/// The replica's own directories, set by the server: moving them (to where a program finds files it
/// loads at start) takes the same permission as running code.
const REPLICA_PLACES: [&str; 2] = ["HOME", "TMPDIR"];

/// Whether `name` is in an allowlist of exact names and prefixes ending in `*`.
fn listed(list: &[String], name: &str) -> bool {
    list.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The first of `args` not allowed by a launcher's `flags`: each flag (its name before `=`) must be
/// listed, and a bare value may only follow a listed flag given without `=`.
fn refused_arg<'a>(flags: &[String], args: &'a [String]) -> Option<&'a str> {
    let mut value_may_follow = false;
    for arg in args {
        if arg.starts_with('-') {
            let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
            if !flags.iter().any(|f| f == name) {
                return Some(arg);
            }
            value_may_follow = !arg.contains('=');
        } else if std::mem::take(&mut value_may_follow) {
            continue;
        } else {
            return Some(arg);
        }
    }
    None
}

/// The names in `now` that are new or hold another value than in `before`.
fn changed<'a, V: PartialEq>(
    now: &'a BTreeMap<String, V>,
    before: Option<&'a BTreeMap<String, V>>,
) -> impl Iterator<Item = &'a String> {
    now.iter()
        .filter(move |(k, v)| before.and_then(|b| b.get(*k)) != Some(*v))
        .map(|(k, _)| k)
}

/// Why setting `var` for a program needs the custom-commands permission, if it does. `allowed` is the
/// launcher's own allowlist, named by `setting`.
fn var_needs(
    config: &RuntimeConfig,
    allowed: &[String],
    setting: &str,
    var: &str,
) -> Option<String> {
    if runs_code(var) {
        return Some(format!(
            "the variable {var} changes what the engine runs on the server's host"
        ));
    }
    if REPLICA_PLACES.contains(&var) {
        return Some(format!(
            "the variable {var} is set by the server for every replica"
        ));
    }
    if listed(&config.tenant_env, var) || listed(allowed, var) {
        return None;
    }
    let lists = match setting {
        "" => "runtime.tenant_env".to_string(),
        s => format!("runtime.tenant_env, {s}"),
    };
    Some(format!(
        "the variable {var} is not one tenants may set ({lists})"
    ))
}

/// What a spec makes the host run beyond what the configured launchers let a tenant ask for: a
/// `custom` image's command, a variable outside the allowlists, an argument its launcher does not
/// allow, a variable of its router outside the router's allowlist. `None` when nothing. Only what
/// changed since `before` counts (everything, when the image's kind, the repository or revision, or the
/// router's tag changed).
fn host_code(
    config: &RuntimeConfig,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Option<String> {
    let (model, old) = (&spec.model, before.map(|b| &b.model));
    let custom = matches!(model.image, ModelImage::Custom(_));
    if custom && model.command.as_ref().is_some_and(|c| !c.is_empty()) {
        let same = old.is_some_and(|o| {
            o.command == model.command
                && o.args == model.args
                && o.image == model.image
                && o.env == model.env
                && o.secrets == model.secrets
        });
        if !same {
            return Some("custom images run model.command on the server's host".into());
        }
    }
    let key = model.image.key();
    let launcher = config.launchers.get(key).filter(|_| !custom);
    // What an approved spec may run was approved for its model: another repository or revision (other
    // code behind the same flags) is checked whole again, like another kind of image.
    let old = old.filter(|o| {
        o.image.key() == key && o.repository == model.repository && o.revision == model.revision
    });
    let setting = match launcher {
        Some(_) => format!("runtime.launchers.{key}.tenant_env"),
        None => String::new(),
    };
    let allowed = launcher.map_or(&[][..], |l| &l.tenant_env);
    let vars = changed(&model.env, old.map(|o| &o.env))
        .chain(changed(&model.secrets.0, old.map(|o| &o.secrets.0)));
    for var in vars {
        if let Some(why) = var_needs(config, allowed, &setting, var) {
            return Some(why);
        }
    }
    // A custom image's args are part of its command, covered above.
    if !custom && old.is_none_or(|o| o.args != model.args) {
        let flags = launcher.map_or(&[][..], |l| &l.tenant_args);
        if let Some(arg) = refused_arg(flags, model.args.as_deref().unwrap_or_default()) {
            return Some(format!(
                "the argument {arg:?} is not one tenants may pass to {key} images \
                 (runtime.launchers.{key}.tenant_args)"
            ));
        }
    }
    router_code(config, spec, before)
}

/// The part of [`host_code`] about the custom router: its variables, against the router's allowlist.
fn router_code(
    config: &RuntimeConfig,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Option<String> {
    let router = spec.custom_router.as_ref()?;
    let old = before
        .and_then(|b| b.custom_router.as_ref())
        .filter(|o| o.tag == router.tag);
    let tag = &router.tag;
    let allowed = config.routers.get(tag).map_or(&[][..], |l| &l.tenant_env);
    let setting = format!("runtime.routers.{tag:?}.tenant_env");
    // The proxy's own settings for an extProc router are the tenant's to choose.
    let proxy_setting = |var: &&String| crate::model::EXT_PROC_ENV.contains(&var.as_str());
    changed(&router.env, old.map(|o| &o.env))
        .filter(|var| !proxy_setting(var))
        .find_map(|var| var_needs(config, allowed, &setting, var))
}

/// Whether `who` may run code on the host: the principals `runtime.custom_commands` and
/// `runtime.custom_command_users` allow.
fn runs_host_code(config: &RuntimeConfig, who: &Principal) -> bool {
    let by_role = match config.custom_commands {
        CustomCommands::Everyone => true,
        CustomCommands::Admins => who.is_admin(),
        CustomCommands::Nobody => false,
    };
    by_role
        || (config.custom_commands != CustomCommands::Nobody
            && config.custom_command_users.contains(&who.account.name))
}

/// Code execution on the host, and anything a launcher does not let tenants set or pass, is for the
/// principals the config allows. Checked for what changed since `before`.
pub(super) fn check_host_code(
    ctx: &Context,
    who: &Principal,
    spec: &EndpointSpec,
    before: Option<&EndpointSpec>,
) -> Result<()> {
    let config = &ctx.runtime_config;
    match host_code(config, spec, before) {
        Some(why) if !runs_host_code(config, who) => Err(Error::Forbidden(format!(
            "{why}; this server allows that only to the principals in runtime.custom_commands"
        ))),
        _ => Ok(()),
    }
}

/// `PORT` and `REPLICA_ID` are the server's to set: a spec that sets them (in `model.env`,
/// `model.secrets` or `customRouter.env`) is invalid, whoever sends it. Checked for what changed.
pub(super) fn check_server_set(spec: &EndpointSpec, before: Option<&EndpointSpec>) -> Result<()> {
    let (model, old) = (&spec.model, before.map(|b| &b.model));
    let router = spec.custom_router.as_ref().map(|r| &r.env);
    let old_router = before
        .and_then(|b| b.custom_router.as_ref())
        .map(|r| &r.env);
    let named = changed(&model.env, old.map(|o| &o.env))
        .map(|k| ("model.env", k))
        .chain(changed(&model.secrets.0, old.map(|o| &o.secrets.0)).map(|k| ("model.secrets", k)))
        .chain(
            router
                .into_iter()
                .flat_map(|r| changed(r, old_router))
                .map(|k| ("customRouter.env", k)),
        );
    let issues: Vec<Issue> = named
        .filter(|(_, k)| SET_BY_SERVER.contains(&k.as_str()))
        .map(|(field, k)| {
            Issue::new(
                format!("{field}.{k}"),
                format!("{k} is set by the server for every replica; a spec cannot set it"),
            )
        })
        .collect();
    if issues.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(issues))
    }
}
