//! Whole-screen snapshots at a fixed size for each view and dialog (fixed clock, fixed data).

use chrono::TimeZone;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;
use switchyard_ui::keymap::{self, Keymap};
use switchyard_ui::state::{
    update, Action, Analytics, AppAction, AppRow, AuditRow, CatalogRow, CreatedApp, DeliveryRow,
    Effect, EndpointRow, EngineMarks, IssuedSecret, Key, LoadFailure, NotificationRow,
    SavedWebhook, Secret, ServerRow, State, WebhookRow,
};
use switchyard_ui::views;

/// A console on `server` at the fixed time, before it signs in.
fn unsigned(server: &str) -> State {
    let now = chrono::Utc
        .with_ymd_and_hms(2026, 11, 22, 12, 0, 0)
        .unwrap();
    State::new(server.into(), false, now, "/data/logs/console.log".into())
}

fn state() -> State {
    let mut s = unsigned("in-process");
    let keymap = Keymap::builtin();
    update(
        &mut s,
        Action::SignedIn(Ok(("admin".into(), vec!["acme".into()]))),
        &keymap,
    );
    let rows = catalog();
    let seq = s.catalog_seq;
    update(&mut s, Action::CatalogLoaded(seq, Ok(rows)), &keymap);
    // llama-server is on the server's PATH: the CPU llama.cpp recipe runs here, nothing else does.
    let no = |program: &str| json!({"runs": false, "message": format!("no engine for these images on this server: put {program} on the server's PATH")});
    let marks = EngineMarks::from_json(&json!({"engines": [], "recipes": {
        "qwen2.5-7b-instruct-gpu-vllm-0": no("vllm"),
        "qwen2.5-7b-instruct-cpu-llamacpp-1": {"runs": true, "source": "path", "engine": "llama-server"},
        "bge-large-en-v1.5-cpu-tei-0": no("text-embeddings-router"),
        "bge-large-en-v1.5-gpu-tei-1": no("text-embeddings-router"),
        "llama-3.1-8b-instruct-gpu-sglang-0": no("sglang"),
    }}));
    update(
        &mut s,
        Action::EnginesLoaded {
            polled: false,
            result: Ok(marks),
        },
        &keymap,
    );
    let endpoints = [("qwen", "admin", "running", 2, 2), ("embedder", "acme", "scaledToZero", 0, 0), ("broken", "acme", "failed", 0, 0)]
        .iter()
        .map(|(name, ns, st, ready, target)| {
            EndpointRow::from_json(ns, &json!({
                "name": name, "type": "authenticated", "model": {"repository": "Qwen/Qwen2.5-7B-Instruct"},
                "status": {"state": st, "readyReplica": ready, "targetReplica": target,
                           "url": format!("http://127.0.0.1:8080/endpoints/{ns}/{name}"),
                           "updatedAt": "2026-11-22T11:58:00.000Z",
                           "message": (*st == "failed").then_some(BROKEN)}
            }))
        })
        .collect();
    loaded(&mut s, Ok(endpoints));
    // There are endpoints, so the console opened on them; these screens start from the catalog.
    assert_eq!(s.view, switchyard_ui::state::View::Endpoints);
    keys(&mut s, &["tab"]);
    s
}

/// Why the failed endpoint of `state()` failed.
const BROKEN: &str =
    "replicas keep exiting: exit status 1: CUDA error: out of memory (tried to allocate 2.00 GiB)";

/// Three models: two text-generation ones on GPUs, an embedder.
fn catalog() -> Vec<CatalogRow> {
    let catalog = [
        (
            "Qwen",
            "Qwen2.5-7B-Instruct",
            "text-generation",
            "apache-2.0",
            &[("gpu", "vllm"), ("cpu", "llamacpp")][..],
        ),
        (
            "BAAI",
            "bge-large-en-v1.5",
            "feature-extraction",
            "mit",
            &[("cpu", "tei"), ("gpu", "tei")][..],
        ),
        (
            "meta-llama",
            "Llama-3.1-8B-Instruct",
            "text-generation",
            "llama3.1",
            &[("gpu", "sglang")][..],
        ),
    ];
    catalog
        .iter()
        .map(|(author, model, task, license, recipes)| {
            CatalogRow::from_json(&json!({
                "repoId": format!("{author}/{model}"), "authorName": author, "modelName": model, "task": task,
                "license": license, "createdAt": "2024-09-19T00:00:00.000Z",
                "recipes": recipes.iter().enumerate().map(|(i, (a, e))| json!({
                    "publicId": format!("{}-{a}-{e}-{i}", model.to_lowercase()), "accelerator": a, "engineType": e
                })).collect::<Vec<_>>()
            }))
        })
        .collect()
}

/// The answer to the latest endpoints load.
fn loaded(s: &mut State, rows: Result<Vec<EndpointRow>, String>) {
    let seq = s.endpoints_seq;
    update(s, Action::EndpointsLoaded(seq, rows), &Keymap::builtin());
}

fn drawn(state: &State, width: u16, height: u16) -> ratatui::buffer::Buffer {
    drawn_with(state, width, height, &Keymap::builtin())
}

fn drawn_with(state: &State, width: u16, height: u16, keymap: &Keymap) -> ratatui::buffer::Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| views::draw(f, state, keymap)).unwrap();
    terminal.backend().buffer().clone()
}

fn screen(state: &State, width: u16, height: u16) -> String {
    screen_with(state, width, height, &Keymap::builtin())
}

fn screen_with(state: &State, width: u16, height: u16, keymap: &Keymap) -> String {
    let buffer = &drawn_with(state, width, height, keymap);
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let line: String = (0..buffer.area.width)
            .map(|x| buffer[(x, y)].symbol())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `n` running endpoints in `admin`, `endpoint-000` on.
fn running_endpoints(n: usize) -> Vec<EndpointRow> {
    (0..n)
        .map(|i| {
            EndpointRow::from_json(
                "admin",
                &json!({"name": format!("endpoint-{i:03}"), "type": "public", "model": {"repository": "org/m"},
                        "status": {"state": "running", "readyReplica": 1, "targetReplica": 1}}),
            )
        })
        .collect()
}

fn keys(s: &mut State, keys: &[&str]) {
    for k in keys {
        update(s, Action::Key(Key(k.to_string())), &Keymap::builtin());
    }
}

#[test]
fn catalog_view() {
    let mut s = state();
    insta::assert_snapshot!(screen(&s, 120, 24));
    keys(&mut s, &["/", "t", "e", "i", "enter"]);
    insta::assert_snapshot!("catalog_filtered", screen(&s, 120, 24));
    keys(&mut s, &["enter"]);
    insta::assert_snapshot!("catalog_recipes", screen(&s, 120, 24));
}

/// The answer to the latest catalog load: the rows of `catalog()` that `keep` keeps.
fn catalog_loaded(s: &mut State, keep: impl Fn(&CatalogRow) -> bool) {
    let rows = catalog().into_iter().filter(keep).collect();
    let seq = s.catalog_seq;
    update(s, Action::CatalogLoaded(seq, Ok(rows)), &Keymap::builtin());
}

#[test]
fn catalog_filters_show_in_the_title_until_catalog_alone_clears_them() {
    let mut s = state();
    let want = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let filters = want(&[("task", "text-generation"), ("accelerator", "gpu")]);
    let fx = command(&mut s, "catalog task=text-generation accelerator=gpu");
    let engines = Effect::LoadEngines {
        delay: 0,
        polled: false,
    };
    let with_engines = |catalog| vec![catalog, engines.clone()];
    assert_eq!(
        fx,
        with_engines(Effect::LoadCatalog(s.catalog_seq, filters.clone()))
    );
    catalog_loaded(&mut s, |c| c.task == "text-generation");
    insta::assert_snapshot!("catalog_server_filters", screen(&s, 120, 24));
    let title = "catalog [task=text-generation accelerator=gpu] (2/2)";
    assert!(screen(&s, 80, 24).contains(title));
    // `r` reloads with them, and the title keeps them.
    let fx = update(&mut s, Action::Key(Key("r".into())), &Keymap::builtin());
    assert_eq!(
        fx,
        with_engines(Effect::LoadCatalog(s.catalog_seq, filters))
    );
    catalog_loaded(&mut s, |c| c.task == "text-generation");
    assert!(screen(&s, 120, 24).contains(title));
    // `:catalog` alone: the whole catalog, no filters.
    let fx = command(&mut s, "catalog");
    assert_eq!(
        fx,
        with_engines(Effect::LoadCatalog(s.catalog_seq, want(&[])))
    );
    catalog_loaded(&mut s, |_| true);
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("┌ catalog (3/3) ") && !text.contains("task="),
        "{text}"
    );
}

#[test]
fn endpoints_view_and_dialogs() {
    let mut s = state();
    keys(&mut s, &[":", "e", "p", "enter"]);
    insta::assert_snapshot!(screen(&s, 120, 24));
    insta::assert_snapshot!("endpoints_view_80", screen(&s, 80, 24));
    keys(&mut s, &["j", "ctrl-d"]);
    insta::assert_snapshot!("endpoints_confirm_delete", screen(&s, 120, 24));
    keys(&mut s, &["esc", "?"]);
    insta::assert_snapshot!("help", screen(&s, 120, 30));
    // On the smallest terminal the console takes, the help scrolls: page by page it shows every binding of
    // the keymap (the start of its description, on the narrow column), the commands and the log file.
    update(&mut s, Action::Resize(80, 24), &Keymap::builtin());
    let mut seen = screen(&s, 80, 24);
    for _ in 0..10 {
        keys(&mut s, &["pagedown"]);
        seen.push_str(&screen(&s, 80, 24));
    }
    assert!(
        seen.contains("esc/? close  down/j scroll down"),
        "the help's own keys in the footer: {seen}"
    );
    let keymap = Keymap::builtin();
    let descriptions = keymap::HELP_COLUMNS
        .iter()
        .flat_map(|column| column.iter())
        // As much as the narrow column has room for.
        .flat_map(|ctx| {
            keymap
                .own(*ctx, false)
                .map(|b| b.description.chars().take(14).collect())
        })
        .collect::<Vec<String>>();
    for text in descriptions.iter().map(String::as_str).chain([
        ":apps [OWNER]",
        ":audit ORG",
        ":webhooks",
        ":notifications",
        "↓/j ↑/k scroll, esc/? to close",
        "console log: /data/logs/console.log",
    ]) {
        assert!(seen.contains(text), "{text}: {seen}");
    }
    // The title names the keys of the keymap in use.
    let rebound = "[[binding]]\ncontext = \"help\"\nkeys = [\"n\"]\naction = \"down\"\ndescription = \"down\"\n";
    let (rebound, _) = Keymap::with_overrides(Some(rebound));
    let text = screen_with(&s, 80, 24, &rebound);
    assert!(
        text.contains(" help (n ↑/k scroll, esc/? to close) "),
        "{text}"
    );
}

/// The footer's keys as the keymap gives them for what is on screen now, and the view offers.
fn footer_keys(s: &State) -> String {
    Keymap::builtin()
        .offered_hints(s.context(), s.read_only, s.offered())
        .iter()
        .map(|(k, d)| format!(" {k} {d} "))
        .collect()
}

/// The status line on top, and the footer (a message line, the context's keys) at the bottom, with no popup
/// over either.
fn status_and_footer_in_sight(s: &State, width: u16, height: u16) {
    let text = screen(s, width, height);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with(" switchyard "), "{text}");
    // The footer: the keys that fit, whole, then `? more` (or `…`) when some do not.
    let keys = footer_keys(s);
    let footer = lines[lines.len() - 1];
    match footer.strip_suffix("? more").or(footer.strip_suffix('…')) {
        Some(shown) => assert!(keys.starts_with(shown), "{footer:?} of {keys:?}"),
        None => assert_eq!(footer, keys.trim_end(), "{text}"),
    }
    assert!(footer.chars().count() <= width as usize, "{footer:?}");
    for line in [lines[0], lines[lines.len() - 2], lines[lines.len() - 1]] {
        assert!(
            !line.contains(['│', '┌', '└']),
            "a popup over {line:?}:\n{text}"
        );
    }
}

#[test]
fn every_context_shows_its_own_keys_and_popups_stay_between_status_and_footer() {
    let mut s = state();
    let raw = json!({
        "name": "qwen", "type": "public", "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 0, "maxReplica": 3}},
        "model": {"repository": "Qwen/Qwen2.5-7B-Instruct", "framework": "pytorch", "image": {"hub": {}}},
        "status": {"state": "running", "readyReplica": 1, "targetReplica": 1}
    });
    let steps: [(&[&str], &str); 12] = [
        (&["D"], "enter send  esc cancel"),
        (&["esc", "tab"], "describe"),
        (&["e"], "ctrl-s save (when valid)"),
        (&["esc", "s"], "a add entry"),
        (&["esc", "p"], "switch button"),
        (&["esc", "d"], "/ search"),
        (&["esc", "l"], "space pause/follow"),
        (&["esc", "?"], "esc/? close"),
        // No webhooks yet: only a new one is offered.
        (&["esc", ":", "w", "h", "enter"], "n new webhook"),
        (&["n"], "enter send"),
        (&["esc", ":", "a", "p", "p", "s", "enter"], "new app"),
        (&["tab"], "D deploy"),
    ];
    for (i, (pressed, shown)) in steps.iter().enumerate() {
        keys(&mut s, pressed);
        if i == 1 {
            loaded(&mut s, Ok(vec![EndpointRow::from_json("admin", &raw)]));
        }
        for (width, height) in [(80, 24), (120, 30)] {
            update(&mut s, Action::Resize(width, height), &Keymap::builtin());
            status_and_footer_in_sight(&s, width, height);
        }
        assert!(
            footer_keys(&s).contains(shown),
            "{pressed:?}: {}",
            footer_keys(&s)
        );
    }
    // Inside an editor the endpoint list's keys are gone from the footer.
    keys(&mut s, &["tab", "e"]);
    assert!(!screen(&s, 120, 30).contains("scale to zero"));
}

#[test]
fn endpoint_columns_share_the_width_by_importance_and_names_sort_naturally() {
    let mut s = state();
    keys(&mut s, &["tab"]);
    let rows = [
        ("e-10", "admin"),
        ("e-2", "admin"),
        ("llama-chat-assistant-prod", "acme"),
    ]
    .iter()
    .map(|(name, ns)| {
        EndpointRow::from_json(
            ns,
            &json!({
                "name": name, "type": "authenticated",
                "model": {"repository": "meta-llama/Llama-3.1-8B-Instruct"},
                "status": {"state": "initializing", "readyReplica": 0, "targetReplica": 1,
                           "url": format!("https://switchyard.example.com/endpoints/{ns}/{name}"),
                           "updatedAt": "2026-11-22T11:58:00.000Z"}
            }),
        )
    })
    .collect();
    loaded(&mut s, Ok(rows));
    insta::assert_snapshot!("endpoint_columns_80", screen(&s, 80, 24));
    insta::assert_snapshot!("endpoint_columns_120", screen(&s, 120, 24));
    // At 80 columns the name and the model are whole; the URL, when shown, keeps the endpoint's name.
    let text = screen(&s, 80, 24);
    let at = |name: &str| text.find(&format!("│{name} ")).unwrap_or(usize::MAX);
    assert!(at("e-2") < at("e-10"), "{text}");
    for want in [
        "meta-llama/Llama-3.1-8B-Instruct",
        "llama-chat-assistant-prod",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let text = screen(&s, 120, 24);
    for want in ["…/llama-chat-assistant-prod", "…/endpoints/admin/e-10"] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

#[test]
fn why_an_endpoint_failed_under_the_list_and_at_the_top_of_describe() {
    let mut s = state();
    keys(&mut s, &["tab", "j"]);
    insta::assert_snapshot!("endpoints_why_80", screen(&s, 80, 24));
    let text = screen(&s, 120, 24);
    assert!(
        text.contains(&format!(" acme/broken failed: {BROKEN}")),
        "{text}"
    );
    assert_eq!(
        colour_of(&s, 120, 24, "failed: "),
        ratatui::style::Color::Red
    );
    // Describe leads with a summary; the whole resource follows.
    let raw = json!({
        "name": "broken", "type": "public",
        "compute": {"accelerator": "gpu", "instanceType": "nvidia-l4", "instanceSize": "x1",
                    "scaling": {"minReplica": 0, "maxReplica": 2, "scaleToZeroTimeout": 30, "schedule": [
                        {"at": "08:00", "minReplica": 1, "maxReplica": 2},
                        {"at": "20:00", "minReplica": 0, "maxReplica": 1}]}},
        "model": {"repository": "Qwen/Qwen2.5-7B-Instruct", "framework": "pytorch", "image": {"vllm": {}}},
        "status": {"state": "failed", "readyReplica": 0, "targetReplica": 1, "message": BROKEN,
                   "url": "http://127.0.0.1:8080/endpoints/acme/broken", "updatedAt": "2026-11-22T11:58:00.000Z"}
    });
    loaded(&mut s, Ok(vec![EndpointRow::from_json("acme", &raw)]));
    update(&mut s, Action::Resize(120, 30), &Keymap::builtin());
    keys(&mut s, &["enter"]);
    // Its replicas, with their engines' load, as the server's answer gives them.
    let replicas = json!({"items": [
        {"id": "broken-1a2b3c4d", "address": "10.0.0.5:80", "inFlight": 3, "queue": 2.0, "kvCache": 0.41},
        {"id": "broken-5e6f7a8b", "address": "10.0.0.6:80", "inFlight": 0, "queue": null, "kvCache": null}
    ]});
    let result = Ok(switchyard_ui::state::ReplicaLoad::list_from_json(&replicas));
    let (namespace, name) = ("acme".to_string(), "broken".to_string());
    update(
        &mut s,
        Action::ReplicasLoaded {
            namespace,
            name,
            result,
        },
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("describe_summary", screen(&s, 120, 30));
    let text = screen(&s, 120, 30);
    for want in [
        "broken-1a2b3c4d                          3      2      41%",
        "broken-5e6f7a8b                          0      -        -",
        "state      failed",
        &format!("why        {BROKEN}"),
        "replicas   0 ready of 1 wanted",
        "model      Qwen/Qwen2.5-7B-Instruct (image: vllm)",
        "scaling    min 0 · max 2 · scales to zero after 30 min idle",
        "schedule   entry 1 of 2 in effect now (from 08:00 UTC): min 1 · max 2",
        "the whole resource:",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// The logs of the selected endpoint answered with `text`.
fn logs_loaded(s: &mut State, text: &str) {
    let Some((namespace, name)) = (match &s.overlay {
        switchyard_ui::state::Overlay::Logs {
            namespace, name, ..
        } => Some((namespace.clone(), name.clone())),
        _ => None,
    }) else {
        panic!("no logs open: {:?}", s.overlay)
    };
    let text = Ok(text.to_string());
    let answer = Action::LogsLoaded {
        namespace,
        name,
        text,
    };
    update(s, answer, &Keymap::builtin());
}

#[test]
fn empty_logs_say_why() {
    let mut s = state();
    // Sorted: qwen (admin), broken and embedder (acme).
    keys(&mut s, &["tab", "j", "j", "l"]);
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("(no replicas are running: the endpoint is scaledToZero)"),
        "{text}"
    );
    logs_loaded(&mut s, "");
    insta::assert_snapshot!("logs_without_replicas_80", screen(&s, 80, 24));
    keys(&mut s, &["esc", "k", "l"]);
    logs_loaded(&mut s, "");
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("(no replicas are running: the endpoint is failed)")
            && text.contains(&format!("(why: {BROKEN})")),
        "{text}"
    );
    keys(&mut s, &["esc", "k", "l"]);
    logs_loaded(&mut s, "\n");
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("(waiting for output: 2 replica(s) running, none has printed anything yet)"),
        "{text}"
    );
    logs_loaded(&mut s, "2026-11-22T11:59:00Z r1 stdout ready");
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("r1 stdout ready") && !text.contains("waiting for output"),
        "{text}"
    );
}

#[test]
fn a_refused_token_is_said_and_the_public_catalog_still_shown() {
    let mut s = unsigned("https://switchyard.example.com");
    let now = s.now;
    let refused =
        switchyard_ui::state::SignInFailure::Refused("401 invalid or expired token".into());
    let fx = update(&mut s, Action::SignedIn(Err(refused)), &Keymap::builtin());
    assert_eq!(fx, [Effect::LoadCatalog(s.catalog_seq, Vec::new())]);
    catalog_loaded(&mut s, |_| true);
    insta::assert_snapshot!("sign_in_refused_catalog", screen(&s, 120, 24));
    let text = screen(&s, 80, 24);
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains("sign-in failed (401") && l.ends_with("12:00 UTC"))
            && text.contains("sign-in failed: 401 invalid or expired token; the public catalog is")
            && text.contains("catalog (3/3)"),
        "{text}"
    );
    keys(&mut s, &["tab"]);
    insta::assert_snapshot!("sign_in_refused_endpoints_80", screen(&s, 80, 24));
    // Nothing is asked of the server every second for it: `r` signs in again.
    assert!(update(&mut s, Action::Tick(now), &Keymap::builtin()).is_empty());
    let fx = update(&mut s, Action::Key(Key("r".into())), &Keymap::builtin());
    assert_eq!(fx, [Effect::SignIn]);
}

#[test]
fn read_only_and_small_terminals() {
    let mut s = state();
    s.read_only = true;
    keys(&mut s, &["tab"]);
    let text = screen(&s, 120, 24);
    assert!(text.contains("read-only"));
    assert!(!text.contains("delete"), "{text}");
    insta::assert_snapshot!("too_small", screen(&s, 60, 20));
}

#[test]
fn the_console_docs_keymap_table_is_generated_from_the_keymap() {
    let readme = include_str!("../../../docs/console.md");
    let sheet = Keymap::builtin().cheat_sheet();
    assert!(
        readme.contains(&sheet),
        "docs/console.md's keymap table is out of date: paste `switchyard keys`:\n{sheet}"
    );
}

#[test]
fn long_lists_scroll_to_the_selection() {
    let mut s = state();
    let rows = running_endpoints(100);
    keys(&mut s, &["tab"]);
    loaded(&mut s, Ok(rows));
    let top = screen(&s, 120, 24);
    assert!(
        top.contains("endpoint-000") && !top.contains("endpoint-099"),
        "{top}"
    );
    keys(&mut s, &["G"]);
    let bottom = screen(&s, 120, 24);
    assert!(
        bottom.contains("endpoint-099") && !bottom.contains("endpoint-000"),
        "{bottom}"
    );
    assert!(bottom.contains("endpoints (100/100)"));
}

#[test]
fn deploy_form_with_the_servers_issues() {
    let mut s = state();
    keys(&mut s, &["D", "down", "down"]);
    for c in "Bad_Name".chars() {
        keys(&mut s, &[&c.to_string()]);
    }
    let fx = update(&mut s, Action::Key(Key("enter".into())), &Keymap::builtin());
    assert_eq!(fx.len(), 1);
    // Every issue of the answer at once, each beside its field; one about no field under the form.
    let issue = |path: &str, message: &str| (path.to_string(), message.to_string());
    update(
        &mut s,
        Action::Deployed(Err((
            "invalid request body: config.name: … (and 3 more)".into(),
            vec![
                issue(
                    "config.name",
                    "may contain only lowercase letters, digits and `-`",
                ),
                issue(
                    "config.scaling.maxReplica",
                    "must be at least minReplica (2)",
                ),
                issue(
                    "config.privateService",
                    "is required when type is `private`",
                ),
                issue("accelerator", "no recipe of this model runs on neuron"),
            ],
        ))),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("deploy_form_issues", screen(&s, 120, 24));
    insta::assert_snapshot!("deploy_form_issues_80", screen(&s, 80, 24));
    update(
        &mut s,
        Action::Deployed(Ok("admin/qwen".into())),
        &Keymap::builtin(),
    );
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("deployed admin/qwen") && text.contains("endpoints ("),
        "{text}"
    );
}

/// The deploy form's two notification switches (push on by default): a deploy body has no place for them, so
/// the endpoint's `notifications` are set by an update once it is made, and the answer is told with the
/// deploy.
#[test]
fn the_deploy_form_sets_the_endpoints_notifications() {
    let mut s = state();
    keys(&mut s, &["D"]);
    for width in [120, 80] {
        let text = screen(&s, width, 24);
        assert!(
            text.contains("notify me here (push)     yes")
                && text.contains("notify me by mail         no"),
            "{text}"
        );
    }
    // Down to the mail switch: `y` turns it on.
    for _ in 0..10 {
        keys(&mut s, &["down"]);
    }
    keys(&mut s, &["y", "enter"]);
    let fx = update(
        &mut s,
        Action::Deployed(Ok("admin/qwen".into())),
        &Keymap::builtin(),
    );
    let patch = json!({"notifications": {"push": true, "email": true}});
    let set = Effect::Update {
        namespace: "admin".into(),
        name: "qwen".into(),
        patch,
    };
    assert!(fx.contains(&set), "{fx:?}");
    let saved = Action::Saved {
        namespace: "admin".into(),
        name: "qwen".into(),
        result: Ok(String::new()),
    };
    update(&mut s, saved, &Keymap::builtin());
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("deployed admin/qwen; its notifications are on"),
        "{text}"
    );
}

/// With a token that may not manage apps (an app's token, a restricted one), `:apps` says what would do, and
/// offers nothing it cannot do.
#[test]
fn apps_refused_for_this_token_say_what_to_use() {
    let mut s = state();
    command(&mut s, "apps");
    let seq = s.apps_seq;
    let refused =
        LoadFailure::Forbidden("managing OAuth apps needs an unrestricted personal token".into());
    update(
        &mut s,
        Action::AppsLoaded(seq, Err(refused)),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("apps_refused_80", screen(&s, 80, 24));
    let text = screen(&s, 120, 24);
    for want in [
        "managing OAuth apps needs an unrestricted personal token",
        "switchyard admin --data-dir DIR token create NAME",
        ":server URL TOKEN",
    ] {
        assert!(joined(&text).contains(want), "{want}: {text}");
    }
    let footer = text.lines().last().unwrap_or_default();
    for hidden in ["new app", "new secret", "delete secret", "delete app"] {
        assert!(!footer.contains(hidden), "{hidden}: {footer}");
    }
    // The key does nothing but say why.
    keys(&mut s, &["n"]);
    assert_eq!(s.overlay, switchyard_ui::state::Overlay::None);
    let message = s.message.clone().unwrap_or_default();
    assert!(
        message.1 && message.0.contains("unrestricted personal token"),
        "{message:?}"
    );
}

/// A new webhook's signing secret shows once, in a popup that says so, as an app's secret does.
#[test]
fn a_new_webhooks_signing_secret_is_shown_once() {
    let mut s = state();
    webhooks_shown(&mut s);
    keys(&mut s, &["n"]);
    typed(&mut s, "http://127.0.0.1:9/new");
    keys(&mut s, &["enter"]);
    let saved = SavedWebhook {
        id: "wh_9".into(),
        url: "http://127.0.0.1:9/new".into(),
        signing_secret: Some(Secret::new(SIGNING.into())),
    };
    update(&mut s, Action::WebhookSaved(Ok(saved)), &Keymap::builtin());
    insta::assert_snapshot!("webhook_signing_secret_80", screen(&s, 80, 24));
    let text = screen(&s, 120, 24);
    for want in [
        SIGNING,
        "signing secret of webhook http://127.0.0.1:9/new (shown once)",
        "It will not be shown here again",
        "switchyard webhooks signing-secret wh_9",
    ] {
        assert!(joined(&text).contains(want), "{want}: {text}");
    }
    assert!(!format!("{s:?}").contains(SIGNING), "never in a log line");
    keys(&mut s, &["esc"]);
    assert!(!screen(&s, 120, 24).contains(SIGNING));
    assert!(!format!("{s:?}").contains("whsec_"));
}

const SIGNING: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A server that is not there is said whole (not the client's raw error), in the view that would show its
/// list: `:audit` after a failed `:server` switch shows why, not an empty table.
#[test]
fn an_unreachable_server_is_said_whole_in_place_of_the_list() {
    let mut s = state();
    command(&mut s, "server http://127.0.0.1:1");
    let why = "nothing answers at http://127.0.0.1:1 (Connection refused (os error 111))";
    let lost = switchyard_ui::state::SignInFailure::Unreachable(why.into());
    update(&mut s, Action::SignedIn(Err(lost)), &Keymap::builtin());
    command(&mut s, "audit acme");
    let seq = s.audit_seq;
    let failed = LoadFailure::Failed(why.into());
    update(
        &mut s,
        Action::AuditLoaded(seq, Err(failed)),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("unreachable_audit_80", screen(&s, 80, 24));
    // Whole, wrapped in the view at 80 columns; the status line keeps the user and the clock.
    let text = screen(&s, 80, 24);
    assert!(joined(&text).contains(why), "{text}");
    assert!(!text.contains("0/0"), "{text}");
    assert!(
        text.lines().next().is_some_and(|l| l.ends_with("UTC")),
        "{text}"
    );
    // The endpoints and the catalog say the same while they have nothing to show.
    keys(&mut s, &["tab"]);
    let text = joined(&screen(&s, 120, 24));
    assert!(
        text.contains(&format!("Cannot reach http://127.0.0.1:1: {why}")),
        "{text}"
    );
}

/// The notifications view says why it is empty, and whether anything will come.
#[test]
fn empty_notifications_say_why() {
    let mut s = state();
    update(
        &mut s,
        Action::NotificationsLoaded(Ok(Vec::new())),
        &Keymap::builtin(),
    );
    command(&mut s, "notifications");
    insta::assert_snapshot!("notifications_empty_80", screen(&s, 80, 24));
    let text = joined(&screen(&s, 120, 24));
    assert!(
        text.contains("none will come as things are: an endpoint notifies only when its spec has notifications.push, and none of yours has it"),
        "{text}"
    );
}

/// Long lines of a pane wrap; `w` cuts them instead (with `…` where they go on) and `←`/`→` scroll sideways.
#[test]
fn long_pane_lines_wrap_or_scroll_sideways() {
    let mut s = state();
    update(&mut s, Action::Resize(80, 24), &Keymap::builtin());
    keys(&mut s, &["tab", "l"]);
    let long = format!("2026-11-22T11:59:00Z r1 stdout {} END", "token ".repeat(30));
    logs_loaded(&mut s, &long);
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("END") && text.contains("2026-11-22T11:59:00Z r1"),
        "{text}"
    );
    keys(&mut s, &["w"]);
    let cut = screen(&s, 80, 24);
    assert!(
        cut.contains("long lines cut") && !cut.contains("END"),
        "{cut}"
    );
    assert!(cut.lines().any(|l| l.contains("token …│")), "{cut}");
    keys(
        &mut s,
        &[
            "right", "right", "right", "right", "right", "right", "right", "right",
        ],
    );
    let right = screen(&s, 80, 24);
    assert!(right.contains("END") && right.contains("│…"), "{right}");
}

/// At 80 columns the help is one column: every binding whole or cut with `…`, none running into another.
#[test]
fn the_help_is_one_column_when_narrow() {
    let mut s = state();
    update(&mut s, Action::Resize(80, 24), &Keymap::builtin());
    keys(&mut s, &["?"]);
    insta::assert_snapshot!("help_80", screen(&s, 80, 24));
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("  y                  copy (URL, id)"),
        "{text}"
    );
    assert!(!text.contains("catalog   "), "no second column: {text}");
}

#[test]
fn schedule_editor() {
    let mut s = state();
    let raw = json!({
        "name": "qwen", "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 0, "maxReplica": 3, "schedule": [
                        {"at": "08:00", "minReplica": 2, "maxReplica": 3},
                        {"at": "20:00", "minReplica": 0, "maxReplica": 1, "scaleToZeroTimeout": 5}]}},
        "model": {"repository": "Qwen/Qwen2.5-7B-Instruct", "framework": "pytorch", "image": {"hub": {}}},
        "status": {"state": "running", "readyReplica": 2, "targetReplica": 2, "updatedAt": "2026-11-22T11:58:00.000Z"}
    });
    keys(&mut s, &["tab"]);
    loaded(&mut s, Ok(vec![EndpointRow::from_json("admin", &raw)]));
    keys(&mut s, &["s"]);
    insta::assert_snapshot!("schedule_editor", screen(&s, 120, 30));
    // `▶` follows the entry edited; the one in effect now (12:00: the 08:00 one) keeps its own mark.
    keys(&mut s, &["down"]);
    insta::assert_snapshot!("schedule_editor_second_entry", screen(&s, 80, 24));
    let text = screen(&s, 120, 30);
    let line = |start: &str| text.lines().find(|l| l.contains(start)).unwrap_or("");
    assert!(line("1  08:00").contains("● in effect now"), "{text}");
    assert!(text.contains("▶ 2  20:00▏"), "{text}");
    assert!(!text.contains("no entries"), "{text}");
    // An entry whose maximum is above the endpoint's: the rule's message beside it, and no save.
    keys(&mut s, &["tab", "tab", "backspace", "7", "enter"]);
    let text = screen(&s, 120, 30);
    assert!(
        text.contains("maxReplica: must be at most the endpoint's maxReplica (3)"),
        "{text}"
    );
    keys(&mut s, &["backspace", "1"]);
    let fx = update(&mut s, Action::Key(Key("enter".into())), &Keymap::builtin());
    assert_eq!(fx.len(), 1, "{fx:?}");
    // Without entries the head says so, and whose values apply.
    keys(&mut s, &["esc"]);
    let mut raw = raw;
    raw["compute"]["scaling"]["schedule"] = json!(null);
    loaded(&mut s, Ok(vec![EndpointRow::from_json("admin", &raw)]));
    keys(&mut s, &["s"]);
    let text = screen(&s, 120, 30);
    assert!(
        text.contains("no entries: the endpoint's own values (min 0 max 3) apply all day")
            && !text.contains("▶"),
        "{text}"
    );
    // How to add one, named by the key it is on in the keymap in use.
    assert!(
        text.contains("(the schedule is empty: `a` adds an entry)"),
        "{text}"
    );
    let rebound = "[[binding]]\ncontext = \"schedule\"\nkeys = [\"n\"]\naction = \"add-entry\"\ndescription = \"add\"\n";
    let (rebound, _) = Keymap::with_overrides(Some(rebound));
    let text = screen_with(&s, 120, 30, &rebound);
    assert!(
        text.contains("(the schedule is empty: `n` adds an entry)"),
        "{text}"
    );
}

#[test]
fn spec_editor_shows_issues_at_their_line() {
    let mut s = state();
    let raw = json!({
        "name": "qwen", "type": "public",
        "provider": {"vendor": "aws", "region": "us-east-1"},
        "compute": {"accelerator": "cpu", "instanceType": "intel-icl", "instanceSize": "x2",
                    "scaling": {"minReplica": 0, "maxReplica": 3}},
        "model": {"repository": "Qwen/Qwen2.5-7B-Instruct", "framework": "pytorch", "image": {"hub": {}}},
        "status": {"state": "running", "readyReplica": 1, "targetReplica": 1, "updatedAt": "2026-11-22T11:58:00.000Z"}
    });
    keys(&mut s, &["tab"]);
    loaded(&mut s, Ok(vec![EndpointRow::from_json("admin", &raw)]));
    keys(&mut s, &["e"]);
    insta::assert_snapshot!("spec_editor", screen(&s, 120, 30));
    // `"type": "public"` → `"type": "publix"`: the rule's message names the line.
    keys(
        &mut s,
        &["down", "down", "end", "left", "left", "backspace", "x"],
    );
    let text = screen(&s, 120, 30);
    assert!(text.contains("line 3: type:"), "{text}");
    let fx = update(
        &mut s,
        Action::Key(Key("ctrl-s".into())),
        &Keymap::builtin(),
    );
    assert!(fx.is_empty(), "an invalid spec is not saved");
    // Back to what it was: nothing to save.
    keys(&mut s, &["backspace", "c", "ctrl-s"]);
    assert!(screen(&s, 120, 30).contains("nothing changed"));
    // `"type": "authenticated"`: only that is sent.
    for _ in 0.."public".len() {
        keys(&mut s, &["backspace"]);
    }
    for c in "authenticated".chars() {
        keys(&mut s, &[&c.to_string()]);
    }
    let fx = update(
        &mut s,
        Action::Key(Key("ctrl-s".into())),
        &Keymap::builtin(),
    );
    assert_eq!(
        fx,
        [Effect::Update {
            namespace: "admin".into(),
            name: "qwen".into(),
            patch: json!({"type": "authenticated"})
        }]
    );
    assert!(screen(&s, 120, 30).contains("saving…"));
    // The server refuses it: the editor stays open with the text, the issue at its line.
    update(
        &mut s,
        Action::Saved {
            namespace: "admin".into(),
            name: "qwen".into(),
            result: Err((
                "invalid request body".into(),
                vec![("type".into(), "not allowed here".into())],
            )),
        },
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("spec_editor_refused", screen(&s, 120, 30));
    // Saved: the editor closes and the list reloads.
    keys(&mut s, &["ctrl-s"]);
    let fx = update(
        &mut s,
        Action::Saved {
            namespace: "admin".into(),
            name: "qwen".into(),
            result: Ok(String::new()),
        },
        &Keymap::builtin(),
    );
    assert!(matches!(fx[..], [Effect::LoadEndpoints(..)]), "{fx:?}");
    assert!(screen(&s, 120, 30).contains("saved the spec of admin/qwen"));
}

#[test]
fn describe_scrolls_and_searches() {
    let mut s = state();
    let raw = json!({
        "name": "qwen", "type": "public",
        "model": {"repository": "Qwen/Qwen2.5-7B-Instruct", "env": (0..60).map(|i| (format!("VAR_{i:02}"), json!(format!("value {i}")))).collect::<serde_json::Map<_, _>>()},
        "status": {"state": "running", "readyReplica": 1, "targetReplica": 1, "updatedAt": "2026-11-22T11:58:00.000Z"}
    });
    keys(&mut s, &["tab"]);
    loaded(&mut s, Ok(vec![EndpointRow::from_json("admin", &raw)]));
    update(&mut s, Action::Resize(120, 30), &Keymap::builtin());
    keys(&mut s, &["d"]);
    let text = screen(&s, 120, 30);
    assert!(
        text.contains("VAR_00") && !text.contains("VAR_59"),
        "{text}"
    );
    keys(&mut s, &["/", "v", "a", "r", "_", "5", "0", "enter"]);
    insta::assert_snapshot!("describe_search", screen(&s, 120, 30));
    keys(&mut s, &["G"]);
    let text = screen(&s, 120, 30);
    assert!(text.contains("VAR_59"), "{text}");
    keys(&mut s, &["esc"]);
    assert!(
        !screen(&s, 120, 30).contains("(n next"),
        "esc clears the search first"
    );
    keys(&mut s, &["esc"]);
    assert!(!screen(&s, 120, 30).contains("VAR_59"), "then closes");
}

#[test]
fn logs_with_a_search_and_the_command_line() {
    let mut s = state();
    update(&mut s, Action::Resize(120, 24), &Keymap::builtin());
    keys(&mut s, &["tab", "l"]);
    let output: Vec<String> = (0..40)
        .map(|i| {
            if i % 9 == 4 {
                format!("2026-11-22T11:{i:02}:00Z WARN slow request {i}")
            } else {
                format!("2026-11-22T11:{i:02}:00Z INFO request {i} 200")
            }
        })
        .collect();
    update(
        &mut s,
        Action::LogsLoaded {
            namespace: "admin".into(),
            name: "qwen".into(),
            text: Ok(output.join("\n")),
        },
        &Keymap::builtin(),
    );
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("request 39") && !text.contains("request 0 "),
        "{text}"
    );
    keys(&mut s, &["/", "w", "a", "r", "n", "enter"]);
    insta::assert_snapshot!("logs_search", screen(&s, 120, 24));
    keys(&mut s, &["esc", "esc", ":"]);
    for c in "server http://10.0.0.5:8080 sy_secret".chars() {
        let k = if c == ' ' {
            "space".to_string()
        } else {
            c.to_string()
        };
        keys(&mut s, &[&k]);
    }
    let text = screen(&s, 120, 24);
    assert!(
        text.contains(":server http://10.0.0.5:8080 •••••••••") && !text.contains("sy_secret"),
        "{text}"
    );
}

#[test]
fn clicks_and_pages_follow_the_drawn_table() {
    let mut s = state();
    update(&mut s, Action::Resize(120, 24), &Keymap::builtin());
    // The catalog: a click on the line a model is drawn on selects it.
    let drawn = screen(&s, 120, 24);
    let line = drawn.lines().position(|l| l.contains("bge-large")).unwrap();
    update(&mut s, Action::Click(line as u16), &Keymap::builtin());
    assert_eq!(
        s.selected,
        s.visible().iter().position(|i| *i == 1).unwrap()
    );
    // A click on the border or the detail pane selects nothing new.
    update(&mut s, Action::Click(1), &Keymap::builtin());
    update(&mut s, Action::Click(20), &Keymap::builtin());
    assert_eq!(
        s.selected,
        s.visible().iter().position(|i| *i == 1).unwrap()
    );

    let rows = running_endpoints(100);
    keys(&mut s, &["tab"]);
    loaded(&mut s, Ok(rows));
    let drawn = screen(&s, 120, 24);
    let shown: Vec<usize> = drawn
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("│endpoint-"))
        .map(|(y, _)| y)
        .collect();
    // As many rows drawn as a page moves by.
    let page = views::list_height(s.view, s.size);
    assert_eq!(shown.len(), page, "{drawn}");
    keys(&mut s, &["pagedown"]);
    assert_eq!(s.selected, page);
    // Scrolled: the selection is on the last line drawn, and a click on the first line picks the row there.
    let drawn = screen(&s, 120, 24);
    let last = *shown.last().unwrap();
    assert!(
        drawn
            .lines()
            .nth(last)
            .unwrap()
            .contains(&format!("endpoint-{page:03}")),
        "{drawn}"
    );
    update(&mut s, Action::Click(shown[0] as u16), &Keymap::builtin());
    assert_eq!(s.selected, 1);
}

/// The colour `text` is drawn in, where it first appears on the screen.
fn colour_of(state: &State, width: u16, height: u16, text: &str) -> ratatui::style::Color {
    let buffer = drawn(state, width, height);
    for y in 0..height {
        let line: Vec<&str> = (0..width).map(|x| buffer[(x, y)].symbol()).collect();
        let joined = line.concat();
        if let Some(at) = joined.find(text) {
            // Columns are one per cell here (the text searched for is ASCII, and so is what precedes it).
            let x = joined[..at].chars().count() as u16;
            return buffer[(x, y)].fg;
        }
    }
    panic!("{text} is not on the screen");
}

/// Types `text` a key at a time (spaces as `space`).
fn typed(s: &mut State, text: &str) {
    for c in text.chars() {
        let k = if c == ' ' {
            "space".to_string()
        } else {
            c.to_string()
        };
        keys(s, &[&k]);
    }
}

/// The screen's text inside the boxes, its lines joined: what a wrapped paragraph says, whole.
fn joined(text: &str) -> String {
    let lines = text.lines().map(|l| l.trim_matches(['│', ' ']));
    lines.collect::<Vec<_>>().join(" ")
}

/// Runs a `:` command; its effects.
fn command(s: &mut State, text: &str) -> Vec<Effect> {
    keys(s, &[":"]);
    typed(s, text);
    update(s, Action::Key(Key("enter".into())), &Keymap::builtin())
}

/// Three apps: a confidential web app, a public CLI, and an organization's backend with the token-exchange
/// privilege.
fn apps() -> Vec<AppRow> {
    [
        json!({"id": "app_3f2a9c0d1e4b5a6978c0d1e2", "owner": "admin", "name": "Web dashboard",
               "redirectUris": ["https://dash.example.com/callback"], "scopes": ["openid", "profile", "email"],
               "hasSecret": true, "tokenExchange": false, "homepageUrl": "https://dash.example.com",
               "createdAt": "2026-11-20T09:30:00.000Z", "updatedAt": "2026-11-21T10:00:00.000Z"}),
        json!({"id": "app_8b7c6d5e4f3a2b1c0d9e8f7a", "owner": "admin", "name": "CLI",
               "redirectUris": [], "scopes": ["openid", "read-endpoints"],
               "hasSecret": false, "tokenExchange": false,
               "createdAt": "2026-11-20T09:31:00.000Z", "updatedAt": "2026-11-20T09:31:00.000Z"}),
        json!({"id": "app_0a1b2c3d4e5f60718293a4b5", "owner": "admin", "name": "acme backend",
               "redirectUris": ["http://127.0.0.1/cb"], "scopes": ["openid", "email", "inference-api"],
               "hasSecret": true, "tokenExchange": true,
               "createdAt": "2026-11-21T08:00:00.000Z", "updatedAt": "2026-11-21T08:00:00.000Z"}),
    ]
    .iter()
    .map(AppRow::from_json)
    .collect()
}

fn apps_shown(s: &mut State) {
    let fx = command(s, "apps");
    assert_eq!(fx, [Effect::LoadApps(s.apps_seq, None)]);
    let seq = s.apps_seq;
    update(s, Action::AppsLoaded(seq, Ok(apps())), &Keymap::builtin());
}

const SECRET: &str = "sys_Zk3v9QeR1tYb7uNc2xWm5pLs8dHf0aJg4oKiEyTrUqV";

#[test]
fn apps_view_and_its_dialogs() {
    let mut s = state();
    apps_shown(&mut s);
    insta::assert_snapshot!("apps_view", screen(&s, 120, 24));
    insta::assert_snapshot!("apps_view_80", screen(&s, 80, 24));
    // The apps context's keys in the footer, and only there.
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("n new app") && text.contains("X delete secret"),
        "{text}"
    );
    keys(&mut s, &["tab"]);
    assert!(!screen(&s, 120, 24).contains("rotate secret"));
    apps_shown(&mut s);
    // Deleting the secret asks first, and says what it means.
    keys(&mut s, &["X"]);
    insta::assert_snapshot!("apps_confirm_delete_secret", screen(&s, 80, 24));
    keys(&mut s, &["esc", "G", "S", "tab"]);
    let fx = update(&mut s, Action::Key(Key("enter".into())), &Keymap::builtin());
    assert_eq!(
        fx,
        [Effect::AppAct {
            action: AppAction::RotateSecret,
            id: "app_3f2a9c0d1e4b5a6978c0d1e2".into(),
            name: "Web dashboard".into()
        }]
    );
    update(
        &mut s,
        Action::SecretIssued(IssuedSecret::client(
            "Web dashboard".into(),
            "app_3f2a9c0d1e4b5a6978c0d1e2".into(),
            Secret::new(SECRET.into()),
        )),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("apps_secret_shown_once", screen(&s, 80, 24));
    let text = screen(&s, 120, 24);
    assert!(
        text.contains(SECRET) && text.contains("will not be shown again"),
        "{text}"
    );
    // The status line stays in sight over every popup.
    assert!(text.starts_with(" switchyard "), "{text}");
    keys(&mut s, &["esc"]);
    let text = screen(&s, 120, 24);
    assert!(!text.contains(SECRET), "{text}");
    // Details.
    keys(&mut s, &["g", "enter"]);
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("token exchange  yes") && text.contains("http://127.0.0.1/cb"),
        "{text}"
    );
}

#[test]
fn new_app_form_shows_every_issue_at_once() {
    let mut s = state();
    apps_shown(&mut s);
    keys(&mut s, &["n"]);
    typed(&mut s, "My app");
    keys(&mut s, &["tab"]);
    typed(&mut s, "myapp:/cb https://x.example/cb");
    keys(&mut s, &["tab"]);
    typed(&mut s, " everything");
    let fx = update(&mut s, Action::Key(Key("enter".into())), &Keymap::builtin());
    assert_eq!(
        fx,
        [Effect::CreateApp(json!({
            "name": "My app", "redirectUris": ["myapp:/cb", "https://x.example/cb"],
            "scopes": ["openid", "profile", "everything"], "public": false
        }))]
    );
    update(
        &mut s,
        Action::AppCreated(Err((
            "invalid request body".into(),
            vec![
                (
                    "redirectUris[1]".into(),
                    "\"https://x.example/cb\" is not registered for loopback".into(),
                ),
                ("scopes[2]".into(), "unknown scope \"everything\"".into()),
                ("".into(), "an app of that name exists".into()),
            ],
        ))),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("new_app_form_issues", screen(&s, 80, 24));
    // Made: the secret, once.
    keys(&mut s, &["enter"]);
    update(
        &mut s,
        Action::AppCreated(Ok(CreatedApp {
            name: "My app".into(),
            client_id: "app_99aa88bb77cc66dd55ee44ff".into(),
            secret: Some(Secret::new(SECRET.into())),
        })),
        &Keymap::builtin(),
    );
    let text = screen(&s, 80, 24);
    assert!(
        text.contains(SECRET) && text.contains("secret of My app (shown once)"),
        "{text}"
    );
}

fn audit() -> Vec<AuditRow> {
    [
        (
            "2026-11-22T11:59:30.120Z",
            "success",
            "ada@acme.example",
            Some("ada"),
            Some("openid email"),
        ),
        (
            "2026-11-22T11:58:02.000Z",
            "invalid_grant",
            "mallory@evil.example",
            None,
            None,
        ),
        (
            "2026-11-22T11:40:00.000Z",
            "invalid_scope",
            "ada@acme.example",
            Some("ada"),
            None,
        ),
        (
            "2026-11-22T09:00:00.000Z",
            "success",
            "bob@acme.example",
            Some("bob"),
            Some("inference-api"),
        ),
    ]
    .iter()
    .enumerate()
    .map(|(i, (at, outcome, email, user, scope))| {
        AuditRow::from_json(&json!({
            "id": format!("e{i}"), "at": at, "action": "oauth.token_exchange", "outcome": outcome,
            "actor": {"app": {"id": "app_0a1b2c3d4e5f60718293a4b5", "name": "acme backend"}},
            "detail": {"subjectEmail": email, "user": user, "scope": scope}
        }))
    })
    .collect()
}

#[test]
fn audit_view() {
    let mut s = state();
    let fx = command(&mut s, "audit acme");
    assert_eq!(fx, [Effect::LoadAudit(1, "acme".into())]);
    update(
        &mut s,
        Action::AuditLoaded(1, Ok(audit())),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("audit_view", screen(&s, 120, 24));
    insta::assert_snapshot!("audit_view_80", screen(&s, 80, 24));
    use ratatui::style::Color;
    assert_eq!(colour_of(&s, 120, 24, "success"), Color::Green);
    assert_eq!(colour_of(&s, 120, 24, "invalid_grant"), Color::Red);
    // `r` reloads; a refusal is said in words, not drawn as an empty log.
    let fx = update(&mut s, Action::Key(Key("r".into())), &Keymap::builtin());
    assert_eq!(fx, [Effect::LoadAudit(2, "acme".into())]);
    update(
        &mut s,
        Action::AuditLoaded(
            2,
            Err(LoadFailure::Forbidden(
                "the audit log of \"acme\" is for its administrators".into(),
            )),
        ),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("audit_forbidden", screen(&s, 80, 24));
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("only the organization's administrators see its audit log")
            && !text.contains("SUBJECT EMAIL"),
        "{text}"
    );
}

#[test]
fn read_only_apps_offer_no_changes() {
    let mut s = state();
    s.read_only = true;
    apps_shown(&mut s);
    let text = screen(&s, 120, 24);
    for hidden in ["new app", "rotate secret", "delete secret", "delete app"] {
        assert!(!text.contains(hidden), "{hidden}: {text}");
    }
    assert!(text.contains("details"), "{text}");
}

fn webhooks_shown(s: &mut State) {
    command(s, "webhooks");
    let rows = [
        json!({"id": "wh_1", "url": "http://127.0.0.1:9/hook", "owner": "admin",
               "watched": [{"type": "user", "name": "admin"}], "domains": ["endpoint"], "disabled": false,
               "lastAttempt": {"at": "2026-11-22T11:59:00.000Z", "statusCode": 200, "errorClass": null, "ok": true}}),
        json!({"id": "wh_2", "url": "https://ci.example/hook", "owner": "acme",
               "watched": [{"type": "org", "name": "acme"}], "domains": ["repo"], "disabled": true,
               "disabledReason": "410 Gone", "lastAttempt": {"at": "2026-11-22T11:00:00.000Z",
               "statusCode": 410, "errorClass": "status", "ok": false}}),
        json!({"id": "wh_3", "url": "https://new.example/hook", "owner": "admin",
               "watched": [{"type": "model", "name": "acme/m"}], "domains": ["repo"], "disabled": false,
               "lastAttempt": null}),
    ]
    .iter()
    .map(WebhookRow::from_json)
    .collect();
    let seq = s.webhooks_seq;
    update(s, Action::WebhooksLoaded(seq, Ok(rows)), &Keymap::builtin());
}

/// Attempt 1 of delivery `dl_{seq}`: endpoint `admin/e{seq}` went from initializing to running.
fn attempt(seq: i64, status: Option<i64>, error: Option<&str>) -> DeliveryRow {
    let event = json!({"scope": "endpoint.status", "action": "update"});
    DeliveryRow::from_json(&json!({
        "seq": seq, "deliveryId": format!("dl_{seq}"), "eventId": format!("ev_{seq}"), "attempt": 1,
        "event": event, "namespace": "admin", "subject": format!("e{seq}"),
        "payload": {"event": event, "status": {"previousState": "initializing", "state": "running"}},
        "at": format!("2026-11-22T11:{seq:02}:00.000Z"),
        "statusCode": status, "durationMs": 12, "errorClass": error, "error": null, "response": null,
        "nextAttemptAt": null, "manual": false, "state": if error.is_some() { "failed" } else { "succeeded" }
    }))
}

#[test]
fn webhooks_list_form_and_live_deliveries() {
    let mut s = state();
    webhooks_shown(&mut s);
    insta::assert_snapshot!("webhooks_view", screen(&s, 120, 24));
    let text = screen(&s, 120, 24);
    for want in [
        "webhooks (3/3)",
        "user:admin",
        "200 ok 2026-11-22 11:59:00",
        "410 status",
        "no (!)",
        "enter/l deliveries (live)",
        "x enable/disable",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }

    // The form shows every issue of the server's answer at once, each beside its field.
    keys(&mut s, &["n", "enter"]);
    let refusal = (
        "invalid request body".to_string(),
        vec![
            ("url".to_string(), "a webhook needs a url".to_string()),
            (
                "watched[0].name".to_string(),
                "not visible to admin".to_string(),
            ),
            (
                "domains".to_string(),
                "name at least one domain".to_string(),
            ),
            ("secret".to_string(), "printable ASCII".to_string()),
        ],
    );
    update(
        &mut s,
        Action::WebhookSaved(Err(refusal)),
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("webhook_form_issues", screen(&s, 120, 24));
    let text = screen(&s, 120, 24);
    for want in [
        "← a webhook needs a url",
        "← watched[0].name: not visible to admin",
        "← name at least one domain",
        "← printable ASCII",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    keys(&mut s, &["esc"]);

    // The deliveries, live: a new attempt comes into view on top without a key.
    keys(&mut s, &["enter"]);
    let feed = s.deliveries.feed;
    let page = (1..=30)
        .rev()
        .map(|i| attempt(i, Some(200), None))
        .collect();
    update(
        &mut s,
        Action::DeliveriesLoaded {
            feed,
            result: Ok(page),
        },
        &Keymap::builtin(),
    );
    let before = screen(&s, 120, 24);
    assert!(
        before.contains("deliveries of http://127.0.0.1:9/hook · live (30/30)"),
        "{before}"
    );
    assert!(
        !before.contains("dl_31") && !before.contains("11:31:00"),
        "{before}"
    );
    update(
        &mut s,
        Action::DeliveriesLoaded {
            feed,
            result: Ok(vec![attempt(31, Some(503), Some("status"))]),
        },
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("deliveries_live", screen(&s, 120, 24));
    // Each row names what changed: the endpoint, and its old and new state.
    for width in [120, 80] {
        let after = screen(&s, width, 24);
        assert!(
            after.contains("11:31:00 endpoint admin/e31")
                && after.contains("initializing → running"),
            "{after}"
        );
        assert!(after.contains("t replay"), "{after}");
    }
    // Held by its circuit breaker: said under the list, why and until when.
    let held = WebhookRow::from_json(&json!({
        "id": "wh_1", "url": "http://127.0.0.1:9/hook", "owner": "admin", "disabled": false,
        "heldUntil": "2026-11-22T12:00:30.000Z", "failingSince": "2026-11-22T11:31:00.000Z"}));
    update(
        &mut s,
        Action::WebhookLoaded {
            feed,
            result: Ok(held),
        },
        &Keymap::builtin(),
    );
    insta::assert_snapshot!("deliveries_held_80", screen(&s, 80, 24));
    let text = screen(&s, 120, 24);
    assert!(
        text.contains("held until 12:00:30 UTC: every attempt since 11:31:00 UTC has failed"),
        "{text}"
    );
}

#[test]
fn notifications_in_the_status_line_and_their_view() {
    let mut s = state();
    let n = |seq: i64, kind: &str, title: &str| {
        NotificationRow::from_json(
            &json!({"seq": seq, "at": "2026-11-22T11:58:00Z", "kind": kind,
            "namespace": "admin", "subject": "e1", "title": title, "message": "details"}),
        )
    };
    update(
        &mut s,
        Action::NotificationsLoaded(Ok(Vec::new())),
        &Keymap::builtin(),
    );
    update(
        &mut s,
        Action::NotificationsLoaded(Ok(vec![n(1, "endpoint.running", "endpoint e1 is running")])),
        &Keymap::builtin(),
    );
    let text = screen(&s, 120, 24);
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains("● endpoint e1 is running")),
        "{text}"
    );
    update(
        &mut s,
        Action::NotificationsLoaded(Ok(vec![n(2, "endpoint.failed", "endpoint e1 failed")])),
        &Keymap::builtin(),
    );
    assert_eq!(
        colour_of(&s, 120, 24, "endpoint e1 failed"),
        ratatui::style::Color::Red
    );
    command(&mut s, "notifications");
    insta::assert_snapshot!("notifications_view", screen(&s, 120, 24));
    // An older server: said in the view, nowhere else.
    update(
        &mut s,
        Action::NotificationsLoaded(Err(switchyard_ui::state::NotificationsFailure::Unsupported)),
        &Keymap::builtin(),
    );
    assert!(screen(&s, 120, 24).contains("this server has no notifications"));
}

/// Three servers on one store, one of them not answering: the status line says so and names the leader, as
/// much as fits (at 80 columns, the one not answering, cut); the rest of the screen is as with one server.
#[test]
fn several_servers_in_the_status_line() {
    let mut s = state();
    let keymap = Keymap::builtin();
    keys(&mut s, &[":", "e", "p", "enter"]);
    let alone = screen(&s, 80, 24);
    let server = |address: &str, standing: &str, leader: bool| {
        ServerRow::from_json(&json!({
            "id": format!("node-{address}"), "address": address,
            "publicUrl": format!("http://{address}"), "version": "0.1.0",
            "startedAt": "2026-11-22T11:00:00Z", "lastHeartbeat": "2026-11-22T11:59:58Z",
            "state": standing, "leader": leader
        }))
    };
    let one = vec![server("127.0.0.1:8080", "running", true)];
    update(&mut s, Action::ServersLoaded(Ok(one)), &keymap);
    assert_eq!(screen(&s, 80, 24), alone);
    let three = vec![
        server("127.0.0.1:8080", "running", true),
        server("127.0.0.1:8081", "running", false),
        server("127.0.0.1:8082", "notAnswering", false),
    ];
    update(&mut s, Action::ServersLoaded(Ok(three)), &keymap);
    insta::assert_snapshot!("servers_one_not_answering_80", screen(&s, 80, 24));
    let wide = screen(&s, 140, 24);
    let status = wide.lines().next().unwrap_or_default();
    assert!(
        status.contains("1 not answering: 127.0.0.1:8082  leader 127.0.0.1:8080  user admin"),
        "{status}"
    );
}

/// A first run: MiniLM would run here once its engine is installed. The catalog and the recipes say so, a
/// deploy offers the install, and its progress shows in the status line.
#[test]
fn what_runs_here_and_the_engine_a_deploy_needs() {
    let mut s = state();
    let keymap = Keymap::builtin();
    let minilm = CatalogRow::from_json(&json!({
        "repoId": "sentence-transformers/all-MiniLM-L6-v2", "authorName": "sentence-transformers",
        "modelName": "all-MiniLM-L6-v2", "task": "sentence-similarity", "license": "apache-2.0",
        "createdAt": "2022-03-02T23:29:04.000Z",
        "recipes": [{"publicId": "all-minilm-l6-v2-cpu-tei", "accelerator": "cpu", "engineType": "tei"},
                    {"publicId": "all-minilm-l6-v2-gpu-tei", "accelerator": "gpu", "engineType": "tei"}]}));
    let seq = s.catalog_seq;
    let mut rows = catalog();
    rows.insert(0, minilm);
    update(&mut s, Action::CatalogLoaded(seq, Ok(rows)), &keymap);
    let answer = |install: serde_json::Value| {
        EngineMarks::from_json(
            &json!({"engines": [{"name": "minilm", "install": install}], "recipes": {
                "all-minilm-l6-v2-cpu-tei": {"runs": false, "install": "minilm",
                    "message": "the minilm engine is not installed on this server: run `switchyard engines install minilm` (or set runtime.launchers.tei)"},
                "all-minilm-l6-v2-gpu-tei": {"runs": false,
                    "message": "no engine for \"tei\" images on this server: put text-embeddings-router on the server's PATH"},
                "qwen2.5-7b-instruct-cpu-llamacpp-1": {"runs": true, "source": "path", "engine": "llama-server"},
            }}),
        )
    };
    let idle = json!({"percent": 0, "step": "", "running": false});
    update(
        &mut s,
        Action::EnginesLoaded {
            polled: false,
            result: Ok(answer(idle)),
        },
        &keymap,
    );
    insta::assert_snapshot!("engines_marks", screen(&s, 120, 24));
    // At 80 columns the model and its mark keep their room; the license, accelerators and date go first.
    let narrow = screen(&s, 80, 24);
    assert!(
        narrow.contains("│all-MiniLM-L6-v2         install "),
        "{narrow}"
    );
    assert!(!narrow.contains("LICENSE"), "{narrow}");
    keys(&mut s, &["enter"]);
    insta::assert_snapshot!("engines_recipes", screen(&s, 120, 24));
    keys(&mut s, &["esc", "D", "enter"]);
    update(
        &mut s,
        Action::Deployed(Ok("admin/all-minilm-l6-v2".into())),
        &keymap,
    );
    insta::assert_snapshot!("engines_install_offered", screen(&s, 100, 24));
    keys(&mut s, &["tab", "enter"]);
    update(
        &mut s,
        Action::EngineInstallStarted(Ok("minilm".into())),
        &keymap,
    );
    let running =
        json!({"percent": 45, "step": "downloading numpy==2.4.6 (5/27)", "running": true});
    update(
        &mut s,
        Action::EnginesLoaded {
            polled: true,
            result: Ok(answer(running)),
        },
        &keymap,
    );
    let shown = screen(&s, 100, 24);
    assert!(
        shown.contains("installing minilm: 45% downloading numpy==2.4.6 (5/27)"),
        "{shown}"
    );
}

/// The line being typed into (the command line, the filter, a pane's search) has its own keys in the footer.
#[test]
fn typing_shows_the_keys_of_the_line_typed_into() {
    let mut s = state();
    let last = |s: &State| {
        screen(s, 120, 24)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    };
    keys(&mut s, &[":"]);
    assert!(last(&s).contains("enter run  esc cancel"), "{}", last(&s));
    keys(&mut s, &["esc", "/"]);
    assert!(
        last(&s).contains("enter keep the filter  esc clear it"),
        "{}",
        last(&s)
    );
    keys(&mut s, &["esc", "enter", "/"]);
    assert!(
        last(&s).contains("enter find  esc cancel the search"),
        "{}",
        last(&s)
    );
    keys(&mut s, &["esc"]);
    assert!(
        last(&s).contains("/ search"),
        "the pane's own keys again: {}",
        last(&s)
    );
}

/// An hour of `qwen`'s traffic, a point every 30 s: a morning ramp, a burst of errors, a scale-up, and a
/// quiet spell at zero before a request woke it.
fn qwen_hour() -> (serde_json::Value, serde_json::Value) {
    let start = chrono::Utc
        .with_ymd_and_hms(2026, 11, 22, 11, 0, 0)
        .unwrap();
    let points: Vec<serde_json::Value> = (0..120)
        .map(|i: i64| {
            let at = start + chrono::Duration::seconds(30 * i);
            let quiet = (70..90).contains(&i);
            let rps = if quiet { 0.0 } else { 2.0 + (i % 40) as f64 * 0.5 };
            let errors = if (30..34).contains(&i) { 6 } else { 0 };
            let replicas = match i {
                _ if quiet => 0.0,
                0..=39 => 1.0,
                _ => 2.0,
            };
            json!({
                "at": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "requests": (rps * 30.0) as u64, "requestsPerSecond": rps, "errors": errors,
                "latencyMs": (!quiet).then(|| json!({"p50": 40.0, "p95": 80.0 + (i % 20) as f64 * 10.0, "p99": 400.0})),
                "readyReplicas": (!quiet).then_some(replicas),
            })
        })
        .collect();
    let series = json!({"from": "2026-11-22T11:00:00Z", "to": "2026-11-22T12:00:00Z", "step": 30,
                        "resolution": 10, "points": points});
    let decisions = json!({"items": [
        {"at": "2026-11-22T11:45:10Z", "kind": "woken", "reason": "woken by a request: POST /endpoints/admin/qwen/v1/chat/completions", "from": 0, "to": 1},
        {"at": "2026-11-22T11:35:00Z", "kind": "scaledToZero", "reason": "no request for 15 min (the timeout is 15 min)", "from": 2, "to": 0},
        {"at": "2026-11-22T11:16:00Z", "kind": "replicaExited", "reason": "replica qwen-2 exited: exit status 137; starting another in 2 s"},
        {"at": "2026-11-22T11:20:00Z", "kind": "scaledUp", "reason": "pendingRequests 3.2 is above its threshold 1.5", "from": 1, "to": 2,
         "measured": {"measure": "pendingRequests", "value": 3.2, "threshold": 1.5}},
    ]});
    (series, decisions)
}

/// The endpoints view with `qwen` described, its replicas and an hour of charts loaded, on a `w`×`h` terminal.
fn qwen_described(w: u16, h: u16) -> State {
    let mut s = state();
    keys(&mut s, &["tab"]);
    update(&mut s, Action::Resize(w, h), &Keymap::builtin());
    keys(&mut s, &["enter"]);
    let replicas = json!({"items": [{"id": "qwen-1", "address": "10.0.0.5:80", "inFlight": 1, "queue": 0.0, "kvCache": 0.12}]});
    let result = Ok(switchyard_ui::state::ReplicaLoad::list_from_json(&replicas));
    let (namespace, name) = ("admin".to_string(), "qwen".to_string());
    update(
        &mut s,
        Action::ReplicasLoaded {
            namespace: namespace.clone(),
            name: name.clone(),
            result,
        },
        &Keymap::builtin(),
    );
    let (series, decisions) = qwen_hour();
    let range = switchyard_ui::state::ChartRange::Hour;
    let a = Analytics::from_json(namespace, name, range, &series, &decisions);
    update(
        &mut s,
        Action::AnalyticsLoaded {
            range,
            result: Ok(a),
        },
        &Keymap::builtin(),
    );
    s
}

#[test]
fn an_endpoints_charts_at_120x35_and_80x24() {
    let s = qwen_described(120, 35);
    insta::assert_snapshot!("endpoint_charts_120x35", screen(&s, 120, 35));
    let text = screen(&s, 120, 35);
    // The decisions are marked on the time axis and listed, newest first.
    for want in [
        "↑", "0", "W", "X", "[1h]", "requests", "p95", "errors", "replicas",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let s = qwen_described(80, 24);
    insta::assert_snapshot!("endpoint_charts_80x24", screen(&s, 80, 24));
    // The time axis keeps its marks at 80 columns; the list is below, where the text scrolls.
    let text = screen(&s, 80, 24);
    let axis = text
        .lines()
        .find(|l| l.contains("→ now"))
        .expect("the time axis");
    for mark in ["X", "↑", "0", "W"] {
        assert!(axis.contains(mark), "{mark}: {axis}");
    }
    let s = qwen_described(120, 35);
    let switchyard_ui::state::Overlay::Describe(pager) = &s.overlay else {
        panic!("{:?}", s.overlay)
    };
    let listed: Vec<&String> = pager
        .lines
        .iter()
        .skip_while(|l| !l.starts_with("decisions"))
        .skip(1)
        .take(4)
        .collect();
    assert!(
        listed[0].starts_with("W 11-22 11:45:10 woken 0→1: woken by a request"),
        "{listed:?}"
    );
    assert!(
        listed[1].starts_with("0 11-22 11:35:00 scaled to zero 2→0"),
        "{listed:?}"
    );
}

#[test]
fn the_endpoints_list_shows_requests_sparklines_when_wide() {
    let mut s = state();
    keys(&mut s, &["tab"]);
    update(&mut s, Action::Resize(120, 35), &Keymap::builtin());
    let (series, _) = qwen_hour();
    let rps = switchyard_ui::state::Series::from_json(&series).requests_per_second;
    let lines = vec![
        (("admin".to_string(), "qwen".to_string()), rps),
        (("acme".to_string(), "embedder".to_string()), vec![0.0; 30]),
    ];
    update(&mut s, Action::SparklinesLoaded(lines), &Keymap::builtin());
    insta::assert_snapshot!("endpoints_sparklines_120x35", screen(&s, 120, 35));
    assert!(screen(&s, 120, 35).contains("REQUESTS 30M"));
    // Narrow, the column gives way.
    assert!(!screen(&s, 80, 24).contains("REQUESTS"));
}
