//! The only integration-test binary: every test runs the real `redlock` against its own
//! `redis-server`. Modules group the tests by what they cover.

mod util;

mod aarch64;
mod bad_input;
mod check;
mod cluster;
mod commands;
mod contention;
mod docs;
mod faults;
mod history;
mod hostile_data;
mod modes;
mod packaging;
mod process;
mod protocol;
mod quorum;
mod recipes;
mod replicas;
mod run;
mod scale;
mod script_calls;
mod script_fuzz;
mod sentinel;
mod tls;
mod versions;
mod waiting;
