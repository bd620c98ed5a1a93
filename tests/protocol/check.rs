//! The protocol's properties, checked over every interleaving of a few clients, crashes,
//! pauses and a server stall (`clients.rs`), breadth first with stateright: a property that
//! fails prints the shortest trace that breaks it.
//!
//! The properties (docs/protocol.md, "Properties"):
//! - no two holders whose modes conflict while both leases are live (at most N in a
//!   semaphore of N);
//! - a command runs only while its holder's lease is live: a client that believes it holds
//!   (its deadline not passed, not stopped) has a live record of its token, with its fence;
//! - fences rise: a command starts with a fence above every one it conflicts with that
//!   started before it;
//! - every key but the fence counter has an expiry;
//! - a live waiter is handed a free lock within a bound, each dead or paused client costing
//!   it at most a lease more, a waiter that died blocked on its wake list a look more;
//! - a request given up on (its token marked) never becomes a holder;
//! - first come, first served: no live waiter whose entry has not lapsed is overtaken by one
//!   queued behind it (or by one not queued at all).
//!
//! Beside them, "sometimes" properties show the search reaches what it must (a hand-over to a
//! waiter, a grant taken back unheard, a late request refused): a model that could no longer
//! reach them would pass its checks for nothing.

use std::time::{Duration, Instant};

use stateright::{Checker, Model, Property};

use super::clients::{Action, Budget, Phase, Role, System, TIMING, TTL};
use super::server::{Mode, Mutant};

/// One configuration to check: the clients, the faults allowed, a deliberate bug.
pub struct Lock {
    pub roles: Vec<(Role, Mode)>,
    pub budget: Budget,
    pub mutant: Option<Mutant>,
}

/// The starving bound: a look near the head and a hand-over (`hear` and a tick); for each
/// fault so far, a lease (a crashed holder's, a grant a stopped waiter took, or a request of a
/// crashed waiter that ran after it) and a look; for each crash of a waiter blocked on its
/// wake list, a look and a hand-over again: a `run` grant it never heard of is taken back
/// after `hear`, a claim grant ends after `claim`. Tight: take either mechanism out of the
/// model and the bound breaks (`each_mechanism_is_needed_by_a_property`).
fn bound(state: &System) -> u8 {
    let lease = u8::try_from(TTL).unwrap() + 1;
    let look = u8::try_from(TIMING.hear).unwrap() + 1;
    look + state.ghost.faults * lease + state.ghost.waiter_crashes * look
}

fn no_conflicting_holders(_: &Lock, state: &System) -> bool {
    let live = state.server.live();
    live.iter().enumerate().all(|(i, a)| {
        live[i + 1..].iter().all(|b| match (a.mode, b.mode) {
            (Mode::Shared, Mode::Shared) => true,
            (Mode::Semaphore(limit), Mode::Semaphore(other)) => {
                limit == other && live.len() <= usize::from(limit)
            }
            _ => false,
        })
    })
}

fn commands_run_only_under_a_live_lease(_: &Lock, state: &System) -> bool {
    let now = state.server.now;
    state
        .clients
        .iter()
        .enumerate()
        .all(|(i, c)| match c.phase {
            Phase::Holding {
                fence, deadline, ..
            } if !c.crashed && !c.paused && now < deadline => state
                .server
                .live()
                .iter()
                .any(|h| h.tok == c.tok(i) && h.fence == fence),
            _ => true,
        })
}

fn fences_rise(_: &Lock, state: &System) -> bool {
    !state.ghost.fence_fell
}

fn every_key_expires(_: &Lock, state: &System) -> bool {
    let s = &state.server;
    (s.holders.is_empty() || s.holders_exp.is_some())
        && (s.queue.is_empty() || s.queue_exp.is_some())
}

fn waiters_get_a_free_lock_in_time(_: &Lock, state: &System) -> bool {
    state.ghost.starving <= bound(state)
}

fn first_come_first_served(_: &Lock, state: &System) -> bool {
    !state.ghost.overtaken
}

fn given_up_requests_take_nothing(_: &Lock, state: &System) -> bool {
    state
        .server
        .holders
        .iter()
        .all(|h| !state.ghost.cancelled.contains(&h.tok))
}

impl Model for Lock {
    type State = System;
    type Action = Action;

    fn init_states(&self) -> Vec<System> {
        vec![System::new(&self.roles, self.budget, self.mutant)]
    }

    fn actions(&self, state: &System, actions: &mut Vec<Action>) {
        state.actions(actions);
    }

    fn next_state(&self, state: &System, action: Action) -> Option<System> {
        Some(state.step(action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no two holders whose modes conflict while both leases are live",
                no_conflicting_holders,
            ),
            Property::always(
                "a command runs only while its holder's lease is live",
                commands_run_only_under_a_live_lease,
            ),
            Property::always("fences rise", fences_rise),
            Property::always(
                "every key but the fence counter has an expiry",
                every_key_expires,
            ),
            Property::always(
                "a live waiter is handed a free lock within its bound",
                waiters_get_a_free_lock_in_time,
            ),
            Property::always(
                "a request given up on never becomes a holder",
                given_up_requests_take_nothing,
            ),
            Property::always(
                "no live waiter is overtaken by one queued behind it",
                first_come_first_served,
            ),
            Property::sometimes("every client held the lock", |_, state: &System| {
                usize::from(state.ghost.starts) >= state.clients.len()
                    && state.clients.iter().all(|c| c.phase == Phase::Done)
            }),
            Property::sometimes(
                "a command runs on a grant handed over",
                |_, state: &System| {
                    state
                        .server
                        .holders
                        .iter()
                        .any(|h| h.granted && h.wid.is_some())
                        && state
                            .clients
                            .iter()
                            .any(|c| matches!(c.phase, Phase::Holding { .. }))
                },
            ),
            Property::sometimes("a request given up on arrives late", |_, state: &System| {
                !state.ghost.cancelled.is_empty()
                    && state.clients.iter().any(|c| {
                        c.inflight
                            .iter()
                            .any(|s| s.abandoned && state.ghost.cancelled.contains(&s.tok))
                    })
            }),
        ]
    }
}

/// What a check found.
pub struct Checked {
    /// Every reachable state was checked (not cut short by the time limit).
    pub complete: bool,
    pub states: usize,
    pub took: Duration,
    /// The always-properties broken, each with its trace.
    pub broken: Vec<(&'static str, String)>,
    /// The sometimes-properties never reached.
    pub unreached: Vec<&'static str>,
}

impl Lock {
    /// Searches every state, breadth first on `threads` threads, for at most `limit`.
    pub fn check(self, threads: usize, limit: Duration) -> Checked {
        let properties = self.properties();
        let started = Instant::now();
        let checker = self
            .checker()
            .threads(threads)
            .timeout(limit)
            .spawn_bfs()
            .join();
        // (A search cut short by the limit also reports itself done.)
        let complete = started.elapsed() < limit;
        let mut broken = Vec::new();
        let mut unreached = Vec::new();
        for property in properties {
            let found = checker.discovery(property.name);
            match (property.expectation, found) {
                (stateright::Expectation::Sometimes, None) => unreached.push(property.name),
                (stateright::Expectation::Sometimes, Some(_)) => {}
                (_, Some(path)) => {
                    let mut trace = String::new();
                    for (state, action) in path.into_vec() {
                        if let Some(action) = action {
                            trace.push_str(&format!(
                                "  {action:?}   (now {}, holders {:?}, queue {:?})\n",
                                state.server.now,
                                state
                                    .server
                                    .holders
                                    .iter()
                                    .map(|h| (h.tok, h.fence, h.exp, h.granted))
                                    .collect::<Vec<_>>(),
                                state
                                    .server
                                    .queue
                                    .iter()
                                    .map(|e| (e.tok, e.exp))
                                    .collect::<Vec<_>>()
                            ));
                        }
                    }
                    broken.push((property.name, trace));
                }
                (_, None) => {}
            }
        }
        Checked {
            complete,
            states: checker.unique_state_count(),
            took: started.elapsed(),
            broken,
            unreached,
        }
    }
}
