//! End-to-end tests: one test binary (STYLE.md §9). Each test starts its own Redis and the
//! real binaries; each names the checklist ids it covers.

mod abuse;
mod auth;
mod bad_input;
mod chaos;
mod cli;
mod cluster_of_two;
mod command_tools;
mod connections;
mod console;
mod console_dead;
mod dead_letters;
mod embedded;
mod failover;
mod fleet;
mod http_tools;
mod idempotency;
mod interop;
mod legacy;
mod lifecycle;
mod listen;
mod local_cluster;
mod outage;
mod priority;
mod processes;
mod protocol;
mod recovery;
mod redis_cluster;
mod sentinel;
mod telemetry;
mod up;
mod upstream;
