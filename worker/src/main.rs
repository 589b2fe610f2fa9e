//! `mcp-tasks-worker`: runs the built-in tools selected by `MCPT_TOOLS` on `MCPT_QUEUES`.

use std::process::ExitCode;

use mcp_tasks_shared::config::WorkerConfig;
use mcp_tasks_shared::{shutdown, telemetry};

fn main() -> ExitCode {
    let config = match WorkerConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-tasks-worker: {e}");
            return ExitCode::from(64);
        }
    };
    telemetry::init("worker");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-tasks-worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let tools = mcp_tasks_worker::tools::packs(&config.tools);
        mcp_tasks_worker::run(config, tools, shutdown::on_signal()).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-tasks-worker: {}", mcp_tasks_shared::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
