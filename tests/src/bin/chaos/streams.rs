//! The listen streams: every submitted task is held on a `subscriptions/listen` stream of
//! at most [`CHUNK`] ids, reopened whenever it ends or breaks.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::GATEWAYS;
use crate::state::{Shared, lock};

/// Submitted tasks are held on listen streams of at most this many ids.
const CHUNK: usize = 200;

/// Collect newly submitted ids into chunks and hold each on its own listen stream.
pub(crate) async fn stream_manager(shared: Arc<Shared>) {
    let mut chunk_no = 0usize;
    let mut streams = Vec::new();
    while !shared.done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fresh = std::mem::take(&mut lock(&shared.tasks).unlistened);
        for ids in fresh.chunks(CHUNK) {
            streams.push(tokio::spawn(hold_stream(
                shared.clone(),
                ids.to_vec(),
                chunk_no,
            )));
            chunk_no += 1;
        }
    }
    for s in streams {
        let _ = s.await;
    }
}

pub(crate) async fn hold_stream(shared: Arc<Shared>, ids: Vec<String>, chunk: usize) {
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut attempt = 0usize;
    while !shared.done.load(Ordering::Relaxed) {
        let gateway = chunk + attempt;
        let listen_id = format!("chaos-{chunk}-{attempt}");
        attempt += 1;
        if attempt > 1 {
            shared.stream_reopens.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Ok(mut sse) = shared.client(gateway).listen(listen_id, &refs).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let Some(ack) = sse.next(Duration::from_secs(10)).await else {
            continue;
        };
        if ack["method"] != "notifications/subscriptions/acknowledged" {
            continue;
        }
        let acked: Vec<&str> = ack["params"]["notifications"]["taskIds"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if acked.len() < ids.len() {
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| !acked.contains(&id.as_str()))
                .collect();
            let tasks = &mut *lock(&shared.tasks);
            for id in missing {
                if let Some(&i) = tasks.by_id.get(id) {
                    let at = shared.elapsed().as_secs_f64();
                    tasks.list[i]
                        .notes
                        .push(format!("left out of a listen acknowledgement at {at:.1}s"));
                }
            }
        }
        shared.streams_open.fetch_add(1, Ordering::Relaxed);
        let source = format!("listen(gateway {})", gateway % GATEWAYS);
        loop {
            let asked = Instant::now();
            match sse.next(Duration::from_millis(500)).await {
                Some(msg) if msg["method"] == "notifications/tasks" => {
                    shared.observe(&msg["params"], &source)
                }
                // The listen result: the server ended the stream.
                Some(msg) if msg.get("id").is_some() => break,
                Some(_) => {}
                None if asked.elapsed() < Duration::from_millis(450) => break,
                None if shared.done.load(Ordering::Relaxed) => break,
                None => {}
            }
        }
        shared.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}
