//! Deliberate protocol bugs, to show that the model and its tests would see one: each is made
//! in a scratch copy of `lua/` (a text replaced, which must be found exactly once, so that a
//! mutant cannot silently stop applying) and run through redlock's own calls
//! (`redlock::with_scripts`), where the conformance test must tell it from the model; and
//! the same bug is made in the model ([`Mutant`]), where the checker's properties must fail
//! (see `check.rs`). A weakened model or test shows up as a mutant that survives.

use super::conformance::{self, Step, Walked};
use super::server::Mutant;

/// One bug: its name in the model, and the text it replaces in a script of `lua/`.
pub struct Bug {
    pub mutant: Mutant,
    pub file: &'static str,
    pub find: &'static str,
    pub replace: &'static str,
}

pub const BUGS: &[Bug] = &[
    Bug {
        mutant: Mutant::TakeBackHeardGrant,
        file: "prelude.lua",
        find: "if ok and found['ok'] == 'list' then return first end",
        replace: "if ok then return first end",
    },
    Bug {
        mutant: Mutant::SkipHeadCheck,
        file: "acquire.lua",
        find: "local first_in_line = head == nil and not lock.head_unknown or (head ~= nil and head[1] == waiter)",
        replace: "local first_in_line = true",
    },
    Bug {
        mutant: Mutant::GrantPastCancelMark,
        file: "acquire.lua",
        find: "if marked then return {REPLY.acquire.cancelled, server_now()} end",
        replace: "if false then return {REPLY.acquire.cancelled, server_now()} end",
    },
    Bug {
        mutant: Mutant::ReuseFence,
        file: "prelude.lua",
        find: "  if lock.last_fence and tonumber(lock.last_fence) >= clock then\n    fence = redis.call('INCR', lock.key.fence)",
        replace: "  if lock.last_fence then return tonumber(lock.last_fence) end\n  if false then\n    fence = redis.call('INCR', lock.key.fence)",
    },
    Bug {
        mutant: Mutant::ReleaseWithoutToken,
        file: "release.lua",
        find: "refused, mine = holder_of(lock, token)\n",
        replace: "refused, mine = holder_of(lock, token)\nif not refused and mine == nil and op == 'token' then\n  local first\n  refused, first = first_holder(lock)\n  if first then token, mine = first[1], first[2] end\nend\n",
    },
    Bug {
        mutant: Mutant::SharedBesideQueuedWriter,
        file: "acquire.lua",
        find: "local first_in_line = head == nil and not lock.head_unknown or (head ~= nil and head[1] == waiter)",
        replace: "local first_in_line = head == nil and not lock.head_unknown or (head ~= nil and head[1] == waiter) or (request.mode == 'shared' and live_count(lock) > 0)",
    },
    Bug {
        mutant: Mutant::NoHeadLease,
        file: "prelude.lua",
        find: "local function lease_head(lock, wake_ttl)\n  if lock.length <= 0 then return end",
        replace: "local function lease_head(lock, wake_ttl)\n  if true then return end",
    },
    Bug {
        mutant: Mutant::ReapWithoutSteady,
        file: "acquire.lua",
        find: "lock.reaps = queued and entry.exp > now and now - (entry.steady or entry.since) >= HEAD_TTL_MS",
        replace: "lock.reaps = true",
    },
];

/// The text of `file` in `lua/`.
fn script(file: &str) -> &'static str {
    match file {
        "prelude.lua" => redlock::PRELUDE,
        "acquire.lua" => include_str!("../../lua/acquire.lua"),
        "release.lua" => include_str!("../../lua/release.lua"),
        other => panic!("no mutants of {other}"),
    }
}

impl Bug {
    /// The scratch copy: the script with the bug made.
    pub fn copy(&self) -> Vec<(&'static str, String)> {
        let text = script(self.file);
        assert_eq!(
            text.matches(self.find).count(),
            1,
            "{:?}: the text to replace is no longer in lua/{} once",
            self.mutant,
            self.file
        );
        vec![(self.file, text.replacen(self.find, self.replace, 1))]
    }

    /// Walks the real lock running the copy against the unmutated model until they differ:
    /// the walk that told them apart, or None when none did.
    pub fn caught_by_conformance(
        &self,
        seed: u64,
        openings: &[(usize, Vec<Step>)],
    ) -> Option<String> {
        let copy = self.copy();
        redlock::with_scripts(&copy, || {
            for (n, (clients, opening)) in openings.iter().enumerate() {
                // A short walk after each opening but the last: a bug caught by an opening's
                // situation costs the suite seconds, not minutes.
                let steps = if n + 1 == openings.len() { 150 } else { 40 };
                if let Walked::Differed { why, .. } =
                    conformance::walk_once(seed + 100 * n as u64, *clients, opening, steps)
                {
                    return Some(why.lines().next().unwrap_or_default().to_owned());
                }
            }
            None
        })
    }
}
