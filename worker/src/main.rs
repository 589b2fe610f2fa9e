//! `mcp-tasks-worker`: runs the built-in tools selected by `MCPT_TOOLS` and those declared
//! in `MCPT_TOOLS_FILE` (`catalog`) on `MCPT_QUEUES`;
//! serves `/healthz`, `/readyz` and `/metrics` on `MCPT_ADMIN_ADDR` and prints
//! `listening on http://ADDR` for it.

use std::process::ExitCode;

use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_shared::{shutdown, telemetry};

// The allocator: glibc's malloc/free were a fifth of the workers' CPU samples under load
// (many small, short-lived allocations across threads). Not the gateway's: there it cut
// instructions per request by 12-15 % but raised memory per idle listener by a third
// (30.7 -> 40.3 KB at 10,000 open streams).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let config = match WorkerConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-tasks-worker: {e}");
            return ExitCode::from(64);
        }
    };
    // Checked before anything starts, so a mistake is the only line on stderr.
    let builtin = mcp_tasks_worker::tools::packs(&config.tools);
    let catalog = match mcp_tasks_catalog::from_env(&config, &builtin) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-tasks-worker: {e}");
            return ExitCode::from(64);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-tasks-worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // [[upstream]] servers are started and listed before logging starts, so a failure is
    // still the only line on stderr.
    let (tools, providers) = match runtime.block_on(catalog.connect()) {
        Ok(connected) => (
            builtin
                .into_iter()
                .chain(connected.tools)
                .collect::<Vec<_>>(),
            connected.providers,
        ),
        Err(e) => {
            eprintln!("mcp-tasks-worker: {e}");
            return ExitCode::from(64);
        }
    };
    // Inside the runtime: the gRPC exporter needs one.
    let telemetry = match runtime.block_on(async { telemetry::init("worker") }) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mcp-tasks-worker: {e}");
            return ExitCode::from(64);
        }
    };
    let result = runtime.block_on(async {
        let admin = match config.admin_addr {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("cannot listen on {addr} (MCPT_ADMIN_ADDR): {e}"))?;
                let local = listener.local_addr().map_err(|e| e.to_string())?;
                println!("listening on http://{local}");
                Some(listener)
            }
            None => None,
        };
        mcp_tasks_worker::run_serving(config, tools, providers, admin, shutdown::on_signal())
            .await
            .map_err(|e| mcp_tasks_shared::error_chain(&e))
    });
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-tasks-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
