//! The engines' own load, read from each replica's `/metrics` (vLLM's, SGLang's, llama.cpp's or Text
//! Embeddings Inference's names) and recorded on its backend ([`crate::routing::EngineFigures`]), where the
//! balancer `least_load` finds it. The leader's reconciler reads it once a tick for the endpoints that scale on
//! it (`inferenceLoad`) or balance by it; a follower reads it for the endpoints it balances by it, at most once a
//! [`FOLLOW_READ`].

use std::sync::Arc;
use std::time::Duration;

use crate::routing::Backend;

/// Longest a read of `/metrics` may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a follower reads the engines' figures.
pub const FOLLOW_READ: Duration = Duration::from_secs(1);

/// Reads each of `backends`' figures, records them on it (see [`crate::routing::EngineFigures::record`]) at
/// `now_ms`, and returns those read.
pub async fn read_into<'b>(
    backends: impl Iterator<Item = &'b Arc<Backend>>,
    now_ms: i64,
) -> Vec<EngineLoad> {
    let backends: Vec<&Arc<Backend>> = backends.collect();
    // What this server has in flight to each, as the engine sees it: taken as the read goes out.
    let ours: Vec<u32> = backends.iter().map(|b| b.in_flight.get()).collect();
    let read = futures_util::future::join_all(backends.iter().map(|b| scrape(b))).await;
    for ((b, load), ours) in backends.iter().zip(&read).zip(ours) {
        if let Some(load) = load {
            let waiting = load.waiting.map(|w| others_waiting(w, load.running, ours));
            b.engine.record(waiting, load.kv_cache_percent, now_ms);
        }
    }
    read.into_iter().flatten().collect()
}

/// Of `waiting` requests in an engine that runs `running`, those others sent, when this server has `ours`
/// in flight to it: its own are counted live by the balancer, and a copy of them up to a tick old would
/// steer requests by a queue long gone. Those of ours beyond what the engine runs are taken to be waiting
/// (all of them when it does not say what it runs).
fn others_waiting(waiting: f64, running: Option<f64>, ours: u32) -> f64 {
    let ours = f64::from(ours);
    let ours_waiting = running.map_or(ours, |r| (ours - r).max(0.0));
    (waiting - ours_waiting).max(0.0)
}

/// Saturation an engine reports on `/metrics`.
#[derive(Debug, Default, PartialEq)]
pub struct EngineLoad {
    pub kv_cache_percent: Option<f64>,
    pub waiting: Option<f64>,
    /// Requests it runs now (in a batch, holding a slot).
    pub running: Option<f64>,
}

/// Reads vLLM's (`vllm:kv_cache_usage_perc`, a fraction, and `vllm:num_requests_waiting`), SGLang's
/// (`sglang:token_usage`, a fraction, and `sglang:num_queue_reqs`), llama.cpp's (`llamacpp:kv_cache_usage_ratio`
/// and `llamacpp:requests_deferred`) or Text Embeddings Inference's (`te_queue_size`) gauges, with the requests
/// each runs (`vllm:num_requests_running`, `sglang:num_running_reqs`, `llamacpp:requests_processing`,
/// `te_batch_current_size`); series of one name are summed (waiting, running) or averaged (usage).
pub fn parse_engine_metrics(text: &str) -> EngineLoad {
    let mut usage = Vec::new();
    let mut waiting = Vec::new();
    let mut running = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series).trim();
        match name {
            "vllm:kv_cache_usage_perc"
            | "vllm:gpu_cache_usage_perc"
            | "sglang:token_usage"
            | "llamacpp:kv_cache_usage_ratio" => usage.push(value * 100.0),
            "vllm:num_requests_waiting"
            | "sglang:num_queue_reqs"
            | "llamacpp:requests_deferred"
            | "te_queue_size" => waiting.push(value),
            "vllm:num_requests_running"
            | "sglang:num_running_reqs"
            | "llamacpp:requests_processing"
            | "te_batch_current_size" => running.push(value),
            _ => {}
        }
    }
    EngineLoad {
        kv_cache_percent: (!usage.is_empty())
            .then(|| usage.iter().sum::<f64>() / usage.len() as f64),
        waiting: (!waiting.is_empty()).then(|| waiting.iter().sum()),
        running: (!running.is_empty()).then(|| running.iter().sum()),
    }
}

/// Reads `backend`'s `/metrics`: `None` when it does not answer in time, or not with a success.
async fn scrape(backend: &Backend) -> Option<EngineLoad> {
    let req = axum::http::Request::get("/metrics")
        .body(Default::default())
        .ok()?;
    let (status, bytes) = backend.call(req, 1024 * 1024, SCRAPE_TIMEOUT).await?;
    status
        .is_success()
        .then(|| parse_engine_metrics(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_metrics() {
        let text = "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\nvllm:num_requests_waiting{model_name=\"m\"} 3\nvllm:num_requests_running 2\nother 1\n";
        assert_eq!(
            parse_engine_metrics(text),
            EngineLoad {
                kv_cache_percent: Some(50.0),
                waiting: Some(3.0),
                running: Some(2.0),
            }
        );
        let sglang =
            "sglang:token_usage 0.25\nsglang:num_queue_reqs 7\nsglang:num_running_reqs 1\n";
        assert_eq!(
            parse_engine_metrics(sglang),
            EngineLoad {
                kv_cache_percent: Some(25.0),
                waiting: Some(7.0),
                running: Some(1.0),
            }
        );
        // llama.cpp's server (with `--metrics`), and Text Embeddings Inference's queue.
        let llama = "llamacpp:kv_cache_usage_ratio 0.5\nllamacpp:requests_deferred 2\n";
        assert_eq!(
            parse_engine_metrics(llama),
            EngineLoad {
                kv_cache_percent: Some(50.0),
                waiting: Some(2.0),
                running: None,
            }
        );
        let tei = "te_queue_size 4\nte_batch_current_size 2\n";
        assert_eq!(parse_engine_metrics(tei).waiting, Some(4.0));
        assert_eq!(parse_engine_metrics(tei).running, Some(2.0));
        assert_eq!(parse_engine_metrics("garbage\n\n"), EngineLoad::default());
    }

    #[test]
    fn the_queue_kept_is_the_one_others_made() {
        // 200 of ours running, 50 waiting from elsewhere: all 50 are others'.
        assert_eq!(others_waiting(50.0, Some(200.0), 200), 50.0);
        // 3 of ours, 1 running: 2 of the 5 waiting are ours.
        assert_eq!(others_waiting(5.0, Some(1.0), 3), 3.0);
        // Not told what it runs: all of ours are taken to wait.
        assert_eq!(others_waiting(5.0, None, 3), 2.0);
        assert_eq!(others_waiting(1.0, None, 3), 0.0);
    }
}
