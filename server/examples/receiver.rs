//! A webhook receiver as a library user writes it: one route handled by an async function, one
//! appending payloads to a file, behind the hub's shared secret.
//!
//! ```text
//! WEBHOOK_SECRET=s cargo run -p switchyard-server --example receiver
//! curl -X POST -H 'X-Webhook-Secret: s' -d '{"repo": {"type": "model"}, "event": {"action": "update"}}' \
//!      http://127.0.0.1:8000/webhooks/on_update
//! ```

use serde_json::{json, Value};
use switchyard_server::webhooks::receive::{Action, HandlerResult, Receiver};

/// Answers with what it understood of a hub payload; a payload it does not care about gets `{"ok": true}`.
async fn on_update(payload: Value) -> HandlerResult {
    if payload["event"]["action"] != "update" {
        return Ok(None);
    }
    let kind = payload["repo"]["type"].as_str().unwrap_or("unknown");
    Ok(Some(json!({"updated": kind})))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let receiver = Receiver::builder()
        .secret(std::env::var("WEBHOOK_SECRET").ok())
        .handler("on_update", Action::function(on_update))
        .handler("/audit/all", Action::Append("webhooks.jsonl".into()))
        .build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    receiver
        .serve(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
