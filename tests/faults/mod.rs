//! The fault suite (the plan is docs/reliability.md's source): redlock under the
//! faults production Redis has, judged by oracles that do not trust redlock's own word. The
//! smoke tier runs with every `cargo test`; `tests/faults/run` runs the full suite (the
//! `#[ignore]`d tests too, longer soaks, more rounds) and writes docs/reliability.md from what
//! each scenario counted.

mod failover;
mod harness;
mod hostile;
mod hygiene;
mod liveness;
mod model;
mod network;
mod partitions;
mod scenarios;
mod soak;
mod stalls;
mod wrapper;
