//! `mcp-tasks-gateway`: serves MCP on `MCPT_LISTEN_ADDR` and prints `listening on http://ADDR`.

use std::process::ExitCode;

use mcp_tasks_shared::config::GatewayConfig;
use mcp_tasks_shared::{shutdown, telemetry};

// Small blocks from mimalloc, large ones from glibc's allocator: see `mcp_tasks_alloc`.
#[global_allocator]
static GLOBAL: mcp_tasks_alloc::Split = mcp_tasks_alloc::Split;

fn main() -> ExitCode {
    let config = match GatewayConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-tasks-gateway: {e}");
            return ExitCode::from(64);
        }
    };
    if let Err(e) = config.check_exposure(config.listen_addr) {
        eprintln!("mcp-tasks-gateway: {e}");
        return ExitCode::from(64);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-tasks-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the gRPC exporter needs one.
    let telemetry = match runtime.block_on(async { telemetry::init("gateway") }) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mcp-tasks-gateway: {e}");
            return ExitCode::from(64);
        }
    };
    if let Err(e) = runtime.block_on(mcp_tasks_gateway::check_auth(&config)) {
        eprintln!("mcp-tasks-gateway: {e}");
        return ExitCode::from(64);
    }
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen_addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen_addr))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on http://{addr}");
        mcp_tasks_gateway::run(config, listener, shutdown::on_signal())
            .await
            .map_err(|e| mcp_tasks_shared::error_chain(&e))
    });
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-tasks-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}
