//! The only integration-test binary: every test runs the real `redlock` against its own
//! `redis-server`. Modules group the tests by what they cover.

mod util;

mod bad_input;
mod commands;
mod contention;
mod docs;
mod modes;
mod run;
mod waiting;
