//! The client side of the protocol, as redlock's `run` and `acquire` (with `--wait` or not)
//! act on it, and the faults around them: the whole system the checker searches
//! (`check.rs`). docs/protocol.md says the same in words.
//!
//! Each client waits in the queue for one hold: it joins, blocks on its wake list (BLPOP) until
//! its look is due, calls again, and holds the lock: a `run` client starts its command on a
//! grant's wake-up (when more than half the grant is left, else it claims with a call), an
//! `acquire` client claims with a call. A holder renews a third of the way into its lease,
//! stops its command at its local deadline (self-fencing: the lease as the server set it, no
//! later), and releases when the command ends, which may be at any moment; a waiter may give
//! up at any moment, leaving the queue with its token marked when a request of it went without
//! an answer. Clocks run at one rate: a client's deadlines come from its send times, which
//! precede the server's reading.
//!
//! Faults, within a budget: a client crashes (its requests already sent still run; a blocked
//! BLPOP ends with its connection), a client pauses and resumes (SIGSTOP: its command too;
//! Redis still pops its blocked BLPOP, so the wake-up waits for it, late), the server stalls
//! and resumes (requests wait; a client that waited past its timeout gives the request up, and
//! it runs later). Time advances one tick at a time, never past something a live client must do
//! by then: live clients are timely, dead and paused ones are not.
//!
//! States are kept finite and small: times are relative to now (the past clamped at a horizon
//! beyond which no rule looks back), fences renumbered keeping their order, the history left
//! out (the conformance test holds it to the scripts).

use super::server::{Acquire, Entry, Holder, Mode, Msg, Reply, Server, Time, Timing, Tok, Wid};

/// The checker's timing, in ticks: the scripts' lengths in their order (a grant's wake-up is
/// heard within a tick, a waiter near the head looks every tick, the head lease is three, a
/// grant five, a lease six, renewed every two).
pub const TIMING: Timing = Timing {
    head_ttl: 3,
    hear: 1,
    reap_grace: 5,
    grant: 5,
    claim: 1,
    entry_ttl: 9,
    wake_ttl: 5,
    mark_ttl: 12,
    queue_slack: 1,
    lapse_margin: 0,
};

/// The lease a client asks for.
pub const TTL: Time = 6;
/// How far back a time still matters (the longest a rule looks back: a lapsed entry's reap
/// grace): older ones are all alike.
const HORIZON: Time = 6;
/// The longest the server stalls: less than a cancel mark lives, the protocol's assumption
/// (docs/safety.md: a request given up on runs within the mark's five minutes, or what it
/// takes expires with its lease).
const LONGEST_STALL: u8 = 4;

/// How a client holds the lock once it is handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// `run`: starts its command on the grant's wake-up.
    Run,
    /// `acquire --wait`: claims the grant with a call.
    Acquire,
    /// `acquire` without `--wait`: one call, never queued; busy, it is done.
    Try,
}

/// A request a client sent, not yet run by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// The acquire script: join (or refresh) the queue, or only stay in it.
    Acquire {
        stay: bool,
    },
    Extend,
    /// A release by token; `lost`: the fence of a hold the client stopped at its deadline.
    Release {
        lost: Option<u32>,
    },
    /// A give-up: leave the queue, give back what the token holds, mark it when `mark`.
    Leave {
        mark: bool,
    },
}

/// A request in flight: what, for which token and place, sent when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sent {
    pub request: Request,
    pub tok: Tok,
    pub wid: Wid,
    pub at: Time,
    /// The client gave up waiting for its answer (a stalled server): it may still run.
    pub abandoned: bool,
}

/// Something delivered to a client that it has not read yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Delivered {
    /// A script's answer, to the request sent at `sent`; `skew`: the server's clock then, less
    /// the send time.
    Answer {
        request: Request,
        reply: Reply,
        sent: Time,
        skew: Time,
    },
    /// The block on the wake list ended: a wake-up, or none by its end.
    Woken(Option<Msg>),
}

/// Where a client is in its one hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started.
    Idle,
    /// In the queue (or on its way in): looks again by `look_at`; `skew` maps the server's
    /// times in wake-ups to its own (the server's clock less the send time, at the last call).
    Waiting {
        look_at: Time,
        skew: Time,
        /// Blocked on its wake list until `look_at`.
        blocked: bool,
    },
    /// Its command runs until `deadline` (the lease as the server set it, no later); it renews
    /// from `renew_at`.
    Holding {
        fence: u32,
        mode: Mode,
        deadline: Time,
        renew_at: Time,
    },
    /// Done: released, stopped, or gave up.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    pub role: Role,
    pub mode: Mode,
    /// Its token and place, by generation (a client queued again takes new ones).
    pub generation: u8,
    pub phase: Phase,
    pub inflight: Vec<Sent>,
    pub inbox: Option<Delivered>,
    pub crashed: bool,
    pub paused: bool,
    /// A request of its current token went without an answer: giving up must mark it.
    pub unanswered: bool,
}

/// Generations a client may use (queued again after its place was lost).
pub const GENERATIONS: u8 = 3;

impl Client {
    pub fn tok(&self, index: usize) -> Tok {
        Tok::try_from(index).unwrap() * GENERATIONS + self.generation
    }

    fn live(&self) -> bool {
        !self.crashed && !self.paused
    }
}

/// The fault budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    pub crashes: u8,
    pub pauses: u8,
    pub stalls: u8,
}

/// What the checker remembers beside the system, for the properties.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// The highest fence a command started with, and the highest an exclusive one did.
    pub started_any: u32,
    pub started_exclusive: u32,
    /// A command started with a fence not above one it conflicts with.
    pub fence_fell: bool,
    /// Tokens given up with their mark.
    pub cancelled: Vec<Tok>,
    /// Ticks in a row with a live waiter and no live client holding: see `check.rs`.
    pub starving: u8,
    /// Faults so far (crashes and pauses) but those below: each may cost the waiters behind
    /// it a lease.
    pub faults: u8,
    /// Crashes of waiters blocked on their wake lists (no request on its way) so far: each may
    /// cost the waiters behind it a head lease and a look, not a lease (its entry lapses; a
    /// grant it never heard of is taken back).
    pub waiter_crashes: u8,
    /// Commands started so far.
    pub starts: u8,
    /// A holder was admitted while a live waiter ahead of it in the queue, its entry not
    /// lapsed, was left waiting: see `serve`.
    pub overtaken: bool,
}

/// The whole system: the lock's keys, the clients, the server's stall, the faults left.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct System {
    pub server: Server,
    pub clients: Vec<Client>,
    /// The server is stalled, for this many ticks so far.
    pub stalled: Option<u8>,
    pub budget: Budget,
    pub ghost: Ghost,
}

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// The server runs a client's request (the `n`th in flight).
    Serve(usize, usize),
    /// A client starts: joins the queue.
    Start(usize),
    /// A waiting client's look is due: it calls again.
    Look(usize),
    /// A holder renews.
    Renew(usize),
    /// A holder's command ends: it releases.
    Finish(usize),
    /// A holder's deadline passed: it stops its command and reports the hold lost.
    Stop(usize),
    /// A waiter gives up (a signal, the end of its wait).
    GiveUp(usize),
    /// A client gives up a request the stalled server has not answered.
    Abandon(usize),
    Crash(usize),
    Pause(usize),
    Resume(usize),
    Stall,
    Unstall,
}

impl System {
    pub fn new(
        roles: &[(Role, Mode)],
        budget: Budget,
        mutant: Option<super::server::Mutant>,
    ) -> Self {
        Self {
            server: Server::new(TIMING, 0, mutant),
            clients: roles
                .iter()
                .map(|&(role, mode)| Client {
                    role,
                    mode,
                    generation: 0,
                    phase: Phase::Idle,
                    inflight: Vec::new(),
                    inbox: None,
                    crashed: false,
                    paused: false,
                    unanswered: false,
                })
                .collect(),
            stalled: None,
            budget,
            ghost: Ghost::default(),
        }
    }

    fn now(&self) -> Time {
        self.server.now
    }

    /// Whether time may pass: no live client has something to do now, and the server has
    /// nothing to run (unless it is stalled).
    fn time_may_pass(&self) -> bool {
        match self.stalled {
            None if self.clients.iter().any(|c| !c.inflight.is_empty()) => return false,
            Some(ticks) if ticks >= LONGEST_STALL => return false,
            _ => {}
        }
        let now = self.now();
        self.clients.iter().all(|c| {
            if !c.live() {
                return true;
            }
            if c.inbox.is_some() {
                return false;
            }
            let waiting_on_server = c.inflight.iter().any(|s| !s.abandoned);
            match &c.phase {
                Phase::Idle | Phase::Done => true,
                Phase::Waiting { blocked, .. } => *blocked || waiting_on_server,
                Phase::Holding {
                    deadline, renew_at, ..
                } => now < *deadline && (now < *renew_at || waiting_on_server),
            }
        })
    }

    pub fn actions(&self, actions: &mut Vec<Action>) {
        if self.time_may_pass() {
            actions.push(Action::Tick);
        }
        let now = self.now();
        for (i, c) in self.clients.iter().enumerate() {
            if self.stalled.is_none() {
                for (n, sent) in c.inflight.iter().enumerate() {
                    // (Requests on one connection run in order; an abandoned one was on a
                    // connection of its own.)
                    let first_on_its_connection = c.inflight[..n]
                        .iter()
                        .all(|s| s.abandoned != sent.abandoned);
                    if first_on_its_connection {
                        actions.push(Action::Serve(i, n));
                    }
                }
            }
            if c.crashed {
                continue;
            }
            if self.budget.crashes > 0 {
                actions.push(Action::Crash(i));
            }
            if c.paused {
                actions.push(Action::Resume(i));
                continue;
            }
            if self.budget.pauses > 0 && c.phase != Phase::Idle && c.phase != Phase::Done {
                actions.push(Action::Pause(i));
            }
            if c.inbox.is_some() {
                // (A paused client reads when it resumes.)
                continue;
            }
            let busy = c.inflight.iter().any(|s| !s.abandoned);
            // (Once a token: a client that gave a request up waits for the one it sends next.)
            if busy && self.stalled.is_some() && !c.unanswered {
                actions.push(Action::Abandon(i));
            }
            match &c.phase {
                Phase::Idle => actions.push(Action::Start(i)),
                Phase::Waiting {
                    look_at, blocked, ..
                } => {
                    // (At most two requests in flight: one given up on, one sent since.)
                    if !busy && !*blocked && now >= *look_at && c.inflight.len() < 2 {
                        actions.push(Action::Look(i));
                    }
                    // (`acquire --wait`'s wait ends; a run waiter's the same way: one client
                    // for both, the state space stays small.)
                    if c.role == Role::Acquire {
                        actions.push(Action::GiveUp(i));
                    }
                }
                Phase::Holding {
                    deadline, renew_at, ..
                } => {
                    if now >= *deadline {
                        actions.push(Action::Stop(i));
                    } else {
                        if now >= *renew_at && !busy && c.inflight.len() < 2 {
                            actions.push(Action::Renew(i));
                        }
                        if !busy {
                            actions.push(Action::Finish(i));
                        }
                    }
                }
                Phase::Done => {}
            }
        }
        if self.stalled.is_some() {
            actions.push(Action::Unstall);
        } else if self.budget.stalls > 0 {
            actions.push(Action::Stall);
        }
    }

    pub fn step(&self, action: Action) -> System {
        let mut next = self.clone();
        next.apply(action);
        next.read_delivered();
        next.canonicalize();
        next
    }

    /// Live clients read what was delivered to them at once (a reaction of microseconds: the
    /// requests it sends are what other clients' steps interleave with).
    fn read_delivered(&mut self) {
        while let Some(i) = (0..self.clients.len())
            .find(|&i| self.clients[i].inbox.is_some() && self.clients[i].live())
        {
            self.read(i);
        }
    }

    fn send(&mut self, i: usize, request: Request) {
        let tok = self.clients[i].tok(i);
        let at = self.now();
        self.clients[i].inflight.push(Sent {
            request,
            tok,
            wid: tok,
            at,
            abandoned: false,
        });
    }

    fn apply(&mut self, action: Action) {
        let now = self.now();
        match action {
            Action::Tick => self.tick(),
            Action::Serve(i, n) => self.serve(i, n),
            Action::Start(i) => {
                self.clients[i].phase = Phase::Waiting {
                    look_at: now,
                    skew: 0,
                    blocked: false,
                };
                self.send(i, Request::Acquire { stay: false });
            }
            Action::Look(i) => self.send(i, Request::Acquire { stay: true }),
            Action::Renew(i) => self.send(i, Request::Extend),
            Action::Finish(i) => {
                self.clients[i].phase = Phase::Done;
                self.send(i, Request::Release { lost: None });
            }
            Action::Stop(i) => {
                let Phase::Holding { fence, .. } = self.clients[i].phase else {
                    unreachable!()
                };
                self.clients[i].phase = Phase::Done;
                self.send(i, Request::Release { lost: Some(fence) });
            }
            Action::GiveUp(i) => {
                self.unblock(i);
                // Marked while a request of the token may still arrive (redlock's `unsure`
                // and `unanswered`); else leaving leaves nothing behind.
                let c = &self.clients[i];
                let mark = c.unanswered
                    || c.inflight
                        .iter()
                        .any(|s| matches!(s.request, Request::Acquire { .. }));
                self.clients[i].phase = Phase::Done;
                // Every request still on its way may run after this one: they were on the old
                // connection, this goes on a fresh one.
                for sent in &mut self.clients[i].inflight {
                    sent.abandoned = true;
                }
                self.send(i, Request::Leave { mark });
            }
            Action::Abandon(i) => {
                let c = &mut self.clients[i];
                for sent in &mut c.inflight {
                    sent.abandoned = true;
                }
                c.unanswered = true;
                // A waiter tries again; a holder renews again.
                match &mut c.phase {
                    Phase::Waiting {
                        look_at, blocked, ..
                    } => {
                        *look_at = now;
                        *blocked = false;
                    }
                    Phase::Holding { renew_at, .. } => *renew_at = now,
                    _ => {}
                }
            }
            Action::Crash(i) => {
                self.budget.crashes -= 1;
                // (A request still on its way may take the lock when it runs, for a lease.)
                let c = &self.clients[i];
                if matches!(c.phase, Phase::Waiting { .. }) && c.inflight.is_empty() {
                    self.ghost.waiter_crashes += 1;
                } else {
                    self.ghost.faults += 1;
                }
                self.unblock(i);
                let c = &mut self.clients[i];
                c.crashed = true;
                c.paused = false;
                c.inbox = None;
            }
            Action::Pause(i) => {
                self.budget.pauses -= 1;
                self.ghost.faults += 1;
                self.clients[i].paused = true;
            }
            Action::Resume(i) => self.clients[i].paused = false,
            Action::Stall => {
                self.budget.stalls -= 1;
                self.stalled = Some(0);
            }
            Action::Unstall => self.stalled = None,
        }
    }

    fn unblock(&mut self, i: usize) {
        if let Phase::Waiting { blocked, .. } = &mut self.clients[i].phase {
            *blocked = false;
        }
    }

    /// Time passes: blocks whose end came end with nothing; the liveness ghost counts.
    fn tick(&mut self) {
        self.server.now += 1;
        let now = self.now();
        for c in &mut self.clients {
            if let Phase::Waiting {
                look_at,
                blocked: blocked @ true,
                ..
            } = &mut c.phase
                && now >= *look_at
                && !c.crashed
            {
                *blocked = false;
                c.inbox = Some(Delivered::Woken(None));
            }
        }
        self.server.expire_keys();
        if let Some(ticks) = &mut self.stalled {
            *ticks += 1;
        }
        let starving = self.stalled.is_none()
            && self
                .clients
                .iter()
                .any(|c| c.live() && matches!(c.phase, Phase::Waiting { .. }))
            && !self.live_client_holds();
        self.ghost.starving = if starving {
            self.ghost.starving.saturating_add(1).min(100)
        } else {
            0
        };
    }

    /// Whether a live, running client's token holds a live lease (or is being handed one).
    fn live_client_holds(&self) -> bool {
        self.server.live().iter().any(|holder| {
            self.client_of(holder.tok)
                .is_some_and(|i| self.clients[i].live())
        })
    }

    pub fn client_of(&self, tok: Tok) -> Option<usize> {
        let i = usize::from(tok / GENERATIONS);
        (i < self.clients.len()).then_some(i)
    }

    /// The server runs client `i`'s `n`th request in flight, and pops for blocked clients
    /// whose lists it pushed to.
    fn serve(&mut self, i: usize, n: usize) {
        let sent = self.clients[i].inflight.remove(n);
        let (queued, held): (Vec<Entry>, Vec<Tok>) = (
            self.server.queue.clone(),
            self.server.holders.iter().map(|h| h.tok).collect(),
        );
        let mode = self.clients[i].mode;
        let claims = self.clients[i].role == Role::Acquire;
        let reply = match sent.request {
            Request::Acquire { stay } => self.server.acquire(Acquire {
                tok: sent.tok,
                ttl: TTL,
                mode,
                waiter: (self.clients[i].role != Role::Try).then_some(sent.wid),
                stay,
                reenter: false,
                claims,
            }),
            Request::Extend => self.server.extend(sent.tok, TTL),
            Request::Release { lost } => self.server.release(sent.tok, 0, lost),
            Request::Leave { mark } => {
                if mark && !self.ghost.cancelled.contains(&sent.tok) {
                    self.ghost.cancelled.push(sent.tok);
                    self.ghost.cancelled.sort_unstable();
                }
                self.server.leave(sent.wid, sent.tok, mark)
            }
        };
        self.note_overtaking(&queued, &held);
        let skew = self.now() - sent.at;
        let c = &mut self.clients[i];
        // The answer reaches a client that still waits for it; a crashed one's, or one given
        // up, goes nowhere.
        if !c.crashed && !sent.abandoned {
            c.inbox = Some(Delivered::Answer {
                request: sent.request,
                reply,
                sent: sent.at,
                skew,
            });
        }
        self.pop_for_blocked();
    }

    /// First come, first served: each holder a script just admitted (absent from `held`
    /// before it) had no one ahead of it in the queue as it was (`queued`) who is left
    /// waiting though live, with its entry not lapsed (a lapsed one may be skipped, as
    /// `hand_off` skips the dead). Readers admitted together with the head are not overtaken.
    fn note_overtaking(&mut self, queued: &[Entry], held: &[Tok]) {
        let now = self.now();
        let admitted: Vec<Tok> = self
            .server
            .holders
            .iter()
            .map(|h| h.tok)
            .filter(|tok| !held.contains(tok))
            .collect();
        for tok in &admitted {
            let ahead = queued
                .iter()
                .position(|e| e.tok == *tok)
                .unwrap_or(queued.len());
            let overtaken = queued[..ahead].iter().any(|e| {
                !admitted.contains(&e.tok)
                    && e.exp > now
                    && self.client_of(e.tok).is_some_and(|j| {
                        let c = &self.clients[j];
                        c.live() && c.tok(j) == e.tok && matches!(c.phase, Phase::Waiting { .. })
                    })
            });
            self.ghost.overtaken |= overtaken;
        }
    }

    /// Redis serves blocked clients right after a script pushed to their lists.
    fn pop_for_blocked(&mut self) {
        for i in 0..self.clients.len() {
            let blocked = matches!(self.clients[i].phase, Phase::Waiting { blocked: true, .. });
            if blocked && !self.clients[i].crashed && self.clients[i].inbox.is_none() {
                let wid = self.clients[i].tok(i);
                if let Some(msg) = self.server.pop(wid) {
                    self.unblock(i);
                    self.clients[i].inbox = Some(Delivered::Woken(Some(msg)));
                }
            }
        }
    }

    /// Client `i` blocks on its wake list until `look_at`; a wake-up already there is taken at
    /// once.
    fn block(&mut self, i: usize) {
        if let Phase::Waiting { blocked, .. } = &mut self.clients[i].phase {
            *blocked = true;
        }
        self.pop_for_blocked();
    }

    /// A command starts under the lock: the ghost checks that its fence rises above every
    /// conflicting one started before.
    fn start_command(&mut self, i: usize, fence: u32, deadline: Time, renew_at: Time) {
        let mode = self.clients[i].mode;
        let above = if mode == Mode::Exclusive {
            self.ghost.started_any
        } else {
            self.ghost.started_exclusive
        };
        if fence <= above {
            self.ghost.fence_fell = true;
        }
        self.ghost.started_any = self.ghost.started_any.max(fence);
        self.ghost.starts = self.ghost.starts.saturating_add(1);
        if mode == Mode::Exclusive {
            self.ghost.started_exclusive = self.ghost.started_exclusive.max(fence);
        }
        self.clients[i].phase = Phase::Holding {
            fence,
            mode,
            deadline,
            renew_at,
        };
    }

    /// Client `i` reads what was delivered to it, as redlock's state machines do.
    fn read(&mut self, i: usize) {
        let now = self.now();
        let delivered = self.clients[i].inbox.take().unwrap();
        let phase = self.clients[i].phase.clone();
        match (delivered, phase) {
            (
                Delivered::Answer {
                    request: Request::Acquire { .. },
                    reply,
                    sent,
                    skew,
                },
                Phase::Waiting { .. },
            ) => match reply {
                // Answered so late (this client was stopped) that a third of the lease may be
                // gone: one more call confirms it from a fresh send time (redlock's `holding`).
                Reply::Acquired { .. } if now - sent > TTL / 3 => {
                    self.send(i, Request::Acquire { stay: true });
                }
                Reply::Acquired { fence } => {
                    self.clients[i].unanswered = false;
                    self.start_command(i, fence, sent + TTL, sent + TTL / 3);
                }
                // Without `--wait`, busy is the end: exit 75.
                _ if self.clients[i].role == Role::Try => self.clients[i].phase = Phase::Done,
                Reply::Busy { hint, position, .. } if position > 0 => {
                    self.clients[i].phase = Phase::Waiting {
                        look_at: sent + hint,
                        skew,
                        blocked: false,
                    };
                    self.block(i);
                }
                // Its place lost (its entry lapsed while it was stopped), or its token given
                // up: it queues again with a new token and place, at most GENERATIONS times.
                _ => {
                    let c = &mut self.clients[i];
                    if c.generation + 1 < GENERATIONS {
                        c.generation += 1;
                        c.unanswered = false;
                        c.phase = Phase::Waiting {
                            look_at: now,
                            skew: 0,
                            blocked: false,
                        };
                        self.send(i, Request::Acquire { stay: false });
                    } else {
                        c.phase = Phase::Done;
                    }
                }
            },
            (Delivered::Woken(msg), Phase::Waiting { look_at, skew, .. }) => {
                let grant = TIMING.grant.min(TTL);
                match msg {
                    Some(Msg::Granted { fence, exp })
                        if self.clients[i].role == Role::Run && exp - skew > now + grant / 2 =>
                    {
                        // Starts on the grant, until it ends on the server's clock; the first
                        // renewal a third of the way in.
                        self.start_command(i, fence, exp - skew, now + grant / 3);
                    }
                    Some(Msg::Watch { exp, .. }) => {
                        self.clients[i].phase = Phase::Waiting {
                            look_at: look_at.min(exp - skew),
                            skew,
                            blocked: false,
                        };
                        self.block(i);
                    }
                    Some(Msg::Head { due }) => {
                        self.clients[i].phase = Phase::Waiting {
                            look_at: look_at.min(due - skew).min(now + TIMING.hear),
                            skew,
                            blocked: false,
                        };
                        self.block(i);
                    }
                    // A grant to claim (or too little of it left), the look due: call.
                    _ => self.send(i, Request::Acquire { stay: true }),
                }
            }
            (
                Delivered::Answer {
                    request: Request::Extend,
                    reply,
                    sent,
                    ..
                },
                Phase::Holding {
                    fence,
                    mode,
                    deadline,
                    ..
                },
            ) => {
                if reply == Reply::Extended {
                    self.clients[i].phase = Phase::Holding {
                        fence,
                        mode,
                        deadline: deadline.max(sent + TTL),
                        renew_at: sent + TTL / 3,
                    };
                } else {
                    // The lease is gone: stop the command, report it lost.
                    self.clients[i].phase = Phase::Done;
                    self.send(i, Request::Release { lost: Some(fence) });
                }
            }
            // Anything else (a release's answer, a late one): nothing to do.
            _ => {}
        }
    }

    /// Times relative to now (the past clamped at the horizon), fences renumbered in order,
    /// the history dropped: equal futures, one state.
    fn canonicalize(&mut self) {
        let now = self.server.now;
        let t = |time: &mut Time| *time = (*time - now).max(-HORIZON);
        let s = &mut self.server;
        s.now = 0;
        s.history.clear();
        // (Orders that mean nothing: holders by token, wake lists by waiter, marks by token.)
        s.holders.sort_by_key(|h| h.tok);
        s.wake.sort_by_key(|list| list.id);
        s.cancel.sort_unstable();
        for h in &mut s.holders {
            t(&mut h.since);
            t(&mut h.exp);
        }
        if let Some(exp) = &mut s.holders_exp {
            t(exp);
        }
        for e in &mut s.queue {
            t(&mut e.since);
            t(&mut e.exp);
            t(&mut e.steady);
            t(&mut e.due);
        }
        if let Some(exp) = &mut s.queue_exp {
            t(exp);
        }
        for list in &mut s.wake {
            t(&mut list.exp);
            for msg in &mut list.msgs {
                match msg {
                    Msg::Granted { exp, .. } | Msg::Watch { exp, .. } => t(exp),
                    Msg::Head { due } => t(due),
                }
            }
        }
        for (_, exp) in &mut s.cancel {
            t(exp);
        }
        for c in &mut self.clients {
            for sent in &mut c.inflight {
                t(&mut sent.at);
            }
            match &mut c.phase {
                Phase::Waiting { look_at, .. } => t(look_at),
                Phase::Holding {
                    deadline, renew_at, ..
                } => {
                    t(deadline);
                    t(renew_at);
                }
                _ => {}
            }
            match &mut c.inbox {
                Some(Delivered::Answer { sent, .. }) => t(sent),
                Some(Delivered::Woken(Some(Msg::Granted { exp, .. } | Msg::Watch { exp, .. }))) => {
                    t(exp)
                }
                Some(Delivered::Woken(Some(Msg::Head { due }))) => t(due),
                _ => {}
            }
        }
        self.renumber_fences();
    }

    /// Every fence in the state, renumbered 1, 2, ... in order (the counter's too).
    fn renumber_fences(&mut self) {
        let mut fences: Vec<u32> = Vec::new();
        {
            let mut add = |fence: u32| {
                if fence > 0 {
                    fences.push(fence);
                }
            };
            add(self.server.fence);
            add(self.ghost.started_any);
            add(self.ghost.started_exclusive);
            self.server
                .holders
                .iter()
                .for_each(|h: &Holder| add(h.fence));
            for list in &self.server.wake {
                for msg in &list.msgs {
                    if let Msg::Granted { fence, .. } = msg {
                        add(*fence);
                    }
                }
            }
            for c in &self.clients {
                if let Phase::Holding { fence, .. } = c.phase {
                    add(fence);
                }
                for sent in &c.inflight {
                    if let Request::Release { lost: Some(fence) } = sent.request {
                        add(fence);
                    }
                }
                match &c.inbox {
                    Some(Delivered::Woken(Some(Msg::Granted { fence, .. }))) => add(*fence),
                    Some(Delivered::Answer {
                        reply: Reply::Acquired { fence },
                        ..
                    }) => add(*fence),
                    _ => {}
                }
            }
        }
        fences.sort_unstable();
        fences.dedup();
        let rank = |fence: &mut u32| {
            if *fence > 0 {
                *fence = u32::try_from(fences.binary_search(fence).unwrap() + 1).unwrap();
            }
        };
        rank(&mut self.server.fence);
        rank(&mut self.ghost.started_any);
        rank(&mut self.ghost.started_exclusive);
        for h in &mut self.server.holders {
            rank(&mut h.fence);
        }
        for list in &mut self.server.wake {
            for msg in &mut list.msgs {
                if let Msg::Granted { fence, .. } = msg {
                    rank(fence);
                }
            }
        }
        for c in &mut self.clients {
            if let Phase::Holding { fence, .. } = &mut c.phase {
                rank(fence);
            }
            for sent in &mut c.inflight {
                if let Request::Release { lost: Some(fence) } = &mut sent.request {
                    rank(fence);
                }
            }
            match &mut c.inbox {
                Some(Delivered::Woken(Some(Msg::Granted { fence, .. }))) => rank(fence),
                Some(Delivered::Answer {
                    reply: Reply::Acquired { fence },
                    ..
                }) => rank(fence),
                _ => {}
            }
        }
    }
}
