//! The store's own suite, run on each backend: SQLite in a temp dir, and PostgreSQL on the server
//! `./scripts/test` starts (`SWITCHYARD_TEST_POSTGRES`; without it the PostgreSQL half says it was
//! skipped). Units of work, the outbox, the schema's uniqueness rules, migrations, copy and backup.

use crate::common;

use chrono::{SubsecRound, Utc};
use serde_json::json;
use switchyard_server::model::account::AccountKind;
use switchyard_server::model::analytics::{Decision, DecisionKind, Sample};
use switchyard_server::model::catalog::CatalogEntry;
use switchyard_server::model::event::EventKind;
use switchyard_server::model::{EndpointSpec, EndpointState};
use switchyard_server::store::copy::copy_store;
use switchyard_server::store::{
    Actor, Backend, EndpointRecord, NewAccount, NewEvent, SeriesRow, SqlStore, Store, StoreError,
    StoreUrl, Synchronous,
};

/// A store on each backend there is, each new and empty.
async fn stores() -> Vec<(SqlStore, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = StoreUrl::Sqlite(dir.path().join("switchyard.db"));
    let mut out = vec![(
        SqlStore::open(&url, Synchronous::Normal)
            .await
            .expect("open sqlite"),
        Some(dir),
    )];
    match common::postgres_admin_url() {
        Some(admin) => {
            let url = StoreUrl::parse(&common::fresh_postgres(&admin).await).expect("pg url");
            out.push((
                SqlStore::open(&url, Synchronous::Normal)
                    .await
                    .expect("open postgres"),
                None,
            ));
        }
        None => eprintln!("PostgreSQL half skipped: SWITCHYARD_TEST_POSTGRES is not set"),
    }
    out
}

fn record(namespace: &str, name: &str, route: Option<(&str, &str)>) -> EndpointRecord {
    let mut body = common::endpoint_body(name);
    if let Some((domain, path)) = route {
        body["route"] =
            json!({ "domain": domain.to_ascii_lowercase().trim_end_matches('.'), "path": path });
    }
    let mut spec = EndpointSpec::parse(&body).expect("valid spec");
    // Spellings the API refuses (capitals, a trailing dot) still reach the store through older data.
    if let (Some(r), Some((domain, _))) = (spec.route.as_mut(), route) {
        r.domain = domain.to_string();
    }
    // The store keeps milliseconds.
    let now = chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).expect("now");
    let actor = Actor {
        id: "u1".into(),
        name: "alice".into(),
    };
    EndpointRecord {
        id: switchyard_server::crypto::random_id(),
        namespace: namespace.into(),
        spec,
        state: EndpointState::Pending,
        message: None,
        url: None,
        ready_replica: 0,
        target_replica: 0,
        created_at: now,
        updated_at: now,
        created_by: actor.clone(),
        updated_by: actor,
        version: 1,
    }
}

/// Stores one endpoint in a unit of work of its own.
async fn insert(store: &SqlStore, rec: &EndpointRecord) {
    let mut unit = store.begin().await.unwrap();
    unit.insert_endpoint(rec).await.unwrap();
    unit.commit().await.unwrap();
}

fn created(rec: &EndpointRecord) -> NewEvent {
    NewEvent {
        kind: EventKind::EndpointCreated,
        namespace: rec.namespace.clone(),
        subject: rec.spec.name.clone(),
        payload: json!({ "name": rec.spec.name }),
        hook: None,
    }
}

async fn event_count(store: &SqlStore) -> usize {
    store
        .read()
        .await
        .unwrap()
        .events_after(0, 10_000)
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_unit_of_work_commits_everything_or_nothing() {
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        let rec = record("alice", "one", None);

        // Dropped without commit: neither the endpoint nor its event.
        let mut unit = store.begin().await.unwrap();
        unit.insert_endpoint(&rec).await.unwrap();
        unit.append_event(created(&rec), Utc::now()).await.unwrap();
        drop(unit);
        let mut read = store.read().await.unwrap();
        assert!(
            read.endpoint("alice", "one").await.unwrap().is_none(),
            "{b}"
        );
        drop(read);
        assert_eq!(event_count(&store).await, 0, "{b}");

        // Committed: both.
        let mut unit = store.begin().await.unwrap();
        unit.insert_endpoint(&rec).await.unwrap();
        let ev = unit.append_event(created(&rec), Utc::now()).await.unwrap();
        unit.commit().await.unwrap();
        let stored = store
            .read()
            .await
            .unwrap()
            .endpoint("alice", "one")
            .await
            .unwrap();
        assert_eq!(stored.as_ref().map(|r| &r.spec), Some(&rec.spec), "{b}");
        let events = store
            .read()
            .await
            .unwrap()
            .events_after(0, 10)
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{b}");
        assert_eq!(events[0].id, ev.id, "{b}");
        assert_eq!(events[0].kind, EventKind::EndpointCreated, "{b}");
        assert_eq!(events[0].payload, json!({"name": "one"}), "{b}");

        // A change that fails part-way, committed all the same: its first step does not land either.
        let other = record("alice", "two", None);
        let mut unit = store.begin().await.unwrap();
        unit.insert_endpoint(&other).await.unwrap();
        unit.append_event(created(&other), Utc::now())
            .await
            .unwrap();
        let again = unit.insert_endpoint(&record("alice", "one", None)).await;
        assert!(
            matches!(again, Err(StoreError::Conflict(_))),
            "{b}: {again:?}"
        );
        let committed = unit.commit().await;
        let mut read = store.read().await.unwrap();
        assert!(
            read.endpoint("alice", "two").await.unwrap().is_none(),
            "{b}: the step before the failure landed (commit said {committed:?})"
        );
        drop(read);
        assert_eq!(
            event_count(&store).await,
            1,
            "{b}: commit said {committed:?}"
        );
        assert!(
            committed.is_err(),
            "{b}: the commit says it committed nothing"
        );
    }
}

#[tokio::test]
async fn events_are_read_in_order_after_a_position() {
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        let mut unit = store.begin().await.unwrap();
        for i in 0..5 {
            let rec = record("ns", &format!("e{i}"), None);
            unit.append_event(created(&rec), Utc::now()).await.unwrap();
        }
        unit.commit().await.unwrap();
        let all = store
            .read()
            .await
            .unwrap()
            .events_after(0, 100)
            .await
            .unwrap();
        let subjects: Vec<&str> = all.iter().map(|e| e.subject.as_str()).collect();
        assert_eq!(subjects, ["e0", "e1", "e2", "e3", "e4"], "{b}");
        let rest = store
            .read()
            .await
            .unwrap()
            .events_after(all[2].seq, 2)
            .await
            .unwrap();
        let subjects: Vec<&str> = rest.iter().map(|e| e.subject.as_str()).collect();
        assert_eq!(subjects, ["e3", "e4"], "{b}");
    }
}

#[tokio::test]
async fn a_custom_route_belongs_to_one_endpoint() {
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        insert(
            &store,
            &record("alice", "a", Some(("api.example.com", "/v1"))),
        )
        .await;
        // The same route in other spellings, from another namespace: refused by the index.
        for (domain, path) in [("api.example.com", "/v1"), ("API.Example.com.", "/v1/")] {
            let mut unit = store.begin().await.unwrap();
            let err = unit
                .insert_endpoint(&record("bob", "b", Some((domain, path))))
                .await;
            match err {
                Err(StoreError::Conflict(m)) => assert!(m.contains("already routes"), "{b}: {m}"),
                other => panic!("{b}: {domain}{path}: {other:?}"),
            }
        }
        // Another path on the same domain is another route; an update onto a taken route is refused.
        insert(
            &store,
            &record("bob", "b", Some(("api.example.com", "/v2"))),
        )
        .await;
        let mut moved = store
            .read()
            .await
            .unwrap()
            .endpoint("bob", "b")
            .await
            .unwrap()
            .expect("b");
        moved.spec = record("bob", "b", Some(("api.example.com", "/v1"))).spec;
        let mut unit = store.begin().await.unwrap();
        let err = unit.update_endpoint(&moved).await;
        assert!(matches!(err, Err(StoreError::Conflict(_))), "{b}: {err:?}");
        drop(unit);
        // Endpoints without a route never clash.
        let mut unit = store.begin().await.unwrap();
        unit.insert_endpoint(&record("bob", "c", None))
            .await
            .unwrap();
        unit.insert_endpoint(&record("bob", "d", None))
            .await
            .unwrap();
        unit.commit().await.unwrap();
    }
}

#[tokio::test]
async fn an_update_names_the_version_it_read() {
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        let rec = record("alice", "v", None);
        insert(&store, &rec).await;
        let mut unit = store.begin().await.unwrap();
        let mut next = rec.clone();
        next.state = EndpointState::Initializing;
        let saved = unit.update_endpoint(&next).await.unwrap();
        unit.commit().await.unwrap();
        assert_eq!(saved.version, 2, "{b}");
        // A writer still holding version 1 is told it is stale, and nothing changes.
        let mut unit = store.begin().await.unwrap();
        next.state = EndpointState::Failed;
        let stale = unit.update_endpoint(&next).await;
        assert!(matches!(stale, Err(StoreError::Stale)), "{b}: {stale:?}");
        drop(unit);
        let now = store
            .read()
            .await
            .unwrap()
            .endpoint("alice", "v")
            .await
            .unwrap();
        assert_eq!(
            now.map(|r| r.state),
            Some(EndpointState::Initializing),
            "{b}"
        );
    }
}

fn item(repo_id: &str, recipe: &str) -> CatalogEntry {
    serde_json::from_value(json!({
        "modelName": repo_id.split('/').nth(1).unwrap_or(repo_id),
        "createdAt": "2026-01-01T00:00:00.000Z",
        "authorName": repo_id.split('/').next().unwrap_or(repo_id),
        "license": "apache-2.0",
        "repoId": repo_id,
        "task": "text-generation",
        "recipes": [{
            "accelerator": "cpu",
            "engineType": "llamacpp",
            "publicId": recipe,
            "memoryGb": 1.0
        }]
    }))
    .expect("catalog entry")
}

#[tokio::test]
async fn a_recipe_id_names_one_recipe_in_the_catalog() {
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        let now = Utc::now();
        let mut unit = store.begin().await.unwrap();
        assert!(
            unit.put_catalog_entry(&item("a/m", "r1"), now)
                .await
                .unwrap(),
            "{b}"
        );
        unit.commit().await.unwrap();
        let mut unit = store.begin().await.unwrap();
        match unit.put_catalog_entry(&item("b/m", "r1"), now).await {
            Err(StoreError::Conflict(m)) => assert!(m.contains("already used by a/m"), "{b}: {m}"),
            other => panic!("{b}: {other:?}"),
        }
        drop(unit);
        // Replacing the item that owns the id is fine; once it is gone, the id is free.
        let mut unit = store.begin().await.unwrap();
        assert!(
            !unit
                .put_catalog_entry(&item("a/m", "r1"), now)
                .await
                .unwrap(),
            "{b}"
        );
        assert!(unit.delete_catalog_entry("a/m").await.unwrap(), "{b}");
        assert!(
            unit.put_catalog_entry(&item("b/m", "r1"), now)
                .await
                .unwrap(),
            "{b}"
        );
        unit.commit().await.unwrap();
        let entries = store.read().await.unwrap().catalog_entries().await.unwrap();
        let ids: Vec<&str> = entries.iter().map(|e| e.repo_id.as_str()).collect();
        assert_eq!(ids, ["b/m"], "{b}");
        // The seed is claimed once in a store's life.
        let mut unit = store.begin().await.unwrap();
        assert!(unit.claim_catalog_seed(now).await.unwrap(), "{b}");
        assert!(!unit.claim_catalog_seed(now).await.unwrap(), "{b}");
        unit.commit().await.unwrap();
    }
}

#[tokio::test]
async fn account_names_are_unique_across_users_and_orgs() {
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        let new = |kind, name: &str| NewAccount {
            kind,
            name: name.into(),
            fullname: name.into(),
            email: None,
            is_admin: false,
        };
        let mut unit = store.begin().await.unwrap();
        unit.create_account(new(AccountKind::User, "alice"), Utc::now())
            .await
            .unwrap();
        unit.commit().await.unwrap();
        let mut unit = store.begin().await.unwrap();
        let taken = unit
            .create_account(new(AccountKind::Org, "alice"), Utc::now())
            .await;
        assert!(
            matches!(taken, Err(StoreError::Conflict(_))),
            "{b}: {taken:?}"
        );
        drop(unit);
        assert_eq!(
            store.read().await.unwrap().count_accounts().await.unwrap(),
            1,
            "{b}"
        );
    }
}

/// A password hash belongs to a user, is found by the name in any case, and can be cleared; an
/// account whose name clashes with an older one's (from before names were unique without regard to
/// case) is found by its exact name.
#[tokio::test]
async fn a_user_s_password_hash_is_found_by_its_name_in_any_case() {
    for (store, dir) in stores().await {
        let b = store.backend().as_str();
        let new = |kind, name: &str| NewAccount {
            kind,
            name: name.into(),
            fullname: name.into(),
            email: None,
            is_admin: false,
        };
        let mut unit = store.begin().await.unwrap();
        unit.create_account(new(AccountKind::User, "alice"), Utc::now())
            .await
            .unwrap();
        unit.create_account(new(AccountKind::Org, "acme"), Utc::now())
            .await
            .unwrap();
        assert!(unit.set_password_hash("alice", Some("$h1")).await.unwrap());
        assert!(
            !unit.set_password_hash("acme", Some("$h1")).await.unwrap(),
            "{b}"
        );
        assert!(!unit.set_password_hash("nobody", Some("$h1")).await.unwrap());
        unit.commit().await.unwrap();

        let mut s = store.read().await.unwrap();
        for name in ["alice", "ALICE", "aLiCe"] {
            let (account, hash) = s.password_hash_of(name).await.unwrap().expect(name);
            assert_eq!(
                (account.name.as_str(), hash.as_deref()),
                ("alice", Some("$h1")),
                "{b}: {name}"
            );
        }
        let (org, hash) = s.password_hash_of("Acme").await.unwrap().unwrap();
        assert_eq!((org.kind, hash), (AccountKind::Org, None), "{b}");
        assert!(s.password_hash_of("nobody").await.unwrap().is_none());
        assert!(s.set_password_hash("alice", None).await.unwrap());
        assert_eq!(s.password_hash_of("alice").await.unwrap().unwrap().1, None);

        // A store from before the rule: `Alice`, younger than `alice`, keys as `alice#<id>`.
        let Some(dir) = dir else { continue };
        let pool = sqlx::AnyPool::connect(&format!(
            "sqlite://{}",
            dir.path().join("switchyard.db").display()
        ))
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO accounts (id, kind, name, fullname, is_admin, created_at, name_key, password_hash) \
             VALUES ('old2', 'user', 'Alice', 'Alice', 0, '2030-01-01T00:00:00.000Z', 'alice#old2', '$h2')",
        )
        .execute(&pool)
        .await
        .unwrap();
        let found = |name: &'static str| {
            let store = &store;
            async move {
                let (a, h) = store
                    .read()
                    .await
                    .unwrap()
                    .password_hash_of(name)
                    .await
                    .unwrap()
                    .unwrap();
                (a.name, h)
            }
        };
        assert_eq!(found("Alice").await, ("Alice".into(), Some("$h2".into())));
        assert_eq!(found("alice").await, ("alice".into(), None));
        assert_eq!(found("ALICE").await, ("alice".into(), None));
        pool.close().await;
    }
}

/// Each backend's store by URL, not opened yet: SQLite in a temp dir (kept while the dir lives), and a new
/// PostgreSQL database when there is a server for it.
async fn store_urls() -> Vec<(StoreUrl, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut out = vec![(StoreUrl::Sqlite(dir.path().join("s.db")), Some(dir))];
    match common::postgres_admin_url() {
        Some(admin) => {
            let url = StoreUrl::parse(&common::fresh_postgres(&admin).await).expect("pg url");
            out.push((url, None));
        }
        None => eprintln!("PostgreSQL half skipped: SWITCHYARD_TEST_POSTGRES is not set"),
    }
    out
}

/// The store's record of its migrations, in order: version, name, checksum, when applied.
async fn migrations_on_record(url: &StoreUrl) -> Vec<(i64, String, String, String)> {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url.url()).await.unwrap();
    let rows = sqlx::query_as(
        "SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows
}

#[tokio::test]
async fn reopening_applies_nothing_twice() {
    for (url, _dir) in store_urls().await {
        let b = url.backend().as_str();
        let store = SqlStore::open(&url, Synchronous::Normal).await.unwrap();
        insert(&store, &record("a", "kept", None)).await;
        store.close().await;
        let before = migrations_on_record(&url).await;
        let shipped = std::fs::read_dir(format!("{}/migrations/{b}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
            })
            .count();
        assert_eq!(
            before.len(),
            shipped,
            "{b}: each migration applied once: {before:?}"
        );

        let store = SqlStore::open(&url, Synchronous::Full).await.unwrap();
        let kept = store
            .read()
            .await
            .unwrap()
            .endpoint("a", "kept")
            .await
            .unwrap();
        assert!(kept.is_some(), "{b}");
        store.close().await;
        assert_eq!(
            migrations_on_record(&url).await,
            before,
            "{b}: reopening applied (or recorded) a migration again"
        );
    }
}

/// A store written before the migrations table (schema 1, counted in `PRAGMA user_version`) is
/// adopted and brought up to date, its custom routes keyed for the new unique index.
#[tokio::test]
async fn a_store_from_before_the_outbox_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&format!("sqlite://{}?mode=rwc", path.display()))
            .await
            .unwrap();
        sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_initial.sql"))
            .execute(&pool)
            .await
            .unwrap();
        sqlx::raw_sql("PRAGMA user_version = 1")
            .execute(&pool)
            .await
            .unwrap();
        let rec = record("alice", "old", Some(("Old.Example.com", "/x/")));
        sqlx::query(
            "INSERT INTO endpoints (id, namespace, name, spec, state, created_at, updated_at, created_by, updated_by) \
             VALUES ('e1', 'alice', 'old', $1, 'running', 't', 't', '{}', '{}')",
        )
        .bind(serde_json::to_string(&rec.spec).unwrap())
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO catalog_items (repo_id, item, updated_at) VALUES ('a/m', $1, 't')",
        )
        .bind(serde_json::to_string(&item("a/m", "r-old")).unwrap())
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    }
    let store = SqlStore::open(&StoreUrl::Sqlite(path), Synchronous::Normal)
        .await
        .expect("migrates");
    let mut unit = store.begin().await.unwrap();
    let clash = unit
        .insert_endpoint(&record("bob", "new", Some(("old.example.com", "/x"))))
        .await;
    assert!(matches!(clash, Err(StoreError::Conflict(_))), "{clash:?}");
    drop(unit);
    let mut unit = store.begin().await.unwrap();
    let clash = unit
        .put_catalog_entry(&item("b/m", "r-old"), Utc::now())
        .await;
    assert!(matches!(clash, Err(StoreError::Conflict(_))), "{clash:?}");
}

#[tokio::test]
async fn a_whole_store_copies_across_backends_and_back() {
    let Some(admin) = common::postgres_admin_url() else {
        eprintln!("skipped: SWITCHYARD_TEST_POSTGRES is not set");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = StoreUrl::Sqlite(dir.path().join("from.db"));
    let from = SqlStore::open(&sqlite, Synchronous::Normal).await.unwrap();
    let mut unit = from.begin().await.unwrap();
    let alice = unit
        .create_account(
            NewAccount {
                kind: AccountKind::User,
                name: "alice".into(),
                fullname: "Alice".into(),
                email: Some("alice@example.com".into()),
                is_admin: true,
            },
            Utc::now(),
        )
        .await
        .unwrap();
    let rec = record("alice", "copied", Some(("c.example.com", "/")));
    unit.insert_endpoint(&rec).await.unwrap();
    unit.append_event(created(&rec), Utc::now()).await.unwrap();
    unit.put_catalog_entry(&item("a/m", "r1"), Utc::now())
        .await
        .unwrap();
    // Its history: a sample and a decision.
    let mut sample = Sample::default();
    sample.statuses[1] = 7;
    let row = SeriesRow {
        endpoint_id: rec.id.clone(),
        step: 60,
        bucket: 1_700_000_040,
        server_id: "node-a".into(),
        sample,
    };
    unit.put_samples(std::slice::from_ref(&row)).await.unwrap();
    let decision = Decision {
        at: Utc::now().trunc_subsecs(3),
        kind: DecisionKind::ScaledUp,
        reason: "the minimum in force is 2".into(),
        from: Some(1),
        to: Some(2),
        measured: None,
    };
    unit.add_decisions(&rec.id, std::slice::from_ref(&decision))
        .await
        .unwrap();
    unit.commit().await.unwrap();

    let pg = StoreUrl::parse(&common::fresh_postgres(&admin).await).unwrap();
    let to = SqlStore::open(&pg, Synchronous::Normal).await.unwrap();
    let report = copy_store(&from, &to).await.expect("copy");
    let counted = |t: &str| report.iter().find(|(n, _)| *n == t).map(|(_, c)| *c);
    assert_eq!(counted("accounts"), Some(1));
    assert_eq!(counted("endpoints"), Some(1));
    assert_eq!(counted("events"), Some(1));
    assert_eq!(counted("catalog_recipes"), Some(1));
    assert_eq!(counted("endpoint_series"), Some(1));
    assert_eq!(counted("endpoint_decisions"), Some(1));
    let mut read = to.read().await.unwrap();
    let rows = read.samples(&rec.id, 60, 0, i64::MAX).await.unwrap();
    assert_eq!(rows, [row]);
    let since = chrono::DateTime::UNIX_EPOCH;
    assert_eq!(
        read.decisions(&rec.id, since, 10).await.unwrap(),
        [decision]
    );
    drop(read);
    let got = to
        .read()
        .await
        .unwrap()
        .endpoint("alice", "copied")
        .await
        .unwrap();
    assert_eq!(got, Some(rec.clone()));
    let who = to
        .read()
        .await
        .unwrap()
        .account_by_name("alice")
        .await
        .unwrap();
    assert_eq!(who, Some(alice));
    // The copy keeps the rules: the route is still taken there.
    let mut unit = to.begin().await.unwrap();
    let clash = unit
        .insert_endpoint(&record("bob", "x", Some(("c.example.com", "/"))))
        .await;
    assert!(matches!(clash, Err(StoreError::Conflict(_))), "{clash:?}");
    drop(unit);

    // A target that holds anything is refused, and left as it was.
    let again = copy_store(&from, &to).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    // And back to a new SQLite file.
    let back = SqlStore::open(
        &StoreUrl::Sqlite(dir.path().join("back.db")),
        Synchronous::Normal,
    )
    .await
    .unwrap();
    copy_store(&to, &back).await.expect("copy back");
    let got = back
        .read()
        .await
        .unwrap()
        .endpoint("alice", "copied")
        .await
        .unwrap();
    assert_eq!(got, Some(rec));
    assert_eq!(event_count(&back).await, 1);
}

#[tokio::test]
async fn an_online_backup_is_a_whole_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open(
        &StoreUrl::Sqlite(dir.path().join("live.db")),
        Synchronous::Normal,
    )
    .await
    .unwrap();
    insert(&store, &record("a", "backed", None)).await;
    // A session holds the store open while the backup runs.
    let _open = store.read().await.unwrap();
    let file = dir.path().join("backup.db");
    store.backup(&file).await.expect("backup");
    let copy = SqlStore::open(&StoreUrl::Sqlite(file.clone()), Synchronous::Normal)
        .await
        .unwrap();
    assert!(copy
        .read()
        .await
        .unwrap()
        .endpoint("a", "backed")
        .await
        .unwrap()
        .is_some());
    // Never over an existing file.
    assert!(matches!(
        store.backup(&file).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.backend(), Backend::Sqlite);
}

/// A change of `acme/m`, which [`watching_webhook`]'s webhook watches.
fn watched_event() -> NewEvent {
    NewEvent {
        kind: EventKind::RepoUpdated,
        namespace: "acme".into(),
        subject: "acme/m".into(),
        payload: json!({}),
        hook: Some(json!({"event": {"action": "update", "scope": "repo.config"}})),
    }
}

/// A webhook of a new user `owner` watching `acme/m` (repo events), stored directly.
async fn watching_webhook(store: &SqlStore) -> String {
    use switchyard_server::model::webhook::{Domain, Watched, WatchedKind};
    use switchyard_server::store::WebhookRecord;
    let mut unit = store.begin().await.unwrap();
    let owner = unit
        .create_account(
            NewAccount {
                kind: AccountKind::User,
                name: "owner".into(),
                fullname: "owner".into(),
                email: None,
                is_admin: false,
            },
            Utc::now(),
        )
        .await
        .unwrap();
    let hook = WebhookRecord {
        id: "wh1".into(),
        owner_id: owner.id.clone(),
        owner: "owner".into(),
        url: "http://127.0.0.1:9/".into(),
        watched: vec![Watched {
            kind: WatchedKind::Model,
            name: "acme/m".into(),
        }],
        domains: vec![Domain::Repo],
        secret: None,
        signing_keys: String::new(),
        disabled: false,
        disabled_reason: None,
        held_until: None,
        failing_since: None,
        created_by: owner.id,
        created_at: Utc::now(),
        updated_at: Utc::now(),
        last_attempt: None,
    };
    unit.create_webhook(&hook).await.unwrap();
    unit.commit().await.unwrap();
    hook.id
}

#[tokio::test]
async fn deliveries_are_claimed_once_and_a_server_takes_back_its_own_claims() {
    use switchyard_server::store::DeliveryQueue;
    for (store, _dir) in stores().await {
        let b = store.backend().as_str();
        let webhook = watching_webhook(&store).await;
        let mut unit = store.begin().await.unwrap();
        for _ in 0..4 {
            unit.append_event(watched_event(), Utc::now())
                .await
                .unwrap();
        }
        unit.commit().await.unwrap();
        let now = Utc::now();
        let lease = now + chrono::Duration::seconds(60);
        let a = store
            .claim_deliveries("nodeA:1", now, lease, 3, None)
            .await
            .unwrap();
        let b_claim = store
            .claim_deliveries("nodeB:1", now, lease, 3, None)
            .await
            .unwrap();
        assert_eq!(
            (a.len(), b_claim.len()),
            (3, 1),
            "{b}: each delivery claimed once"
        );
        assert!(a.iter().all(|c| c.webhook_id == webhook));
        let nothing = store
            .claim_deliveries("nodeA:2", now, lease, 3, None)
            .await
            .unwrap();
        assert!(nothing.is_empty(), "{b}: nothing left to claim");
        // nodeA restarts: its three are due again at once, nodeB's stays claimed.
        let back = store.release_claims_starting("nodeA:", now).await.unwrap();
        assert_eq!(back, 3, "{b}");
        assert!(
            store
                .still_claimed(&b_claim[0].id, "nodeB:1")
                .await
                .unwrap(),
            "{b}"
        );
        assert!(
            !store.still_claimed(&a[0].id, "nodeA:1").await.unwrap(),
            "{b}"
        );
        let again = store
            .claim_deliveries("nodeA:3", now, lease, 10, None)
            .await
            .unwrap();
        assert_eq!(again.len(), 3, "{b}");
    }
}

/// PostgreSQL: a disable (which holds the webhook's row, then cancels its deliveries) and a worker
/// recording an attempt's outcome (the delivery and the webhook's failing streak) take the two rows in
/// one order, so neither is aborted as a deadlock. The outcome is made to wait on the disable's lock
/// before the disable goes on; a cancelled delivery then records nothing.
#[tokio::test]
async fn a_disable_and_an_outcome_recorded_at_once_do_not_deadlock() {
    use sqlx::{Connection, Row};
    use switchyard_server::store::{DeliveryQueue, Outcome};
    let Some(admin) = common::postgres_admin_url() else {
        eprintln!("skipped: SWITCHYARD_TEST_POSTGRES is not set");
        return;
    };
    let url = common::fresh_postgres(&admin).await;
    let store = SqlStore::open(&StoreUrl::parse(&url).unwrap(), Synchronous::Normal)
        .await
        .unwrap();
    let webhook = watching_webhook(&store).await;
    let mut unit = store.begin().await.unwrap();
    unit.append_event(watched_event(), Utc::now())
        .await
        .unwrap();
    unit.commit().await.unwrap();
    let now = Utc::now();
    let claimed = store
        .claim_deliveries("node:1", now, now + chrono::Duration::seconds(60), 1, None)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);

    let mut disable = store.begin().await.unwrap();
    disable.lock_webhook(&webhook).await.unwrap();
    let outcome = Outcome {
        delivery_id: claimed[0].id.clone(),
        webhook_id: webhook.clone(),
        claim_token: "node:1".into(),
        number: 1,
        started_at: now,
        duration_ms: 1,
        status_code: Some(500),
        error_class: None,
        error: None,
        response: None,
        next_attempt_at: Some(now + chrono::Duration::seconds(1)),
        state: "failed",
        manual: false,
        now: Utc::now(),
    };
    let worker = store.clone();
    let recording = tokio::spawn(async move { worker.record_outcome(&outcome).await });
    // The outcome's transaction is waiting on a row lock (the webhook's, held above).
    let mut look = sqlx::PgConnection::connect(&url).await.unwrap();
    loop {
        let waiting: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut look)
        .await
        .unwrap()
        .get("n");
        if waiting > 0 {
            break;
        }
        assert!(
            !recording.is_finished(),
            "the outcome did not wait for the disable"
        );
        tokio::task::yield_now().await;
    }
    disable
        .set_webhook_disabled(&webhook, true, Some("test"), Utc::now())
        .await
        .expect("the disable goes on");
    disable.commit().await.expect("and commits");
    recording
        .await
        .unwrap()
        .expect("the outcome is not aborted either");

    let row = sqlx::query(
        "SELECT d.state, (SELECT COUNT(*) FROM delivery_attempts a WHERE a.delivery_id = d.id) AS n \
         FROM deliveries d WHERE d.id = $1",
    )
    .bind(&claimed[0].id)
    .fetch_one(&mut look)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>("state"), "cancelled");
    assert_eq!(
        row.get::<i64, _>("n"),
        0,
        "a cancelled delivery records no attempt"
    );
}
