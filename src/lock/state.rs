//! Reading a lock without changing it: its state (`lua/inspect.lua`), its history
//! (`lua/history.lua`), and what the user may not do to it (`lua/doctor.lua`).

use super::record::{HISTORY_ENTRY, HOLDER_RECORD, QUEUE_ENTRY, decode_each, time_and_records};
use super::reply::{DoctorCode, Reply};
use super::{HistoryEntry, Holder, Lock, Queued, Unreadable};
use crate::conn::Session;
use crate::keys::LockName;
use crate::scripts::{self, DoctorInputs, HistoryInputs, InspectInputs, arg};

/// Live holders `inspect` reads at most (earliest lease end first); [`LockState::holder_count`]
/// counts them all.
pub const INSPECT_HOLDERS: usize = 1000;
/// Waiters `inspect` reads at most, from the head of the queue;
/// [`LockState::queue_length`] counts them all.
pub const INSPECT_WAITERS: usize = 100;

/// What the user may not do, as the doctor asks it (`Lock::denied_commands`).
#[derive(Debug)]
pub struct Denied {
    /// Commands redlock sends or its scripts call, on the lock's keys: those requests fail.
    pub(crate) commands: Vec<String>,
    /// PUBLISH and SUBSCRIBE on the lock's release channel: quorum-mode waiters are then not
    /// told of releases, and look every second instead.
    pub(crate) notices: Vec<String>,
    /// Commands the scripts use only where the user may (EXISTS): without them each request
    /// costs the server more time, nothing else.
    pub(crate) optional: Vec<String>,
}

/// A lock's state at one instant of the server's clock.
#[derive(Debug, Clone)]
pub struct LockState {
    pub name: LockName,
    /// Server time of the reading (Unix ms).
    pub now: u64,
    /// The last fencing token handed out for this name, if any ever was.
    pub last_fence: Option<u64>,
    /// Live holders, oldest first: all of them, or the [`INSPECT_HOLDERS`] whose leases end
    /// first.
    pub holders: Vec<Holder>,
    /// How many holders are live (more than `holders.len()` when not all were read).
    pub holder_count: usize,
    /// Live waiters, in queue order, from the head: at most [`INSPECT_WAITERS`].
    pub waiters: Vec<Queued>,
    /// Entries in the queue. A waiter that died counts until its entry reaches the head, so
    /// this can exceed the live waiters even when `waiters` shows them all.
    pub queue_length: usize,
    /// The latest hold that is over (ended, or expired), from the history.
    pub last_run: Option<HistoryEntry>,
    /// The latest hold that succeeded ([`HistoryEntry::succeeded`]), from the history; read by
    /// [`Lock::inspect_with_success`] only.
    pub last_success: Option<HistoryEntry>,
    /// Records left out because they cannot be read.
    pub unreadable: Vec<Unreadable>,
}

/// What `lua/inspect.lua` answers, in its order: the server's time, the last fence, holder
/// records, queue entries, how many holders are live, the queue's length, the last hold that
/// is over, the last that succeeded.
type InspectReply = (
    u64,
    Option<u64>,
    Vec<String>,
    Vec<String>,
    usize,
    usize,
    Option<String>,
    Option<String>,
    Vec<String>,
);

impl Lock {
    /// Reads the lock's state without changing it.
    pub fn inspect(&self, session: &mut Session) -> anyhow::Result<LockState> {
        self.read_state(session, false)
    }

    /// [`Self::inspect`], and the latest hold that succeeded (`metrics`). That one may read the
    /// whole history: a lock whose holds report no exit status has none to find.
    pub fn inspect_with_success(&self, session: &mut Session) -> anyhow::Result<LockState> {
        self.read_state(session, true)
    }

    fn read_state(&self, session: &mut Session, last_success: bool) -> anyhow::Result<LockState> {
        let keys = &self.keys;
        let reply: InspectReply = session.run(|con| {
            scripts::INSPECT.call(
                con,
                InspectInputs {
                    holders: arg(&keys.holders),
                    leases: arg(&keys.leases),
                    fence: arg(&keys.fence),
                    queue: arg(&keys.queue),
                    waiters: arg(&keys.waiters),
                    history: arg(&keys.history),
                    max_holders: arg(INSPECT_HOLDERS),
                    max_waiters: arg(INSPECT_WAITERS),
                    last_success: arg(super::flag(last_success)),
                },
            )
        })?;
        let (
            now,
            last_fence,
            holders,
            waiters,
            holder_count,
            queue_length,
            last_run,
            last_success,
            digests,
        ) = reply;
        let mut unreadable = Vec::new();
        let mut holders: Vec<Holder> = holders
            .into_iter()
            .zip(digests.into_iter().map(Some).chain(std::iter::repeat(None)))
            .filter_map(|(json, digest)| {
                let mut holder: Holder =
                    decode_each(&[json], &keys.holders, HOLDER_RECORD, &mut unreadable).pop()?;
                holder.token_digest = digest;
                Some(holder)
            })
            .collect();
        holders.sort_by_key(|holder| (holder.since, holder.fence));
        let waiters = decode_each(&waiters, &keys.waiters, QUEUE_ENTRY, &mut unreadable);
        let mut last = |entry: Option<String>| {
            decode_each(
                &Vec::from_iter(entry),
                &keys.history,
                HISTORY_ENTRY,
                &mut unreadable,
            )
            .pop()
        };
        let (last_run, last_success) = (last(last_run), last(last_success));
        Ok(LockState {
            name: self.name.clone(),
            now,
            last_fence,
            holders,
            holder_count,
            waiters,
            queue_length,
            last_run,
            last_success,
            unreadable,
        })
    }

    /// The lock's history, oldest hold first, the server's time of the reading, and the entries
    /// that cannot be read.
    pub fn history(
        &self,
        session: &mut Session,
    ) -> anyhow::Result<(u64, Vec<HistoryEntry>, Vec<Unreadable>)> {
        let reply = session.run(|con| {
            scripts::HISTORY.call(
                con,
                HistoryInputs {
                    history: arg(&self.keys.history),
                },
            )
        })?;
        time_and_records(
            reply,
            scripts::HISTORY.file(),
            &self.keys.history,
            HISTORY_ENTRY,
        )
    }

    /// The commands redlock needs (lua/doctor.lua lists them) that the user may not run on
    /// this lock's keys, and the Pub/Sub commands of quorum mode's release notices it may not
    /// run on the lock's channel; `None` when the server cannot tell (before Redis 7).
    pub(crate) fn denied_commands(&self, session: &mut Session) -> anyhow::Result<Option<Denied>> {
        let reply = session.run(|con| {
            scripts::DOCTOR.call(
                con,
                DoctorInputs {
                    sample: arg(&self.keys.holders),
                    script_sha: arg(scripts::ACQUIRE.sha()),
                    channel: arg(self.keys.released_channel()),
                },
            )
        })?;
        let (code, mut reply) = Reply::open::<DoctorCode>(scripts::DOCTOR.file(), reply)?;
        Ok(match code {
            DoctorCode::Unchecked => None,
            DoctorCode::Checked => Some(Denied {
                commands: reply.field()?,
                notices: reply.field()?,
                optional: reply.field()?,
            }),
        })
    }
}
