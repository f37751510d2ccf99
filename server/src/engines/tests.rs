use std::os::unix::fs::PermissionsExt;

use super::*;

const MINILM: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// An engines directory, and a directory to use as `PATH` holding the given programs.
fn setup(programs: &[&str]) -> (tempfile::TempDir, tempfile::TempDir) {
    let engines = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    for p in programs {
        let path = bin.path().join(p);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (engines, bin)
}

fn engines(dir: &Path, bin: &Path, configured: BTreeMap<String, Launcher>) -> Engines {
    Engines::new(dir.to_path_buf(), configured).with_search_path(Some(bin.as_os_str().into()))
}

fn installed(dir: &Path, name: &str) {
    let m = Manifest {
        name: name.into(),
        command: vec!["/e/python".into(), "/e/serve.py".into(), "{port}".into()],
        health_route: "/health".into(),
        installed_at: "2026-11-24T00:00:00Z".into(),
        python: "/usr/bin/python3".into(),
    };
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(
        dir.join(name).join(install::MANIFEST),
        serde_json::to_string(&m).unwrap(),
    )
    .unwrap();
}

#[test]
fn nothing_installed_names_the_command_that_installs_it() {
    let (dir, bin) = setup(&[]);
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    let missing = e.resolve("tei", MINILM, "cpu").unwrap_err();
    assert_eq!(missing.install, Some("minilm"));
    assert!(
        missing
            .message
            .contains("run `switchyard engines install minilm`"),
        "{}",
        missing.message
    );
    // Another model of the same kind: the built-in engine would not serve it.
    let other = e
        .resolve("tei", "BAAI/bge-large-en-v1.5", "cpu")
        .unwrap_err();
    assert_eq!(other.install, None);
    assert!(
        other
            .message
            .contains("put text-embeddings-router on the server's PATH")
            && other
                .message
                .contains("serves only sentence-transformers/all-MiniLM-L6-v2"),
        "{}",
        other.message
    );
    // A GPU recipe of the same model is not the built-in CPU engine's either.
    assert_eq!(e.resolve("tei", MINILM, "gpu").unwrap_err().install, None);
    let hub = e.resolve("hub", "a/b", "gpu").unwrap_err();
    assert!(
        hub.message.contains("set runtime.launchers.hub"),
        "{}",
        hub.message
    );
}

#[test]
fn an_installed_engine_serves_its_own_models() {
    let (dir, bin) = setup(&[]);
    installed(dir.path(), "minilm");
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    let r = e
        .resolve("tei", "Sentence-Transformers/all-minilm-l6-v2", "cpu")
        .unwrap();
    assert_eq!(
        r.source,
        Source::Installed {
            engine: "minilm".into()
        }
    );
    assert_eq!(r.launcher.command[0], "/e/python");
    assert_eq!(r.launcher.health_route.as_deref(), Some("/health"));
    assert!(e.resolve("tei", "BAAI/bge-large-en-v1.5", "cpu").is_err());
    let listed = e.list();
    let minilm = listed.iter().find(|i| i.name == "minilm").unwrap();
    assert_eq!(minilm.state, "installed");
    assert_eq!(minilm.program.as_deref(), Some("/e/python"));
    let smollm = listed.iter().find(|i| i.name == "smollm").unwrap();
    assert_eq!(smollm.state, "notInstalled");
}

#[test]
fn programs_on_path_get_default_launchers_for_any_model() {
    let (dir, bin) = setup(&["text-embeddings-router", "llama-server", "vllm", "sglang"]);
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    for (key, program, first_arg) in [
        ("tei", "text-embeddings-router", "--hostname"),
        ("llamacpp", "llama-server", "--host"),
        ("vLLM", "vllm", "serve"),
        ("sGLang", "sglang", "serve"),
    ] {
        let r = e.resolve(key, "org/any-model", "gpu").unwrap();
        assert_eq!(
            r.source,
            Source::Path {
                program: program.into()
            }
        );
        assert_eq!(
            r.launcher.command[0],
            bin.path().join(program).display().to_string()
        );
        assert_eq!(r.launcher.command[1], first_arg);
        assert!(r.launcher.command.iter().any(|a| a == "{port}"), "{key}");
    }
    let found: Vec<_> = e
        .list()
        .into_iter()
        .filter(|i| i.state == "found")
        .collect();
    assert_eq!(found.len(), 4);
}

#[test]
fn a_file_that_is_not_executable_is_not_an_engine() {
    let (dir, bin) = setup(&[]);
    std::fs::write(bin.path().join("vllm"), "not a program").unwrap();
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    assert!(e.resolve("vLLM", "a/b", "gpu").is_err());
}

#[test]
fn the_config_overrides_installed_and_found_engines() {
    let (dir, bin) = setup(&["text-embeddings-router"]);
    installed(dir.path(), "minilm");
    let configured: BTreeMap<String, Launcher> = [(
        "tei".to_string(),
        Launcher {
            command: vec!["my-tei".into(), "{port}".into()],
            ..Default::default()
        },
    )]
    .into();
    let e = engines(dir.path(), bin.path(), configured);
    let r = e.resolve("tei", MINILM, "cpu").unwrap();
    assert_eq!(
        (r.source, r.launcher.command[0].as_str()),
        (Source::Config, "my-tei")
    );
    assert!(e
        .list()
        .iter()
        .filter(|i| i.image_key == "tei")
        .all(|i| i.overridden_by_config));
}

#[test]
fn an_installed_engine_comes_before_path() {
    let (dir, bin) = setup(&["text-embeddings-router"]);
    installed(dir.path(), "minilm");
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    assert!(matches!(
        e.resolve("tei", MINILM, "cpu").unwrap().source,
        Source::Installed { .. }
    ));
    assert!(matches!(
        e.resolve("tei", "BAAI/bge-large-en-v1.5", "cpu")
            .unwrap()
            .source,
        Source::Path { .. }
    ));
}

#[test]
fn a_broken_manifest_is_not_an_install() {
    let (dir, bin) = setup(&[]);
    std::fs::create_dir_all(dir.path().join("minilm")).unwrap();
    std::fs::write(
        dir.path().join("minilm").join(install::MANIFEST),
        "{not json",
    )
    .unwrap();
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    assert!(e.resolve("tei", MINILM, "cpu").is_err());
    assert_eq!(e.list()[0].state, "notInstalled");
}

#[test]
fn an_install_in_this_process_shows_in_the_list_and_runs_once() {
    let (dir, bin) = setup(&[]);
    let e = Arc::new(engines(dir.path(), bin.path(), BTreeMap::new()));
    let guard = e.begin_install("smollm").unwrap();
    assert!(e.begin_install("smollm").is_none(), "one at a time");
    guard.progress(40, "downloading");
    assert!(e.installing("smollm"));
    let smollm = e.list().into_iter().find(|i| i.name == "smollm").unwrap();
    assert_eq!(smollm.state, "installing");
    assert_eq!(smollm.install.unwrap().percent, 40);
    guard.end(Err("pip failed".into()));
    let smollm = e.list().into_iter().find(|i| i.name == "smollm").unwrap();
    assert_eq!(smollm.state, "notInstalled");
    assert_eq!(smollm.install.unwrap().error.as_deref(), Some("pip failed"));
    // A guard dropped without an end (the install panicked) frees the engine, saying so.
    drop(e.begin_install("smollm").unwrap());
    let state = e
        .list()
        .into_iter()
        .find(|i| i.name == "smollm")
        .unwrap()
        .install
        .unwrap();
    assert!(!state.running && state.error.as_deref() == Some("the install was interrupted"));
    assert!(e.begin_install("smollm").is_some());
}

#[test]
fn every_missing_engine_message_is_known_as_one() {
    let (dir, bin) = setup(&[]);
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    for (key, repo, accelerator) in [
        ("tei", MINILM, "cpu"),
        ("tei", "BAAI/bge-large-en-v1.5", "cpu"),
        ("hub", "a/b", "gpu"),
        ("llamacpp", "a/b", "cpu"),
    ] {
        let missing = e.resolve(key, repo, accelerator).unwrap_err();
        assert!(is_missing(&missing.message), "{}", missing.message);
    }
    assert!(!is_missing("replica r1 exited (exit status: 1)"));
}

#[test]
fn a_hub_image_runs_on_the_engine_this_server_has_for_its_model() {
    let hub_launcher = Launcher {
        command: vec!["/opt/hub-runner".into()],
        ..Default::default()
    };
    let configured = BTreeMap::from([("hub".to_string(), hub_launcher)]);
    let (dir, bin) = setup(&[]);
    // The built-in engine for the repository, not yet installed: it is named. A hub launcher would be
    // taken meanwhile (what runs comes before what could).
    let with_launcher = engines(dir.path(), bin.path(), configured.clone());
    let r = with_launcher
        .resolve_hub(&with_launcher, MINILM, None, "cpu")
        .unwrap();
    assert_eq!(r.source, Source::Config);
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    let missing = e.resolve_hub(&e, MINILM, None, "cpu").unwrap_err();
    assert_eq!(missing.install, Some("minilm"));
    assert!(
        missing
            .message
            .contains("switchyard engines install minilm"),
        "{}",
        missing.message
    );
    installed(dir.path(), "minilm");
    for e in [&e, &with_launcher] {
        let r = e.resolve_hub(e, MINILM, None, "cpu").unwrap();
        assert_eq!(
            r.source,
            Source::Installed {
                engine: "minilm".into()
            }
        );
    }
    // Another embedding model: its task's engine (tei's program on PATH), before the hub launcher.
    let (dir, bin) = setup(&["text-embeddings-router"]);
    let e = engines(dir.path(), bin.path(), configured);
    let task = Some(Task::SentenceSimilarity);
    let r = e
        .resolve_hub(&e, "BAAI/bge-small-en-v1.5", task, "cpu")
        .unwrap();
    assert_eq!(
        r.source,
        Source::Path {
            program: "text-embeddings-router".into()
        }
    );
    // A task without an engine here: the hub launcher.
    let r = e
        .resolve_hub(&e, "a/b", Some(Task::TextGeneration), "gpu")
        .unwrap();
    assert_eq!(r.source, Source::Config);
}

#[test]
fn a_hub_image_without_an_engine_says_what_would_give_one() {
    let (dir, bin) = setup(&[]);
    let e = engines(dir.path(), bin.path(), BTreeMap::new());
    let none = e.resolve_hub(&e, "a/b", None, "cpu").unwrap_err();
    assert_eq!(none.install, None);
    assert!(
        none.message.contains("set runtime.launchers.hub"),
        "{}",
        none.message
    );
    assert!(is_missing(&none.message), "{}", none.message);
    let gen = e
        .resolve_hub(&e, "a/b", Some(Task::TextGeneration), "gpu")
        .unwrap_err();
    assert!(
        gen.message.contains("put vllm on the server's PATH"),
        "{}",
        gen.message
    );
    assert!(
        gen.message.contains("runtime.launchers.hub"),
        "{}",
        gen.message
    );
}
