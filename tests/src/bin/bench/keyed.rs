//! What an idempotency key costs a create: N lifecycles without a key, then N with a fresh
//! key each, between readings of Redis and of the processes, in the same run.

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::costs::{Costs, lifecycles};
use crate::readings::Snap;
use crate::stack::Env;

/// Per-task figures of one batch of lifecycles.
struct Batch {
    commands: f64,
    redis_cpu_us: f64,
    server_cpu_us: Option<f64>,
}

impl Batch {
    fn between(env: &Env, a: &Snap, b: &Snap, n: usize) -> Batch {
        let nf = n as f64;
        let server: f64 = env
            .pids
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| *name != "bench")
            .map(|(i, _)| b.ticks[i].saturating_sub(a.ticks[i]) as f64 / env.clk * 1e6 / nf)
            .sum();
        Batch {
            commands: (b.calls() - a.calls()) as f64 / nf,
            redis_cpu_us: (b.redis_cpu - a.redis_cpu) * 1e6 / nf,
            server_cpu_us: env.own.then_some(server),
        }
    }

    fn json(&self) -> Value {
        json!({
            "commands": self.commands,
            "redis_cpu_us": self.redis_cpu_us,
            "server_cpu_us": self.server_cpu_us,
        })
    }
}

/// `n` lifecycles without a key and `n` with one; their per-task commands and CPU.
pub(crate) async fn key_cost(env: &Env, n: usize) -> Result<Costs> {
    let mut batches = Vec::new();
    for keyed in [false, true] {
        env.drain("the previous phase").await?;
        let a = env.snap().await?;
        lifecycles(&env.http, n, keyed)
            .await
            .with_context(|| format!("lifecycles, keyed: {keyed}"))?;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let b = env.snap().await?;
        batches.push(Batch::between(env, &a, &b, n));
    }
    let (plain, keyed) = (&batches[0], &batches[1]);
    let mut text = vec![format!(
        "idempotency key per create: {n} lifecycles without a key, then {n} with a fresh one each (same run)"
    )];
    text.push(format!(
        "  Redis commands per task   {:.2} → {:.2}   ({:+.2}; the key's check is one HMGET inside the create script)",
        plain.commands,
        keyed.commands,
        keyed.commands - plain.commands
    ));
    text.push(format!(
        "  Redis CPU per task        {:.1} → {:.1} µs   ({:+.1} µs)",
        plain.redis_cpu_us,
        keyed.redis_cpu_us,
        keyed.redis_cpu_us - plain.redis_cpu_us
    ));
    match (plain.server_cpu_us, keyed.server_cpu_us) {
        (Some(p), Some(k)) => text.push(format!(
            "  server CPU per task       {p:.0} → {k:.0} µs   ({:+.0} µs: the key's check, the arguments' digest and the derived id)",
            k - p
        )),
        _ => text.push("  server CPU per task       not measured: an existing stack (--url)".into()),
    }
    Ok(Costs {
        json: json!({"tasks": n, "without_key": plain.json(), "with_key": keyed.json()}),
        text,
    })
}
