//! The state's behaviour through `update`, as the runtime drives it: keys, ticks and answers in, effects out.

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::keymap::Keymap;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap()
}

fn state() -> State {
    State::new("in-process".into(), false, now(), "/tmp/x.log".into())
}

fn key(s: &mut State, k: &str) -> Vec<Effect> {
    update(s, Action::Key(Key(k.into())), &Keymap::builtin())
}

/// Types `text` a key at a time (spaces as `space`).
fn typed(s: &mut State, text: &str) {
    for c in text.chars() {
        key(
            s,
            &if c == ' ' {
                "space".into()
            } else {
                c.to_string()
            },
        );
    }
}

fn signed_in(s: &mut State) {
    let who = Action::SignedIn(Ok(("alice".into(), vec![])));
    update(s, who, &Keymap::builtin());
}

fn endpoints() -> Vec<EndpointRow> {
    ["alpha", "beta", "gamma"]
        .iter()
        .map(|n| {
            EndpointRow::from_json(
                "alice",
                &json!({"name": n, "type": "public", "model": {"repository": "org/m"},
                        "status": {"state": "running", "readyReplica": 1, "targetReplica": 1,
                                   "updatedAt": "2026-11-22T10:00:00.000Z", "url": "http://x"}}),
            )
        })
        .collect()
}

fn loaded(s: &mut State, rows: Result<Vec<EndpointRow>, String>) {
    let seq = s.endpoints_seq;
    update(s, Action::EndpointsLoaded(seq, rows), &Keymap::builtin());
}

#[test]
fn sign_in_then_views_load_their_lists() {
    let mut s = state();
    let fx = update(
        &mut s,
        Action::SignedIn(Ok(("alice".into(), vec!["acme".into()]))),
        &Keymap::builtin(),
    );
    // The catalog loads with what runs here, the endpoints (to open on them if there are any), and the
    // notifications and the servers on the store are followed from now on.
    let namespaces = vec!["alice".to_string(), "acme".to_string()];
    assert_eq!(
        fx,
        [
            Effect::LoadCatalog(1, Vec::new()),
            Effect::LoadEngines {
                delay: 0,
                polled: false
            },
            Effect::LoadEndpoints(1, namespaces.clone()),
            Effect::FollowNotifications {
                after: None,
                wait: 0,
                delay: 0
            },
            Effect::LoadServers { delay: 0 }
        ]
    );
    assert_eq!(s.connection, Connection::Connected);
    // None: the console stays on the catalog.
    loaded(&mut s, Ok(Vec::new()));
    assert_eq!(s.view, View::Catalog);
    assert_eq!(key(&mut s, "tab"), [Effect::LoadEndpoints(2, namespaces)]);
    assert_eq!(s.view, View::Endpoints);
    // Live: each tick reloads the endpoints, but never while a load is under way.
    assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
    loaded(&mut s, Ok(Vec::new()));
    assert_eq!(
        update(&mut s, Action::Tick(now()), &Keymap::builtin()).len(),
        1
    );
}

#[test]
fn navigation_filter_and_commands() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    key(&mut s, "j");
    key(&mut s, "j");
    key(&mut s, "j");
    assert_eq!(s.selected, 2);
    key(&mut s, "g");
    assert_eq!(s.selected, 0);
    key(&mut s, "/");
    for c in ["b", "e"] {
        key(&mut s, c);
    }
    key(&mut s, "enter");
    assert_eq!(s.visible(), [1]);
    key(&mut s, "esc");
    assert_eq!(s.visible().len(), 3);
    key(&mut s, ":");
    typed(&mut s, "catalog");
    assert!(matches!(&key(&mut s, "enter")[..], [Effect::LoadCatalog(_, f)] if f.is_empty()));
    assert_eq!(s.view, View::Catalog);
    key(&mut s, ":");
    key(&mut s, "x");
    key(&mut s, "enter");
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, err)| *err && m.contains(":x")));
    key(&mut s, ":");
    key(&mut s, "q");
    key(&mut s, "enter");
    assert!(s.quit);
}

#[test]
fn dangerous_actions_confirm_with_cancel_as_default() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    key(&mut s, "j");
    key(&mut s, "p");
    assert!(matches!(s.overlay, Overlay::Confirm { yes: false, .. }));
    // Enter on the default button cancels.
    assert!(key(&mut s, "enter").is_empty());
    assert_eq!(s.overlay, Overlay::None);
    key(&mut s, "ctrl-d");
    key(&mut s, "tab");
    let fx = key(&mut s, "enter");
    assert_eq!(
        fx,
        [Effect::Act {
            action: EndpointAction::Delete,
            namespace: "alice".into(),
            name: "beta".into()
        }]
    );
    // Read-only: no such actions at all.
    s.read_only = true;
    key(&mut s, "p");
    assert_eq!(s.overlay, Overlay::None);
}

#[test]
fn catalog_filters_are_those_of_the_catalog_shown() {
    let mut s = state();
    key(&mut s, ":");
    typed(&mut s, "catalog task=text-generation limit=5");
    let fx = key(&mut s, "enter");
    let want = vec![
        ("task".to_string(), "text-generation".to_string()),
        ("limit".to_string(), "5".to_string()),
    ];
    assert_eq!(fx, [Effect::LoadCatalog(1, want.clone())]);
    update(
        &mut s,
        Action::CatalogLoaded(1, Ok(Vec::new())),
        &Keymap::builtin(),
    );
    assert_eq!(s.catalog_filters, want);
    // `r` reloads with them.
    assert_eq!(key(&mut s, "r"), [Effect::LoadCatalog(2, want.clone())]);
    // A filter the server refuses is shown, the server is still considered up, and the catalog shown keeps
    // its filters (`r` too).
    signed_in(&mut s);
    key(&mut s, ":");
    typed(&mut s, "catalog limit=0");
    key(&mut s, "enter");
    let seq = s.catalog_seq;
    update(
        &mut s,
        Action::CatalogLoaded(seq, Err("limit: must be greater than 0".into())),
        &Keymap::builtin(),
    );
    assert_eq!(s.connection, Connection::Connected);
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| *e && m.contains("limit")));
    assert_eq!(s.catalog_filters, want);
    // Signed in, what runs here is asked again with it.
    assert!(matches!(&key(&mut s, "r")[..],
        [Effect::LoadCatalog(_, f), Effect::LoadEngines { .. }] if *f == want));
    // `:catalog` alone: the whole catalog again.
    key(&mut s, ":");
    typed(&mut s, "catalog");
    assert!(matches!(&key(&mut s, "enter")[..],
        [Effect::LoadCatalog(_, f), Effect::LoadEngines { .. }] if f.is_empty()));
    let seq = s.catalog_seq;
    update(
        &mut s,
        Action::CatalogLoaded(seq, Ok(Vec::new())),
        &Keymap::builtin(),
    );
    assert!(s.catalog_filters.is_empty());
}

#[test]
fn logs_follow_until_paused() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    let fx = key(&mut s, "l");
    assert_eq!(
        fx,
        [Effect::LoadLogs {
            namespace: "alice".into(),
            name: "alpha".into()
        }]
    );
    update(
        &mut s,
        Action::LogsLoaded {
            namespace: "alice".into(),
            name: "alpha".into(),
            text: Ok("line 1\nline 2".into()),
        },
        &Keymap::builtin(),
    );
    assert!(
        matches!(&s.overlay, Overlay::Logs { pager, follow: true, .. } if pager.lines.last().is_some_and(|l| l == "line 2"))
    );
    // Following: every tick reloads; paused: nothing.
    assert_eq!(
        update(&mut s, Action::Tick(now()), &Keymap::builtin()).len(),
        1
    );
    key(&mut s, "space");
    assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
    key(&mut s, "esc");
    assert_eq!(s.overlay, Overlay::None);
}

#[test]
fn copy_puts_the_url_on_the_clipboard() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    assert_eq!(key(&mut s, "y"), [Effect::Copy("http://x".into())]);
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, _)| m == "copied http://x"));
}

#[test]
fn read_only_holds_whatever_the_keymap_says_and_ctrl_c_always_quits() {
    let user = "[[binding]]\ncontext = \"endpoints\"\nkeys = [\"x\"]\naction = \"delete\"\ndescription = \"delete\"\n";
    let (map, _) = Keymap::with_overrides(Some(user));
    let mut s = state();
    s.read_only = true;
    s.view = View::Endpoints;
    let seq = s.endpoints_seq;
    update(&mut s, Action::EndpointsLoaded(seq, Ok(endpoints())), &map);
    update(&mut s, Action::Key(Key("x".into())), &map);
    assert_eq!(s.overlay, Overlay::None);
    key(&mut s, "/");
    key(&mut s, "ctrl-c");
    assert!(s.quit);
}

#[test]
fn overlays_keep_keys_from_the_list_and_the_selection_follows_its_endpoint() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    key(&mut s, "j");
    key(&mut s, "?");
    key(&mut s, "j");
    assert_eq!(s.selected, 1);
    key(&mut s, "esc");
    // beta is selected; a reload with a new first row keeps it selected.
    let mut rows = endpoints();
    rows.insert(
        0,
        EndpointRow::from_json("alice", &json!({"name": "aaa", "status": {}})),
    );
    loaded(&mut s, Ok(rows));
    assert_eq!(s.endpoints[s.visible()[s.selected]].name, "beta");
}

#[test]
fn unreachable_server_is_shown_and_retried() {
    let mut s = state();
    update(
        &mut s,
        Action::SignedIn(Err(SignInFailure::Unreachable("connection refused".into()))),
        &Keymap::builtin(),
    );
    assert_eq!(
        s.connection,
        Connection::Unreachable("connection refused".into())
    );
    assert_eq!(
        update(&mut s, Action::Tick(now()), &Keymap::builtin()),
        [Effect::SignIn]
    );
    // Backoff: not again within the next second, then after it.
    assert!(update(&mut s, Action::Tick(now()), &Keymap::builtin()).is_empty());
    let later = now() + chrono::Duration::seconds(1);
    assert_eq!(
        update(&mut s, Action::Tick(later), &Keymap::builtin()),
        [Effect::SignIn]
    );
    assert!(update(
        &mut s,
        Action::Tick(later + chrono::Duration::seconds(1)),
        &Keymap::builtin()
    )
    .is_empty());
    // A refused token is not retried.
    update(
        &mut s,
        Action::SignedIn(Err(SignInFailure::Refused(
            "401 Unauthorized: invalid or expired token".into(),
        ))),
        &Keymap::builtin(),
    );
    assert!(matches!(s.connection, Connection::Unauthorized(_)));
    assert!(update(
        &mut s,
        Action::Tick(later + chrono::Duration::seconds(60)),
        &Keymap::builtin()
    )
    .is_empty());
}

#[test]
fn catalog_rows_summarize_recipes() {
    let row = CatalogRow::from_json(&json!({
        "repoId": "Qwen/Qwen2.5-7B", "authorName": "Qwen", "modelName": "Qwen2.5-7B", "task": "text-generation",
        "license": "apache-2.0", "createdAt": "2024-09-19T00:00:00.000Z",
        "recipes": [{"publicId": "a", "accelerator": "gpu", "engineType": "vllm"},
                    {"publicId": "b", "accelerator": "cpu", "engineType": "llamacpp", "ggufFile": "q4.gguf"},
                    {"publicId": "c", "accelerator": "gpu", "engineType": "sglang"}]
    }));
    assert_eq!(row.accelerators, "cpu,gpu");
    assert_eq!(row.engines, "llamacpp,sglang,vllm");
    assert_eq!(row.created, "2024-09-19");
    let mut s = state();
    update(
        &mut s,
        Action::CatalogLoaded(0, Ok(vec![row])),
        &Keymap::builtin(),
    );
    key(&mut s, "enter");
    let Overlay::Describe(pager) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert_eq!(pager.title, "Qwen/Qwen2.5-7B");
    assert!(pager.lines.iter().any(|l| l.contains("q4.gguf")));
}

#[test]
fn stale_answers_are_dropped_and_idle_ticks_draw_nothing() {
    let mut s = state();
    signed_in(&mut s);
    // Two catalog loads under way; the older answer arrives last and is dropped.
    key(&mut s, "r");
    assert_eq!(s.catalog_seq, 2);
    let row = |id: &str| CatalogRow::from_json(&json!({"repoId": id}));
    update(
        &mut s,
        Action::CatalogLoaded(2, Ok(vec![row("new")])),
        &Keymap::builtin(),
    );
    update(
        &mut s,
        Action::CatalogLoaded(1, Ok(vec![row("old")])),
        &Keymap::builtin(),
    );
    assert_eq!(s.catalog[0].repo_id, "new");
    // Ticks within the minute shown, and reloads that bring the same rows, need no frame.
    key(&mut s, "tab");
    loaded(&mut s, Ok(endpoints()));
    s.dirty = false;
    let t = now() + chrono::Duration::seconds(1);
    update(&mut s, Action::Tick(t), &Keymap::builtin());
    loaded(&mut s, Ok(endpoints()));
    assert!(!s.dirty);
    // A changed row does, and so does the next minute.
    let mut rows = endpoints();
    rows[0].state = "failed".into();
    loaded(&mut s, Ok(rows));
    assert!(s.dirty);
    s.dirty = false;
    update(
        &mut s,
        Action::Tick(now() + chrono::Duration::seconds(61)),
        &Keymap::builtin(),
    );
    assert!(s.dirty);
}

#[test]
fn switching_server_forgets_the_old_one() {
    let mut s = state();
    signed_in(&mut s);
    key(&mut s, ":");
    typed(&mut s, "server http://10.0.0.5:8080 sy_secret");
    let Overlay::Command(text) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert_eq!(shown_command(text), "server http://10.0.0.5:8080 •••••••••");
    assert_eq!(
        shown_command(" server  http://h  tok en"),
        " server  http://h  ••• ••"
    );
    assert_eq!(shown_command("catalog task=x"), "catalog task=x");
    let epoch = s.epoch;
    let fx = key(&mut s, "enter");
    assert_eq!(
        fx,
        [
            Effect::Connect(Some((
                "http://10.0.0.5:8080".into(),
                Some("sy_secret".into())
            ))),
            Effect::SignIn
        ]
    );
    assert_eq!(s.epoch, epoch + 1);
    assert_eq!(s.server, "http://10.0.0.5:8080");
    assert_eq!(s.user, None);
    assert_eq!(s.connection, Connection::Connecting);
    // Back home; a URL that is not one is refused and changes nothing.
    key(&mut s, ":");
    typed(&mut s, "server");
    assert_eq!(
        key(&mut s, "enter"),
        [Effect::Connect(None), Effect::SignIn]
    );
    assert_eq!(s.server, "in-process");
    key(&mut s, ":");
    typed(&mut s, "server ftp://x");
    assert!(key(&mut s, "enter").is_empty());
    assert_eq!(s.epoch, epoch + 2);
}

#[test]
fn logs_scroll_back_pauses_them_and_search_finds_lines() {
    let mut s = state();
    s.view = View::Endpoints;
    s.size = (100, 26);
    loaded(&mut s, Ok(endpoints()));
    key(&mut s, "l");
    let text: Vec<String> = (0..100).map(|i| format!("request {i}")).collect();
    let logs = |s: &mut State, text: String| {
        update(
            s,
            Action::LogsLoaded {
                namespace: "alice".into(),
                name: "alpha".into(),
                text: Ok(text),
            },
            &Keymap::builtin(),
        )
    };
    logs(&mut s, text.join("\n"));
    let pager = |s: &State| match &s.overlay {
        Overlay::Logs { pager, follow, .. } => (pager.clone(), *follow),
        other => panic!("{other:?}"),
    };
    let window = layout::pager_window(s.size, false);
    let height = window.height;
    assert_eq!(pager(&s).0.first_row(window), 100 - height);
    key(&mut s, "pageup");
    let (p, follow) = pager(&s);
    assert!(!follow, "scrolling back pauses");
    assert_eq!(p.first_row(window), 100 - 2 * height);
    // Paused: new output does not move the view.
    logs(&mut s, format!("{}\nrequest 100", text.join("\n")));
    assert_eq!(pager(&s).0.lines.len(), 100);
    for k in [
        "/", "r", "e", "q", "u", "e", "s", "t", "space", "4", "2", "enter",
    ] {
        key(&mut s, k);
    }
    assert_eq!(pager(&s).0.current, Some(42));
    // space follows again, at the end.
    assert_eq!(key(&mut s, "space").len(), 1);
    assert!(pager(&s).1 && pager(&s).0.tail);
    // Down at the end (a key, or the mouse wheel) keeps following.
    key(&mut s, "j");
    update(&mut s, Action::Wheel(true), &Keymap::builtin());
    assert!(pager(&s).1 && pager(&s).0.tail);
}

#[test]
fn an_answer_for_a_closed_editor_is_a_message_and_clicks_select_rows() {
    let mut s = state();
    s.view = View::Endpoints;
    s.size = (100, 30);
    loaded(&mut s, Ok(endpoints()));
    update(
        &mut s,
        Action::Saved {
            namespace: "alice".into(),
            name: "beta".into(),
            result: Err(("conflict".into(), vec![])),
        },
        &Keymap::builtin(),
    );
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| *e && m == "saving alice/beta: conflict"));
    // Rows start below the status line, the border and the header.
    update(&mut s, Action::Click(5), &Keymap::builtin());
    assert_eq!(s.selected, 2);
    update(&mut s, Action::Click(1), &Keymap::builtin());
    assert_eq!(s.selected, 2);
    update(&mut s, Action::Wheel(false), &Keymap::builtin());
    assert_eq!(s.selected, 1);
}

fn apps() -> Vec<AppRow> {
    // In natural order by name, as the list keeps them.
    [("web", "app_web", true), ("web cli", "app_cli", false)]
        .iter()
        .map(|(name, id, secret)| {
            AppRow::from_json(&json!({"id": id, "owner": "alice", "name": name,
                                      "redirectUris": ["https://x.example/cb"], "scopes": ["openid"],
                                      "hasSecret": secret, "tokenExchange": false}))
        })
        .collect()
}

/// `:apps` with the two apps loaded.
fn apps_view(s: &mut State) {
    key(s, ":");
    typed(s, "apps");
    key(s, "enter");
    let seq = s.apps_seq;
    update(s, Action::AppsLoaded(seq, Ok(apps())), &Keymap::builtin());
}

const SECRET: &str = "sys_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";

/// Whether the secret is anywhere in the state, as far as its `Debug` (what a log line would hold) goes, or
/// in the message shown.
fn leaks(s: &State) -> bool {
    format!("{s:?}").contains(SECRET) || s.message.as_ref().is_some_and(|(m, _)| m.contains(SECRET))
}

fn holds_secret(s: &State) -> bool {
    matches!(&s.overlay, Overlay::Secret(i) if i.secret.reveal() == SECRET)
}

#[test]
fn apps_and_audit_load_with_sequence_numbers() {
    let mut s = state();
    signed_in(&mut s);
    key(&mut s, ":");
    typed(&mut s, "apps");
    assert_eq!(key(&mut s, "enter"), [Effect::LoadApps(1, None)]);
    assert_eq!(s.view, View::Apps);
    key(&mut s, ":");
    typed(&mut s, "apps acme");
    assert_eq!(
        key(&mut s, "enter"),
        [Effect::LoadApps(2, Some("acme".into()))]
    );
    // The answer for alice's apps comes after: dropped.
    update(
        &mut s,
        Action::AppsLoaded(2, Ok(apps())),
        &Keymap::builtin(),
    );
    update(
        &mut s,
        Action::AppsLoaded(1, Ok(Vec::new())),
        &Keymap::builtin(),
    );
    assert_eq!(s.apps.len(), 2);
    // A namespace the user does not manage: the server's reason instead of the table.
    key(&mut s, "r");
    let refused = LoadFailure::Forbidden("you may not manage the apps of \"acme\"".into());
    update(
        &mut s,
        Action::AppsLoaded(3, Err(refused)),
        &Keymap::builtin(),
    );
    assert!(s.apps.is_empty());
    assert!(s
        .apps_note
        .as_ref()
        .is_some_and(|n| n.contains("may not manage")));

    key(&mut s, ":");
    typed(&mut s, "audit");
    assert!(key(&mut s, "enter").is_empty(), "an organization is needed");
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| *e && m.contains(":audit ORG")));
    key(&mut s, ":");
    typed(&mut s, "audit acme");
    assert_eq!(key(&mut s, "enter"), [Effect::LoadAudit(1, "acme".into())]);
    assert_eq!(key(&mut s, "r"), [Effect::LoadAudit(2, "acme".into())]);
    let forbidden =
        LoadFailure::Forbidden("the audit log of \"acme\" is for its administrators".into());
    update(
        &mut s,
        Action::AuditLoaded(1, Ok(Vec::new())),
        &Keymap::builtin(),
    );
    assert_eq!(s.audit_note, None, "an older answer is dropped");
    update(
        &mut s,
        Action::AuditLoaded(2, Err(forbidden)),
        &Keymap::builtin(),
    );
    assert_eq!(s.audit_note.as_deref(), Some(lists::AUDIT_FORBIDDEN));
}

#[test]
fn app_actions_ask_first_with_cancel_as_default() {
    let mut s = state();
    apps_view(&mut s);
    // Rotate: nothing happens without the dialog's yes.
    assert!(key(&mut s, "S").is_empty());
    assert!(matches!(
        &s.overlay,
        Overlay::Confirm { asked: Effect::AppAct { action: AppAction::RotateSecret, id, .. }, yes: false } if id == "app_web"
    ));
    assert!(key(&mut s, "enter").is_empty(), "enter on Cancel cancels");
    assert_eq!(s.overlay, Overlay::None);
    // Delete the secret: asked, then done.
    key(&mut s, "X");
    key(&mut s, "tab");
    assert_eq!(
        key(&mut s, "enter"),
        [Effect::AppAct {
            action: AppAction::DeleteSecret,
            id: "app_web".into(),
            name: "web".into()
        }]
    );
    // Its answer is a message and the list again.
    let fx = update(
        &mut s,
        Action::Done(Ok(
            "deleted the secret of web: it is a public app now".into()
        )),
        &Keymap::builtin(),
    );
    assert!(matches!(fx[..], [Effect::LoadApps(..)]), "{fx:?}");
    // A public app has no secret to delete: no dialog.
    key(&mut s, "j");
    key(&mut s, "X");
    assert_eq!(s.overlay, Overlay::None);
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| *e && m.contains("public already")));
    // Deleting the app asks too (ctrl-d, as everywhere); esc cancels.
    key(&mut s, "ctrl-d");
    assert!(matches!(
        &s.overlay,
        Overlay::Confirm {
            asked: Effect::AppAct {
                action: AppAction::Delete,
                ..
            },
            ..
        }
    ));
    assert!(key(&mut s, "esc").is_empty());
    assert_eq!(s.overlay, Overlay::None);
    // enter and d show the details; nothing is asked. y copies the client id.
    key(&mut s, "d");
    assert!(
        matches!(&s.overlay, Overlay::Describe(p) if p.lines.iter().any(|l| l.contains("app_cli")))
    );
    key(&mut s, "esc");
    assert_eq!(key(&mut s, "y"), [Effect::Copy("app_cli".into())]);
}

#[test]
fn a_new_secret_is_shown_once_and_gone_after_dismissal() {
    let mut s = state();
    apps_view(&mut s);
    key(&mut s, "n");
    typed(&mut s, "web 2");
    let Effect::CreateApp(body) = &key(&mut s, "enter")[0] else {
        panic!("{:?}", s.overlay)
    };
    assert_eq!(body["name"], "web 2");
    let created = CreatedApp {
        name: "web 2".into(),
        client_id: "app_web2".into(),
        secret: Some(Secret::new(SECRET.into())),
    };
    let fx = update(&mut s, Action::AppCreated(Ok(created)), &Keymap::builtin());
    assert!(
        matches!(fx[..], [Effect::LoadApps(..)]),
        "the list again: {fx:?}"
    );
    assert!(holds_secret(&s));
    assert!(!leaks(&s), "no Debug output or message holds the secret");
    // Until dismissed, nothing else takes keys: no list move, no action, no command line.
    for k in ["j", "R", "d", "n", ":", "tab", "q"] {
        assert!(key(&mut s, k).is_empty(), "{k}");
        assert!(holds_secret(&s), "{k}");
    }
    // The list's reload does not close it either.
    let seq = s.apps_seq;
    update(
        &mut s,
        Action::AppsLoaded(seq, Ok(apps())),
        &Keymap::builtin(),
    );
    assert!(holds_secret(&s));
    key(&mut s, "esc");
    assert_eq!(s.overlay, Overlay::None);
    assert!(!format!("{:?}", s.clone().overlay).contains("Secret"));

    // A rotation: the same, dismissed with enter.
    key(&mut s, "S");
    key(&mut s, "tab");
    assert_eq!(key(&mut s, "enter").len(), 1);
    let issued = IssuedSecret::client("web".into(), "app_web".into(), Secret::new(SECRET.into()));
    update(&mut s, Action::SecretIssued(issued), &Keymap::builtin());
    assert!(holds_secret(&s) && !leaks(&s));
    key(&mut s, "enter");
    assert_eq!(s.overlay, Overlay::None);

    // A public app has no secret: a message with its client id, no popup.
    key(&mut s, "n");
    let public = CreatedApp {
        name: "cli 2".into(),
        client_id: "app_cli2".into(),
        secret: None,
    };
    update(&mut s, Action::AppCreated(Ok(public)), &Keymap::builtin());
    assert_eq!(s.overlay, Overlay::None);
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, _)| m.contains("app_cli2")));
}

#[test]
fn a_refused_app_keeps_the_form_with_every_issue() {
    let mut s = state();
    apps_view(&mut s);
    key(&mut s, "n");
    key(&mut s, "enter");
    let refusal = (
        "invalid request body".to_string(),
        vec![
            (
                "name".to_string(),
                "must be 1 to 100 characters".to_string(),
            ),
            ("scopes[0]".to_string(), "unknown scope \"x\"".to_string()),
        ],
    );
    update(&mut s, Action::AppCreated(Err(refusal)), &Keymap::builtin());
    let Overlay::NewApp(form) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert!(!form.state.busy);
    assert_eq!(form.state.issues.by_field.len(), 2);
    // esc drops the form; a late refusal is a message.
    key(&mut s, "esc");
    update(
        &mut s,
        Action::AppCreated(Err(("conflict".into(), vec![]))),
        &Keymap::builtin(),
    );
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| *e && m == "new app: conflict"));
}

#[test]
fn read_only_refuses_every_app_change() {
    let mut s = state();
    s.read_only = true;
    apps_view(&mut s);
    for k in ["n", "S", "X", "ctrl-d"] {
        assert!(key(&mut s, k).is_empty(), "{k}");
        assert_eq!(s.overlay, Overlay::None, "{k}");
    }
    // A keymap file cannot bring them back.
    let user = "[[binding]]\ncontext = \"apps\"\nkeys = [\"x\"]\naction = \"delete\"\ndescription = \"delete\"\n";
    let (map, _) = Keymap::with_overrides(Some(user));
    assert!(update(&mut s, Action::Key(Key("x".into())), &map).is_empty());
    assert_eq!(s.overlay, Overlay::None);
    // Looking is still allowed.
    key(&mut s, "enter");
    assert!(matches!(s.overlay, Overlay::Describe(_)));
}

#[test]
fn help_scrolls_within_its_length() {
    let mut s = state();
    s.size = (80, 24);
    key(&mut s, "?");
    key(&mut s, "j");
    assert_eq!(s.overlay, Overlay::Help(1));
    key(&mut s, "G");
    let last = Keymap::builtin().help_length(false, 1) - layout::help_height(s.size);
    assert_eq!(s.overlay, Overlay::Help(last));
    key(&mut s, "j");
    assert_eq!(s.overlay, Overlay::Help(last), "not past the end");
    key(&mut s, "g");
    assert_eq!(s.overlay, Overlay::Help(0));
    key(&mut s, "esc");
    assert_eq!(s.overlay, Overlay::None);
}

fn webhooks() -> Vec<WebhookRow> {
    [
        json!({"id": "wh_1", "url": "http://127.0.0.1:9/hook", "owner": "alice",
               "watched": [{"type": "user", "name": "alice"}], "domains": ["endpoint"],
               "disabled": false, "lastAttempt": {"at": "2026-11-22T11:59:00.000Z", "statusCode": 200,
               "errorClass": null, "ok": true}}),
        json!({"id": "wh_2", "url": "https://ci.example/hook", "owner": "acme",
               "watched": [{"type": "org", "name": "acme"}, {"type": "model", "name": "acme/m"}],
               "domains": ["repo", "endpoint"], "disabled": true, "disabledReason": "410 Gone",
               "lastAttempt": {"at": "2026-11-22T11:00:00.000Z", "statusCode": 410,
               "errorClass": "status", "ok": false}}),
    ]
    .iter()
    .map(WebhookRow::from_json)
    .collect()
}

/// `:webhooks` with the two webhooks loaded.
fn webhooks_view(s: &mut State) {
    key(s, ":");
    typed(s, "webhooks");
    let fx = key(s, "enter");
    assert_eq!(fx, [Effect::LoadWebhooks(s.webhooks_seq)]);
    let seq = s.webhooks_seq;
    update(
        s,
        Action::WebhooksLoaded(seq, Ok(webhooks())),
        &Keymap::builtin(),
    );
}

fn attempt(seq: i64, attempt: i64, status: Option<i64>, error: Option<&str>) -> DeliveryRow {
    DeliveryRow::from_json(&json!({
        "seq": seq, "deliveryId": format!("dl_{seq}"), "eventId": "ev", "attempt": attempt,
        "event": {"scope": "endpoint", "action": "create"}, "at": "2026-11-22T12:00:01.000Z",
        "statusCode": status, "durationMs": 12, "errorClass": error, "error": null, "response": null,
        "nextAttemptAt": null, "manual": false, "state": "succeeded"
    }))
}

fn deliveries(s: &mut State, feed: u64, rows: Vec<DeliveryRow>) -> Vec<Effect> {
    update(
        s,
        Action::DeliveriesLoaded {
            feed,
            result: Ok(rows),
        },
        &Keymap::builtin(),
    )
}

#[test]
fn webhooks_list_loads_and_its_actions_ask_first() {
    let mut s = state();
    signed_in(&mut s);
    webhooks_view(&mut s);
    assert_eq!(s.view, View::Webhooks);
    assert_eq!(s.context(), crate::keymap::Context::Webhooks);
    let hook = &s.webhooks[0];
    assert_eq!(hook.watched, ["user:alice"]);
    assert_eq!(hook.last, "200 ok 2026-11-22 11:59:00");
    assert!(s.webhooks[1].last.starts_with("410 status") && !s.webhooks[1].enabled);
    // Disable the enabled one: asked, Cancel first.
    assert!(key(&mut s, "x").is_empty());
    assert!(matches!(
        &s.overlay,
        Overlay::Confirm { asked: Effect::WebhookAct { action: WebhookAction::Disable, id, .. }, yes: false } if id == "wh_1"
    ));
    assert!(key(&mut s, "enter").is_empty(), "enter on Cancel cancels");
    // The disabled one is enabled; delete asks too.
    key(&mut s, "j");
    key(&mut s, "x");
    key(&mut s, "tab");
    assert_eq!(
        key(&mut s, "enter"),
        [Effect::WebhookAct {
            action: WebhookAction::Enable,
            id: "wh_2".into(),
            url: "https://ci.example/hook".into()
        }]
    );
    let fx = update(
        &mut s,
        Action::Done(Ok("enabled webhook https://ci.example/hook".into())),
        &Keymap::builtin(),
    );
    assert!(matches!(fx[..], [Effect::LoadWebhooks(_)]), "{fx:?}");
    key(&mut s, "ctrl-d");
    assert!(matches!(
        &s.overlay,
        Overlay::Confirm {
            asked: Effect::WebhookAct {
                action: WebhookAction::Delete,
                ..
            },
            ..
        }
    ));
    key(&mut s, "esc");
    assert_eq!(s.overlay, Overlay::None);
    // An older load answering late is dropped.
    update(
        &mut s,
        Action::WebhooksLoaded(1, Ok(Vec::new())),
        &Keymap::builtin(),
    );
    assert_eq!(s.webhooks.len(), 2);
}

#[test]
fn the_webhook_form_shows_every_issue_at_once() {
    let mut s = state();
    signed_in(&mut s);
    webhooks_view(&mut s);
    key(&mut s, "n");
    typed(&mut s, "ftp://x");
    let fx = key(&mut s, "enter");
    let [Effect::SaveWebhook { id: None, body }] = &fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(body["watched"], json!([{"type": "user", "name": "alice"}]));
    assert_eq!(body["domains"], json!(["endpoint"]));
    let refusal = (
        "invalid request body".to_string(),
        vec![
            ("url".to_string(), "not an http(s) URL".to_string()),
            (
                "watched[0].name".to_string(),
                "the endpoints of \"alice\" are not visible".to_string(),
            ),
            ("secret".to_string(), "printable ASCII".to_string()),
        ],
    );
    update(
        &mut s,
        Action::WebhookSaved(Err(refusal)),
        &Keymap::builtin(),
    );
    let Overlay::Webhook(form) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert!(!form.state.busy);
    assert_eq!(form.state.issues.by_field.len(), 3, "every issue, at once");
    // Saved: the form closes and the list loads again.
    key(&mut s, "enter");
    let fx = update(
        &mut s,
        Action::WebhookSaved(Ok(SavedWebhook {
            id: "wh_1".into(),
            url: "http://x".into(),
            signing_secret: None,
        })),
        &Keymap::builtin(),
    );
    assert_eq!(s.overlay, Overlay::None);
    assert!(matches!(fx[..], [Effect::LoadWebhooks(_)]));
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| !e && m == "created webhook http://x"));
    // The edit form starts from the webhook and updates it by id.
    key(&mut s, "j");
    key(&mut s, "e");
    let fx = key(&mut s, "enter");
    let [Effect::SaveWebhook { id: Some(id), body }] = &fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(id, "wh_2");
    assert_eq!(
        body["watched"],
        json!([{"type": "org", "name": "acme"}, {"type": "model", "name": "acme/m"}])
    );
    assert!(
        body.get("secret").is_none(),
        "a blank secret is left as it is"
    );
}

#[test]
fn deliveries_follow_live_and_a_new_attempt_moves_into_view() {
    let mut s = state();
    signed_in(&mut s);
    webhooks_view(&mut s);
    let fx = key(&mut s, "enter");
    let feed = s.deliveries.feed;
    // The newest page at once, then long polls after the newest seq seen.
    assert_eq!(
        fx,
        [Effect::FollowDeliveries {
            feed,
            id: "wh_1".into(),
            after: None,
            wait: 0,
            delay: 0
        }]
    );
    assert_eq!(s.view, View::Deliveries);
    assert_eq!(s.context(), crate::keymap::Context::Deliveries);
    let fx = deliveries(
        &mut s,
        feed,
        vec![
            attempt(2, 2, Some(200), None),
            attempt(1, 1, None, Some("timeout")),
        ],
    );
    assert_eq!(
        fx,
        [Effect::FollowDeliveries {
            feed,
            id: "wh_1".into(),
            after: Some(2),
            wait: LONG_POLL_WAIT,
            delay: 0
        }]
    );
    // The wait ran out with nothing: the same poll again.
    assert_eq!(deliveries(&mut s, feed, Vec::new()), fx);
    // A new attempt comes: on top, in view (the selection is on the top), and the next poll after it.
    let fx = deliveries(&mut s, feed, vec![attempt(3, 1, Some(500), Some("status"))]);
    // The webhook is read again too: a failure may have held it.
    assert!(matches!(
        &fx[..],
        [Effect::FollowDeliveries { after: Some(3), .. }, Effect::LoadWebhook { feed: f, .. }] if *f == feed
    ));
    assert_eq!(s.deliveries.rows[0].seq, 3);
    assert_eq!(s.selected, 0);
    assert!(s.dirty);
    // Away from the top, the selection stays on its attempt.
    key(&mut s, "j");
    deliveries(&mut s, feed, vec![attempt(4, 2, Some(200), None)]);
    assert_eq!(s.selected_delivery().map(|d| d.seq), Some(2));
    assert_eq!(s.selected, 2);
    // A failed poll backs off and says so.
    let fx = update(
        &mut s,
        Action::DeliveriesLoaded {
            feed,
            result: Err("cannot reach the server".into()),
        },
        &Keymap::builtin(),
    );
    assert!(matches!(
        &fx[..],
        [Effect::FollowDeliveries {
            delay: 1,
            after: Some(4),
            ..
        }]
    ));
    assert!(s.deliveries.note.is_some());
    // esc: back to the webhooks; the poll under way answers into nothing.
    let fx = key(&mut s, "esc");
    assert_eq!(s.view, View::Webhooks);
    assert!(matches!(fx[..], [Effect::LoadWebhooks(_)]));
    assert!(deliveries(&mut s, feed, vec![attempt(5, 1, Some(200), None)]).is_empty());
    assert_eq!(s.deliveries.rows[0].seq, 4);
}

/// Signed in, the webhooks view, and the selected webhook's deliveries opened; the feed they follow.
fn deliveries_open() -> (State, u64) {
    let mut s = state();
    signed_in(&mut s);
    webhooks_view(&mut s);
    key(&mut s, "enter");
    let feed = s.deliveries.feed;
    (s, feed)
}

#[test]
fn t_replays_the_selected_delivery() {
    let (mut s, feed) = deliveries_open();
    deliveries(
        &mut s,
        feed,
        vec![
            attempt(2, 2, Some(200), None),
            attempt(1, 1, None, Some("timeout")),
        ],
    );
    key(&mut s, "j");
    assert_eq!(
        key(&mut s, "t"),
        [Effect::ReplayDelivery {
            id: "wh_1".into(),
            delivery: "dl_1".into()
        }]
    );
    update(
        &mut s,
        Action::Replayed(Ok("replayed delivery dl_1: new delivery dl_9".into())),
        &Keymap::builtin(),
    );
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| !e && m.contains("new delivery dl_9")));
    // d shows the attempt's details.
    key(&mut s, "d");
    assert!(
        matches!(&s.overlay, Overlay::Describe(p) if p.lines.iter().any(|l| l.contains("timeout")))
    );
    key(&mut s, "esc");
    // Read-only: no replay, whatever the keymap says.
    s.read_only = true;
    assert!(!matches!(
        key(&mut s, "t")[..],
        [Effect::ReplayDelivery { .. }]
    ));
    s.read_only = false;
    s.view = View::Webhooks;
    s.read_only = true;
    for k in ["n", "e", "x", "ctrl-d"] {
        assert!(key(&mut s, k).is_empty(), "{k}");
        assert_eq!(s.overlay, Overlay::None, "{k}");
    }
}

/// Attempt `n` of delivery `dl_1`, failed at 11:00:0n, its delivery read as `state`, its next attempt at
/// `next` (UTC, today).
fn retried(seq: i64, n: i64, state: &str, next: Option<&str>) -> DeliveryRow {
    DeliveryRow::from_json(&json!({
        "seq": seq, "deliveryId": "dl_1", "eventId": "ev_1", "attempt": n,
        "event": {"scope": "endpoint.status", "action": "update"}, "namespace": "alice", "subject": "e1",
        "payload": {"event": {"scope": "endpoint.status", "action": "update"},
                    "status": {"previousState": "initializing", "state": "running"}},
        "at": format!("2026-11-22T11:00:0{n}.000Z"), "statusCode": 503, "durationMs": 12,
        "errorClass": "status", "nextAttemptAt": next.map(|t| format!("2026-11-22T{t}.000Z")),
        "manual": false, "state": state
    }))
}

#[test]
fn superseded_attempts_say_so_and_a_held_webhook_says_until_when() {
    let (mut s, feed) = deliveries_open();
    // The first attempt, read while its delivery waited for the second (due at 11:00:05, before now).
    deliveries(
        &mut s,
        feed,
        vec![retried(1, 1, "pending", Some("11:00:05"))],
    );
    let first = s.deliveries.rows[0].clone();
    assert_eq!(first.subject, "endpoint alice/e1");
    assert_eq!(first.change, "initializing → running");
    let shown = |s: &State, row: &DeliveryRow| s.deliveries.standing(row, now()).state;
    assert_eq!(shown(&s, &first), "due now");
    // The webhook is held by its circuit breaker: the overdue attempt waits for that, and says until when.
    let held = WebhookRow::from_json(&json!({"id": "wh_1", "url": "http://127.0.0.1:9/hook",
        "heldUntil": "2026-11-22T12:00:30.000Z", "failingSince": "2026-11-22T11:00:01.000Z"}));
    let answer = Action::WebhookLoaded {
        feed,
        result: Ok(held),
    };
    update(&mut s, answer, &Keymap::builtin());
    assert_eq!(shown(&s, &first), "held until 12:00:30");
    let hook = s
        .deliveries
        .hook
        .clone()
        .unwrap_or_else(|| panic!("no webhook"));
    assert!(
        hook.standing(now()).starts_with(
            "held until 12:00:30 UTC: every attempt since 11:00:01 UTC has failed, so the circuit breaker"
        ),
        "{}",
        hook.standing(now())
    );
    // Once the hold is over, it is not said any more.
    let later = now() + chrono::Duration::minutes(1);
    assert_eq!(s.deliveries.standing(&first, later).state, "due now");
    // The second attempt comes: the first is superseded by it, not pending with a past next attempt.
    deliveries(&mut s, feed, vec![retried(2, 2, "failed", None)]);
    assert_eq!(shown(&s, &first), "superseded by #2");
    assert_eq!(s.deliveries.standing(&first, now()).next, "");
    assert_eq!(shown(&s, &s.deliveries.rows[0].clone()), "failed");
    // Its details: what was sent (the payload) and what came back.
    key(&mut s, "j");
    key(&mut s, "d");
    let Overlay::Describe(p) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    let text = p.lines.join("\n");
    for want in [
        "about      endpoint alice/e1: initializing → running",
        "now        superseded by #2",
        "the request sent\nPOST http://127.0.0.1:9/hook",
        "webhook-id: ev_1",
        "\"previousState\": \"initializing\"",
        "the answer\nstatus     503",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

fn notification(seq: i64, kind: &str, title: &str) -> NotificationRow {
    NotificationRow::from_json(&json!({
        "seq": seq, "at": "2026-11-22T12:00:00Z", "kind": kind, "namespace": "alice",
        "subject": "e1", "title": title, "message": null
    }))
}

#[test]
fn notifications_follow_from_sign_in_and_update_the_status_line() {
    let mut s = state();
    let fx = update(
        &mut s,
        Action::SignedIn(Ok(("alice".into(), vec![]))),
        &Keymap::builtin(),
    );
    assert!(fx.contains(&Effect::FollowNotifications {
        after: None,
        wait: 0,
        delay: 0
    }));
    // The first page is history: listed, not announced.
    let fx = update(
        &mut s,
        Action::NotificationsLoaded(Ok(vec![notification(
            1,
            "endpoint.running",
            "endpoint e0 is running",
        )])),
        &Keymap::builtin(),
    );
    assert_eq!(
        fx,
        [Effect::FollowNotifications {
            after: Some(1),
            wait: LONG_POLL_WAIT,
            delay: 0
        }]
    );
    assert_eq!(s.notice, None);
    // A new one: the status line says it.
    update(
        &mut s,
        Action::NotificationsLoaded(Ok(vec![notification(
            2,
            "endpoint.running",
            "endpoint e1 is running",
        )])),
        &Keymap::builtin(),
    );
    assert_eq!(s.notice, Some(("endpoint e1 is running".into(), false)));
    update(
        &mut s,
        Action::NotificationsLoaded(Ok(vec![
            notification(3, "endpoint.failed", "endpoint e1 failed"),
            notification(4, "webhook.disabled", "webhook disabled"),
        ])),
        &Keymap::builtin(),
    );
    assert_eq!(
        s.notice,
        Some(("webhook disabled (+1 more: :notifications)".into(), true))
    );
    // :notifications lists them, newest at the top; no second poll while one is under way.
    key(&mut s, ":");
    typed(&mut s, "notifications");
    assert!(key(&mut s, "enter").is_empty());
    assert_eq!(s.view, View::Notifications);
    let seqs: Vec<i64> = s
        .visible()
        .iter()
        .map(|&i| s.notifications.rows[i].seq)
        .collect();
    assert_eq!(seqs, [4, 3, 2, 1]);
    // A failed poll is tried again, backing off, without a word.
    let fx = update(
        &mut s,
        Action::NotificationsLoaded(Err(NotificationsFailure::Failed("503".into()))),
        &Keymap::builtin(),
    );
    assert!(matches!(
        &fx[..],
        [Effect::FollowNotifications {
            after: Some(4),
            delay: 1,
            ..
        }]
    ));
    assert!(s.message.is_none());
}

#[test]
fn an_older_server_without_notifications_turns_them_off_silently() {
    let mut s = state();
    signed_in(&mut s);
    let fx = update(
        &mut s,
        Action::NotificationsLoaded(Err(NotificationsFailure::Unsupported)),
        &Keymap::builtin(),
    );
    assert!(fx.is_empty());
    assert!(s.notifications.unsupported);
    assert!(s.message.is_none() && s.notice.is_none());
    // Signing in again (a retry) does not start it again; another server does.
    signed_in(&mut s);
    assert!(!s.notifications.polling);
    key(&mut s, ":");
    typed(&mut s, "server http://127.0.0.1:9");
    key(&mut s, "enter");
    let fx = update(
        &mut s,
        Action::SignedIn(Ok(("alice".into(), vec![]))),
        &Keymap::builtin(),
    );
    assert!(fx
        .iter()
        .any(|e| matches!(e, Effect::FollowNotifications { after: None, .. })));
}

/// A server on the store at `address`, as the admin API lists it.
fn server(address: &str, standing: &str, leader: bool) -> ServerRow {
    ServerRow::from_json(&json!({
        "id": format!("node-{address}"), "address": address,
        "publicUrl": format!("http://{address}"), "version": "0.1.0",
        "startedAt": "2026-11-22T11:00:00Z", "lastHeartbeat": "2026-11-22T11:59:58Z",
        "state": standing, "leader": leader
    }))
}

/// The answer to a read of the servers on the store.
fn servers_loaded(s: &mut State, result: Result<Vec<ServerRow>, LoadFailure>) -> Vec<Effect> {
    update(s, Action::ServersLoaded(result), &Keymap::builtin())
}

#[test]
fn the_servers_are_read_every_few_seconds_and_a_failed_read_keeps_them() {
    let mut s = state();
    let fx = update(
        &mut s,
        Action::SignedIn(Ok(("alice".into(), vec![]))),
        &Keymap::builtin(),
    );
    assert!(fx.contains(&Effect::LoadServers { delay: 0 }));
    let three = vec![
        server("127.0.0.1:8080", "running", true),
        server("127.0.0.1:8081", "running", false),
        server("127.0.0.1:8082", "notAnswering", false),
    ];
    s.dirty = false;
    let every = SERVERS_EVERY;
    let fx = servers_loaded(&mut s, Ok(three.clone()));
    assert_eq!(fx, [Effect::LoadServers { delay: every }]);
    assert_eq!(s.servers.rows, three);
    assert!(s.dirty);
    assert!(s.servers.rows[2].not_answering());
    assert!(!s.servers.rows[1].not_answering());
    // The same list again needs no frame.
    s.dirty = false;
    servers_loaded(&mut s, Ok(three.clone()));
    assert!(!s.dirty);
    // A failed read keeps the list and is tried again, backing off, without a word.
    let mut delays = Vec::new();
    for _ in 0..5 {
        let fx = servers_loaded(&mut s, Err(LoadFailure::Failed("503".into())));
        if let [Effect::LoadServers { delay }] = fx.as_slice() {
            delays.push(*delay);
        }
    }
    assert_eq!(delays, [every, every, every, 8, 16]);
    assert_eq!(s.servers.rows, three);
    assert!(s.message.is_none() && !s.dirty);
    // No second read while one is under way: signing in again (a retry) starts none.
    let fx = update(
        &mut s,
        Action::SignedIn(Ok(("alice".into(), vec![]))),
        &Keymap::builtin(),
    );
    assert!(!fx.iter().any(|e| matches!(e, Effect::LoadServers { .. })));
}

#[test]
fn a_user_who_may_not_read_the_servers_is_not_asked_again() {
    let mut s = state();
    signed_in(&mut s);
    let two = vec![
        server("127.0.0.1:8080", "running", true),
        server("127.0.0.1:8081", "running", false),
    ];
    servers_loaded(&mut s, Ok(two));
    // Not an instance administrator (403): nothing more is asked, nothing is shown and nothing is said.
    s.dirty = false;
    let refused = LoadFailure::Forbidden("403 instance administrators only".into());
    assert!(servers_loaded(&mut s, Err(refused)).is_empty());
    assert!(s.servers.refused && s.servers.rows.is_empty());
    assert!(s.dirty);
    assert!(s.message.is_none() && s.notice.is_none());
    // Signing in again does not start the reads again; another server does.
    signed_in(&mut s);
    assert!(!s.servers.polling);
    key(&mut s, ":");
    typed(&mut s, "server http://127.0.0.1:9");
    key(&mut s, "enter");
    assert!(!s.servers.refused);
    let fx = update(
        &mut s,
        Action::SignedIn(Ok(("alice".into(), vec![]))),
        &Keymap::builtin(),
    );
    assert!(fx.contains(&Effect::LoadServers { delay: 0 }));
}

#[test]
fn editors_and_forms_take_their_keys_from_the_keymap() {
    use crate::keymap::Context;
    let user = "[[binding]]\ncontext = \"schedule\"\nkeys = [\"+\"]\naction = \"add-entry\"\ndescription = \"add\"\n";
    let (map, problems) = Keymap::with_overrides(Some(user));
    assert!(problems.is_empty(), "{problems:?}");
    let press = |s: &mut State, k: &str| update(s, Action::Key(Key(k.into())), &map);
    let mut s = state();
    signed_in(&mut s);
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    press(&mut s, "s");
    assert_eq!(s.context(), Context::Schedule);
    let entries = |s: &State| match &s.overlay {
        Overlay::Schedule(e) => e.entries.len(),
        _ => usize::MAX,
    };
    // `a` is no longer bound (and types nothing into a time); the user's `+` adds.
    press(&mut s, "a");
    assert_eq!(entries(&s), 0);
    press(&mut s, "+");
    assert_eq!(entries(&s), 1);
    press(&mut s, "esc");
    assert_eq!(s.overlay, Overlay::None);
    // A form: what the context does not bind is typed into the field; help has a context of its own.
    s.view = View::Webhooks;
    key(&mut s, "n");
    assert_eq!(s.context(), Context::Form);
    typed(&mut s, "q?j");
    assert!(matches!(&s.overlay, Overlay::Webhook(f) if f.url == "q?j"));
    key(&mut s, "esc");
    key(&mut s, "?");
    assert_eq!(s.context(), Context::Help);
}

/// What `GET /api/v1/engines` answers: `recipe` runs (or would with `minilm` installed), and an install.
fn engines_answer(runs: bool, install: Option<serde_json::Value>) -> EngineMarks {
    let recipe = if runs {
        json!({"runs": true, "source": "installed", "engine": "minilm"})
    } else {
        json!({"runs": false, "install": "minilm", "message": "run `switchyard engines install minilm`"})
    };
    let mut minilm = json!({"name": "minilm", "state": "notInstalled"});
    if let Some(i) = install {
        minilm["install"] = i;
    }
    EngineMarks::from_json(&json!({"engines": [minilm], "recipes": {"m-cpu-tei": recipe}}))
}

fn engines_loaded(s: &mut State, polled: bool, marks: EngineMarks) -> Vec<Effect> {
    let result = Ok(marks);
    update(
        s,
        Action::EnginesLoaded { polled, result },
        &Keymap::builtin(),
    )
}

#[test]
fn a_deploy_whose_engine_is_missing_offers_it_and_the_install_is_followed() {
    let mut s = state();
    signed_in(&mut s);
    let row = CatalogRow::from_json(&json!({"repoId": "org/m", "modelName": "m",
        "recipes": [{"publicId": "m-cpu-tei", "accelerator": "cpu", "engineType": "tei"}]}));
    let seq = s.catalog_seq;
    update(
        &mut s,
        Action::CatalogLoaded(seq, Ok(vec![row])),
        &Keymap::builtin(),
    );
    assert!(engines_loaded(&mut s, false, engines_answer(false, None)).is_empty());
    assert_eq!(s.engines.model_mark(&s.catalog[0]), Runs::AfterInstall);
    key(&mut s, "D");
    let fx = key(&mut s, "enter");
    assert!(matches!(&fx[..], [Effect::Deploy(_)]), "{fx:?}");
    update(
        &mut s,
        Action::Deployed(Ok("alice/m".into())),
        &Keymap::builtin(),
    );
    let asked = Effect::InstallEngine {
        name: "minilm".into(),
        endpoint: "alice/m".into(),
    };
    assert_eq!(
        s.overlay,
        Overlay::Confirm {
            asked: asked.clone(),
            yes: false
        }
    );
    key(&mut s, "tab");
    assert_eq!(key(&mut s, "enter"), [asked]);
    let polled = Effect::LoadEngines {
        delay: 1,
        polled: true,
    };
    let fx = update(
        &mut s,
        Action::EngineInstallStarted(Ok("minilm".into())),
        &Keymap::builtin(),
    );
    assert_eq!(fx, std::slice::from_ref(&polled));
    // Its progress in the status line, a poll a second, until it ends.
    let running = json!({"percent": 45, "step": "downloading numpy (5/27)", "running": true});
    assert_eq!(
        engines_loaded(&mut s, true, engines_answer(false, Some(running))),
        [polled]
    );
    assert_eq!(
        s.message,
        Some((
            "installing minilm: 45% downloading numpy (5/27)".into(),
            false
        ))
    );
    let done = json!({"percent": 100, "step": "installed", "running": false});
    assert!(engines_loaded(&mut s, true, engines_answer(true, Some(done))).is_empty());
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| m.starts_with("minilm is installed") && !e));
    assert_eq!(s.engines.model_mark(&s.catalog[0]), Runs::Here);

    // A model that runs here deploys without an offer.
    key(&mut s, "D");
    key(&mut s, "enter");
    update(
        &mut s,
        Action::Deployed(Ok("alice/m-2".into())),
        &Keymap::builtin(),
    );
    assert_eq!(s.overlay, Overlay::None);
}

#[test]
fn a_failed_install_is_said_and_the_following_stops() {
    let mut s = state();
    signed_in(&mut s);
    update(
        &mut s,
        Action::EngineInstallStarted(Ok("minilm".into())),
        &Keymap::builtin(),
    );
    // It failed before the first poll (no Python here): the first answer already has the end.
    let failed = json!({"percent": 0, "step": "failed", "running": false,
                        "error": "the package registry could not be reached"});
    assert!(engines_loaded(&mut s, true, engines_answer(false, Some(failed))).is_empty());
    assert_eq!(
        s.message,
        Some((
            "installing minilm failed: the package registry could not be reached".into(),
            true
        ))
    );
    // A refused install (not an administrator) is said at once.
    let refused = Action::EngineInstallStarted(Err("403: needs an instance administrator".into()));
    assert!(update(&mut s, refused, &Keymap::builtin()).is_empty());
    assert!(s
        .message
        .as_ref()
        .is_some_and(|(m, e)| m.contains("403") && *e));
}

#[test]
fn describe_reads_the_replicas_and_shows_them_where_the_reader_was() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    let effects = key(&mut s, "enter");
    assert_eq!(
        effects,
        [
            Effect::LoadReplicas {
                namespace: "alice".into(),
                name: "alpha".into()
            },
            Effect::LoadAnalytics {
                namespace: "alice".into(),
                name: "alpha".into(),
                range: ChartRange::Hour,
                from: s.now - chrono::Duration::hours(1),
            }
        ]
    );
    let Overlay::Describe(pager) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert!(pager.lines.iter().any(|l| l.contains("(reading…)")));
    if let Overlay::Describe(p) = &mut s.overlay {
        p.top = 3;
    }
    s.dirty = false;
    let replica = crate::state::ReplicaLoad {
        id: "alpha-1".into(),
        in_flight: 2,
        queue: Some(4.0),
        kv_cache: Some(0.5),
    };
    let loaded = Action::ReplicasLoaded {
        namespace: "alice".into(),
        name: "alpha".into(),
        result: Ok(vec![replica]),
    };
    update(&mut s, loaded, &Keymap::builtin());
    assert!(s.dirty, "drawn again");
    let Overlay::Describe(pager) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert_eq!(pager.top, 3);
    let line = pager.lines.iter().find(|l| l.starts_with("alpha-1"));
    assert!(
        line.is_some_and(|l| l.contains(" 4 ") && l.ends_with("50%")),
        "{:?}",
        pager.lines
    );
}

/// The charts' answer for alice/alpha over `range`, with one decision.
fn charts_loaded(range: ChartRange, rps: f64) -> Action {
    let series = serde_json::json!({"from": "2026-11-22T11:00:00Z", "to": "2026-11-22T12:00:00Z",
        "points": [{"requestsPerSecond": rps, "errors": 0, "latencyMs": {"p95": 40.0}, "readyReplicas": 1.0}]});
    let decisions = serde_json::json!({"items": [{"at": "2026-11-22T11:30:00Z", "kind": "scaledUp",
        "reason": "pendingRequests 3 is above its threshold 1.5", "from": 1, "to": 2}]});
    let a = Analytics::from_json("alice".into(), "alpha".into(), range, &series, &decisions);
    Action::AnalyticsLoaded {
        range,
        result: Ok(a),
    }
}

#[test]
fn charts_load_once_a_bucket_draw_only_what_changed_and_cycle_their_range() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    key(&mut s, "enter");
    s.dirty = false;
    update(
        &mut s,
        charts_loaded(ChartRange::Hour, 2.0),
        &Keymap::builtin(),
    );
    assert!(s.dirty, "drawn with the charts");
    let Overlay::Describe(pager) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    assert!(pager.charts);
    assert!(
        pager
            .lines
            .iter()
            .any(|l| l
                == "↑ 11-22 11:30:00 scaled up 1→2: pendingRequests 3 is above its threshold 1.5"),
        "{:?}",
        pager.lines
    );
    // The same answer again: nothing to draw.
    s.dirty = false;
    update(
        &mut s,
        charts_loaded(ChartRange::Hour, 2.0),
        &Keymap::builtin(),
    );
    assert!(!s.dirty);
    // Within the bucket, ticks ask nothing; the next bucket loads again.
    let now = s.now;
    assert!(update(
        &mut s,
        Action::Tick(now + chrono::Duration::milliseconds(10)),
        &Keymap::builtin()
    )
    .is_empty());
    let next = now + chrono::Duration::seconds(10);
    let effects = update(&mut s, Action::Tick(next), &Keymap::builtin());
    assert!(
        matches!(
            &effects[..],
            [Effect::LoadAnalytics {
                range: ChartRange::Hour,
                ..
            }]
        ),
        "{effects:?}"
    );
    // `t`: the next range, loaded from its start.
    let effects = key(&mut s, "t");
    let day = s.now - chrono::Duration::hours(24);
    assert!(
        matches!(&effects[..], [Effect::LoadAnalytics { range: ChartRange::Day, from, .. }] if *from == day),
        "{effects:?}"
    );
    // An answer for the range left behind is dropped.
    s.dirty = false;
    update(
        &mut s,
        charts_loaded(ChartRange::Hour, 5.0),
        &Keymap::builtin(),
    );
    assert!(!s.dirty);
}

#[test]
fn the_lists_sparklines_load_when_the_terminal_is_wide_enough() {
    let mut s = state();
    s.view = View::Endpoints;
    loaded(&mut s, Ok(endpoints()));
    update(&mut s, Action::Resize(80, 24), &Keymap::builtin());
    let next = s.now + chrono::Duration::seconds(10);
    let effects = update(&mut s, Action::Tick(next), &Keymap::builtin());
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::LoadSparklines { .. })),
        "{effects:?}"
    );
    update(&mut s, Action::Resize(120, 35), &Keymap::builtin());
    let next = next + chrono::Duration::seconds(10);
    let effects = update(&mut s, Action::Tick(next), &Keymap::builtin());
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::LoadSparklines { endpoints, .. } if endpoints.len() == 3)),
        "{effects:?}"
    );
    s.dirty = false;
    let lines = vec![(("alice".to_string(), "alpha".to_string()), vec![1.0, 2.0])];
    update(
        &mut s,
        Action::SparklinesLoaded(lines.clone()),
        &Keymap::builtin(),
    );
    assert!(s.dirty);
    s.dirty = false;
    update(&mut s, Action::SparklinesLoaded(lines), &Keymap::builtin());
    assert!(!s.dirty, "the same lines: no frame");
}
