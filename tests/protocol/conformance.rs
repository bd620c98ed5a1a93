//! The model must not drift from `lua/`: seeded random walks of script calls and time run
//! against a real redis-server through redlock's own calls (the library's `Lock`), and, step
//! by step, against the model ([`Server`]); each reply and the lock's observable state
//! afterwards (`inspect`: live holders, live waiters in order, the queue's length, the last
//! fence; the history's ends; which keys exist, each with an expiry but the fence counter;
//! each wake list's messages) must be what the model predicts. Any difference fails with the
//! seed, the trace up to it, and the shortest replay of it that still differs (`shrink`).
//!
//! Time is the walk's: the server runs on a clock that stands still ([`FakeClock`]) and is
//! moved to the model's time before each call, a millisecond after the call before it, whole
//! ticks of [`TICK_MS`] by a `Tick` step. So no lease can end between two calls however long
//! the machine takes to make them, and a walk is the same from run to run, on a loaded machine
//! too. The calls of a tick stay in its first quarter, and the lengths of time the scripts and
//! the walk use (leases, the head lease, `HEAR_MS`, grants) end half a tick or a quarter past
//! a tick's start: no call lands on the millisecond a lease or key ends, where Redis still
//! keeps the key and the model does not. (The whole-minute lengths, a queue entry's or a
//! cancel mark's, are longer than any walk.)
//! Fences are compared by their order: redlock's rise with the clock, the model's count.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::util::fake_clock::FakeClock;

use redlock::conn::Session;
use redlock::keys::{LockName, Prefix};
use redlock::lock::{
    Acquisition, Ending as Reported, Identity, Lock, Mode as RealMode, Queueing, Refreshed,
    Release, Request, Retention, Token, Waiter,
};

use super::server::{Acquire, Ending, Mode, Msg, Reply, Server, Time, Timing, Tok, Wid};
use crate::util::RedisServer;

/// One tick of the walk, in ms.
pub const TICK_MS: Time = 400;
const NAME: &str = "m";
const KEY: &str = "redlock:{m}";

/// A script call or the passing of time.
#[derive(Debug, Clone)]
pub enum Step {
    Acquire {
        client: usize,
        queueing: Queue,
        reenter: bool,
        ttl: Time,
        mode: Mode,
    },
    Release {
        client: usize,
        min_hold: Time,
        lost: bool,
    },
    Leave {
        client: usize,
        mark: bool,
    },
    Extend {
        client: usize,
        ttl: Time,
    },
    Refresh {
        client: usize,
    },
    Force,
    /// The client's block on its wake list takes one message (LPOP).
    Pop {
        client: usize,
    },
    /// The client starts over with a new token and place (as redlock does after a give-up).
    Renew {
        client: usize,
    },
    Tick(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    No,
    Join,
    Stay,
}

/// One client of the walk: its current token and waiter id (a new pair after a give-up), and
/// whether it claims a grant with a call (`acquire`) or starts on it (`run`).
#[derive(Debug, Clone)]
struct Client {
    generation: u8,
    claims: bool,
    /// What the client has, as the model's last answer to it said: the walk mostly makes the
    /// calls such a client makes next, so that queues grow and locks change hands.
    status: Status,
    /// Steps for which the client makes no call of its own (stopped, or dead): its entry
    /// lapses, its grant goes unheard.
    asleep: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Idle,
    Queued,
    Holding,
}

const GENERATIONS: u8 = 20;

impl Client {
    fn tok(&self, index: usize) -> Tok {
        u8::try_from(index).unwrap() * GENERATIONS + self.generation
    }
}

fn token(tok: Tok) -> Token {
    Token::parse(&format!("{:032x}", u32::from(tok) + 1)).unwrap()
}

fn waiter_id(wid: Wid) -> String {
    format!("{:016x}", u32::from(wid) + 1)
}

/// Client `client`'s token and its place in the queue.
fn place(clients: &[Client], client: usize) -> (Tok, Waiter) {
    let tok = clients[client].tok(client);
    let place = Waiter {
        id: waiter_id(tok),
        token: token(tok),
        claims: clients[client].claims,
    };
    (tok, place)
}

/// The identity a token's records carry: its pid tells the token.
fn identity(tok: Tok) -> Identity {
    Identity {
        host: "model".to_owned(),
        pid: 1000 + u32::from(tok),
        user: "u".to_owned(),
        command: "c".to_owned(),
        note: None,
    }
}

fn tok_of_pid(pid: u32) -> Tok {
    Tok::try_from(pid - 1000).unwrap()
}

fn real_mode(mode: Mode) -> RealMode {
    match mode {
        Mode::Exclusive => RealMode::Exclusive,
        Mode::Shared => RealMode::Shared,
        Mode::Semaphore(limit) => RealMode::Semaphore(u32::from(limit)),
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
        Mode::Semaphore(_) => "semaphore",
    }
}

/// xorshift64*.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// How a walk ended.
pub enum Walked {
    /// Every step as the model said.
    Agreed { steps: usize },
    /// A difference, with the trace up to it, and the steps that led to it (the last one
    /// the step that differed), which replay it.
    Differed { why: String, steps: Vec<Step> },
}

/// The walk's driver: the real lock and its model, side by side.
pub struct Walk {
    server: RedisServer,
    /// The server's clock, moved by the walk (dropped after the server: its file with it).
    clock: FakeClock,
    con: redis::Connection,
    session: Session,
    lock: Lock,
    model: Server,
    clients: Vec<Client>,
    /// The server's clock at the walk's time 0, ms.
    origin: u64,
    /// Model fences and the real ones they stand for.
    fences: HashMap<u32, u64>,
    /// The fence each token was last acquired or handed the lock with (for a lost release).
    held: HashMap<Tok, u32>,
    trace: Vec<String>,
    /// Every step made so far, the ones the walk made on its own included: a replay.
    made: Vec<Step>,
    rng: Rng,
    semaphore: Option<u8>,
}

impl Walk {
    pub fn new(seed: u64, clients: usize) -> Self {
        let clock =
            FakeClock::new().unwrap_or_else(|needs| panic!("the conformance walks need {needs}"));
        // The real time, to the second: the records' times read as times of today.
        let origin = crate::util::wall_ms() / 1000 * 1000;
        clock.freeze(origin);
        let server = clock
            .server()
            .unwrap_or_else(|needs| panic!("the conformance walks need {needs}"));
        let con = server.client();
        let session = server.session();
        let lock = Lock::new(
            &Prefix::new("redlock:").unwrap(),
            LockName::new(NAME).unwrap(),
        );
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let semaphore = rng.chance(30).then_some(2);
        let clients = (0..clients)
            .map(|i| Client {
                generation: 0,
                claims: i % 2 == 0,
                status: Status::Idle,
                asleep: 0,
            })
            .collect();
        Self {
            server,
            clock,
            con,
            session,
            lock,
            model: Server::new(Timing::REAL, 0, None),
            clients,
            origin,
            fences: HashMap::new(),
            held: HashMap::new(),
            trace: Vec::new(),
            made: Vec::new(),
            rng,
            semaphore,
        }
    }

    /// A random step, as the lock's clients could make it.
    pub fn draw(&mut self) -> Step {
        let rng = &mut self.rng;
        let client = usize::try_from(rng.below(self.clients.len() as u64)).unwrap();
        let mode = match self.semaphore {
            _ if rng.chance(3) => Mode::Semaphore(3),
            Some(limit) => Mode::Semaphore(limit),
            None if rng.chance(50) => Mode::Exclusive,
            None => Mode::Shared,
        };
        // Lengths that end half a tick past a tick's start.
        let ttl = [
            2 * TICK_MS + TICK_MS / 2,
            4 * TICK_MS + TICK_MS / 2,
            10 * TICK_MS + TICK_MS / 2,
        ][usize::try_from(rng.below(3)).unwrap()];
        let acquire = |queueing| Step::Acquire {
            client,
            queueing,
            reenter: false,
            ttl,
            mode,
        };
        for other in &mut self.clients {
            other.asleep = other.asleep.saturating_sub(1);
        }
        if rng.chance(2) {
            self.clients[client].asleep = u16::try_from(20 + rng.below(60)).unwrap();
        }
        if rng.chance(70) && self.clients[client].asleep == 0 {
            match (self.clients[client].status, rng.below(10)) {
                (_, 0) => return Step::Tick(1),
                (Status::Idle, 1..=7) => return acquire(Queue::Join),
                (Status::Idle, _) => return acquire(Queue::No),
                (Status::Queued, 1..=4) => return Step::Pop { client },
                (Status::Queued, 5..=8) => return acquire(Queue::Stay),
                (Status::Queued, _) => return Step::Leave { client, mark: true },
                (Status::Holding, 1..=3) => return Step::Extend { client, ttl },
                (Status::Holding, 4..=6) => {
                    return Step::Release {
                        client,
                        min_hold: 0,
                        lost: false,
                    };
                }
                (Status::Holding, _) => return Step::Tick(1),
            }
        }
        match rng.below(100) {
            0..=34 => Step::Acquire {
                client,
                queueing: [Queue::No, Queue::Join, Queue::Join, Queue::Stay]
                    [usize::try_from(rng.below(4)).unwrap()],
                reenter: rng.chance(8),
                ttl,
                mode,
            },
            35..=44 => Step::Release {
                client,
                min_hold: if rng.chance(15) {
                    2 * TICK_MS + TICK_MS / 2
                } else {
                    0
                },
                lost: rng.chance(15),
            },
            45..=49 => Step::Leave {
                client,
                mark: rng.chance(70),
            },
            50..=56 => Step::Extend { client, ttl },
            57..=60 => Step::Refresh { client },
            61 => Step::Force,
            62..=73 => Step::Pop { client },
            74..=76 => Step::Renew { client },
            _ => Step::Tick(u8::try_from(1 + rng.below(3)).unwrap()),
        }
    }

    /// Runs `opening` and then `steps` random steps; the walk's result.
    pub fn run(&mut self, opening: &[Step], steps: usize) -> Walked {
        for done in 0..opening.len() + steps {
            let step = match opening.get(done) {
                Some(step) => step.clone(),
                None => self.draw(),
            };
            match self.step(&step) {
                // A token given up is never used again by redlock: mostly the client starts
                // over (a late request of the old one is what the cancel mark is for, and the
                // walk sends one now and then).
                Ok(()) if done >= opening.len() => {
                    if let Step::Leave { client, mark: true } = step
                        && self.rng.chance(80)
                    {
                        self.predict(&Step::Renew { client });
                        self.made.push(Step::Renew { client });
                    }
                }
                Ok(()) => {}
                Err(difference) => {
                    return Walked::Differed {
                        why: format!(
                            "{difference}\ntrace ({} steps):\n{}",
                            self.trace.len(),
                            self.trace.join("\n")
                        ),
                        steps: std::mem::take(&mut self.made),
                    };
                }
            }
        }
        Walked::Agreed { steps }
    }

    /// Makes one step on both sides and compares them.
    fn step(&mut self, step: &Step) -> Result<(), String> {
        self.made.push(step.clone());
        if let Step::Tick(ticks) = step {
            let tick = self.model.now - self.model.now % TICK_MS;
            self.model.now = tick + Time::from(*ticks) * TICK_MS;
            self.clock.freeze(self.real_time(self.model.now));
            self.trace
                .push(format!("tick x{ticks} (now {} ms)", self.model.now));
            return Ok(());
        }
        // Calls stay in the first quarter of their tick, off the ends of leases and keys (half
        // or a quarter tick past a tick's start): Redis keeps a key through its last
        // millisecond, the model not. A tick with more calls than that (a replay being shrunk
        // can leave its ticks out) goes on in the next one.
        if self.model.now % TICK_MS + 1 >= TICK_MS / 4 {
            self.step(&Step::Tick(1))?;
        }
        // Each call a ms after the one before, as they run one after another: two leases
        // taken in one tick end in the order they were taken, on both sides.
        self.model.now += 1;
        self.clock.freeze(self.real_time(self.model.now));
        let predicted = self.predict(step);
        let real = self.call(step);
        let mut line = format!("{step:?} -> model {predicted:?}, real {real}");
        let same = self.compare(&predicted, &real);
        if let Err(why) = &same {
            write!(line, "  <-- {why}").unwrap();
        }
        self.trace.push(line);
        same?;
        self.compare_state()
    }

    fn predict(&mut self, step: &Step) -> Outcome {
        let model = &mut self.model;
        match *step {
            Step::Acquire {
                client,
                queueing,
                reenter,
                ttl,
                mode,
            } => {
                let tok = self.clients[client].tok(client);
                let reply = model.acquire(Acquire {
                    tok,
                    ttl,
                    mode,
                    waiter: (queueing != Queue::No).then_some(tok),
                    stay: queueing == Queue::Stay,
                    reenter,
                    claims: self.clients[client].claims,
                });
                self.clients[client].status = match &reply {
                    Reply::Acquired { fence } => {
                        self.held.insert(tok, *fence);
                        Status::Holding
                    }
                    Reply::Busy { position, .. } if *position > 0 => Status::Queued,
                    Reply::Busy { .. } | Reply::Gone | Reply::Cancelled | Reply::NotHeld => {
                        Status::Idle
                    }
                    _ => self.clients[client].status,
                };
                Outcome::Reply(reply)
            }
            Step::Release {
                client,
                min_hold,
                lost,
            } => {
                let tok = self.clients[client].tok(client);
                let fence = lost.then(|| self.held.get(&tok).copied()).flatten();
                let reply = model.release(tok, min_hold, fence);
                if matches!(reply, Reply::Released | Reply::Kept(_) | Reply::NotHeld) {
                    self.clients[client].status = Status::Idle;
                }
                Outcome::Reply(reply)
            }
            Step::Leave { client, mark } => {
                let tok = self.clients[client].tok(client);
                self.clients[client].status = Status::Idle;
                Outcome::Reply(model.leave(tok, tok, mark))
            }
            Step::Extend { client, ttl } => {
                let tok = self.clients[client].tok(client);
                Outcome::Reply(model.extend(tok, ttl))
            }
            Step::Refresh { client } => {
                let tok = self.clients[client].tok(client);
                Outcome::Reply(model.refresh(tok))
            }
            Step::Force => Outcome::Reply(model.force()),
            Step::Pop { client } => {
                let tok = self.clients[client].tok(client);
                let msg = model.pop(tok);
                if let Some(Msg::Granted { fence, .. }) = msg {
                    self.held.insert(tok, fence);
                    self.clients[client].status = Status::Holding;
                }
                Outcome::Popped(msg)
            }
            Step::Renew { client } => {
                let next = (self.clients[client].generation + 1) % GENERATIONS;
                self.clients[client].generation = next;
                self.clients[client].status = Status::Idle;
                Outcome::Nothing
            }
            Step::Tick(_) => Outcome::Nothing,
        }
    }

    /// Makes the step on the real lock; its answer as text the comparison reads.
    fn call(&mut self, step: &Step) -> RealOutcome {
        let session = &mut self.session;
        let lock = &self.lock;
        match *step {
            Step::Acquire {
                client,
                queueing,
                reenter,
                ttl,
                mode,
            } => {
                let (tok, place) = place(&self.clients, client);
                let who = identity(tok);
                let request = Request {
                    token: &place.token,
                    ttl: Duration::from_millis(u64::try_from(ttl).unwrap()),
                    mode: real_mode(mode),
                    who: &who,
                    reenter,
                    replicas: None,
                    history: Retention::default(),
                };
                let queueing = match queueing {
                    Queue::No => Queueing::No,
                    Queue::Join => Queueing::Join(&place),
                    Queue::Stay => Queueing::Stay(&place),
                };
                RealOutcome::Acquire(
                    lock.acquire(session, &request, queueing)
                        .map_err(|e| format!("{e:#}")),
                )
            }
            Step::Release {
                client,
                min_hold,
                lost,
            } => {
                let tok = self.clients[client].tok(client);
                let held_fence = lost
                    .then(|| {
                        self.held
                            .get(&tok)
                            .and_then(|fence| self.fences.get(fence))
                            .copied()
                    })
                    .flatten();
                let ending = Reported {
                    held_fence,
                    ..Reported::default()
                };
                RealOutcome::Release(
                    lock.release(
                        session,
                        &token(tok),
                        Duration::from_millis(u64::try_from(min_hold).unwrap()),
                        &ending,
                    )
                    .map_err(|e| format!("{e:#}")),
                )
            }
            Step::Leave { client, mark } => {
                let (_, place) = place(&self.clients, client);
                RealOutcome::Done(
                    lock.leave(session, &place, mark)
                        .map_err(|e| format!("{e:#}")),
                )
            }
            Step::Extend { client, ttl } => {
                let tok = self.clients[client].tok(client);
                RealOutcome::Extend(
                    lock.extend(
                        session,
                        &token(tok),
                        Duration::from_millis(u64::try_from(ttl).unwrap()),
                        None,
                    )
                    .map_err(|e| format!("{e:#}")),
                )
            }
            Step::Refresh { client } => {
                let (_, place) = place(&self.clients, client);
                RealOutcome::Refresh(lock.refresh(session, &place).map_err(|e| format!("{e:#}")))
            }
            Step::Force => RealOutcome::Force(
                lock.force_release(session, "model")
                    .map(|(_, evicted, _)| {
                        let mut toks: Vec<Tok> =
                            evicted.iter().map(|h| tok_of_pid(h.who.pid)).collect();
                        toks.sort_unstable();
                        toks
                    })
                    .map_err(|e| format!("{e:#}")),
            ),
            Step::Pop { client } => {
                let tok = self.clients[client].tok(client);
                let key = format!("{KEY}:wake:{}", waiter_id(tok));
                let popped: Option<String> =
                    redis::cmd("LPOP").arg(&key).query(&mut self.con).unwrap();
                RealOutcome::Popped(popped)
            }
            Step::Renew { .. } | Step::Tick(_) => RealOutcome::Nothing,
        }
    }

    /// The walk's time as a real time (server ms).
    fn real_time(&self, at: Time) -> u64 {
        self.origin + u64::try_from(at).unwrap()
    }

    /// A real time (server ms) as the walk's time.
    fn walk_time(&self, real: u64) -> Time {
        i64::try_from(real).unwrap() - i64::try_from(self.origin).unwrap()
    }

    /// Whether a real time is the model's `at`, to the millisecond: the server's clock is the
    /// walk's.
    fn same_time(&self, real: u64, at: Time) -> bool {
        self.walk_time(real) == at
    }

    /// Whether a real length of time is the model's, to the millisecond.
    fn same_length(real: u64, length: Time) -> bool {
        i64::try_from(real).is_ok_and(|real| real == length)
    }

    /// Maps a model fence to the real one it stands for, or records it: fences issued later
    /// are higher on both sides.
    fn same_fence(&mut self, model: u32, real: u64) -> Result<(), String> {
        if let Some(known) = self.fences.get(&model) {
            return if *known == real {
                Ok(())
            } else {
                Err(format!("fence {real} where {known} was expected"))
            };
        }
        let higher_model = self.fences.keys().all(|m| *m < model);
        let higher_real = self.fences.values().all(|r| *r < real);
        if higher_model != higher_real {
            return Err(format!("fence {real} out of order"));
        }
        self.fences.insert(model, real);
        Ok(())
    }

    fn compare(&mut self, predicted: &Outcome, real: &RealOutcome) -> Result<(), String> {
        match (predicted, real) {
            (Outcome::Nothing, RealOutcome::Nothing) => Ok(()),
            (Outcome::Reply(Reply::Mode), RealOutcome::Acquire(Err(error))) => {
                if error.contains("the lock is") {
                    Ok(())
                } else {
                    Err(format!("another error: {error}"))
                }
            }
            (Outcome::Reply(reply), RealOutcome::Acquire(Ok(acquisition))) => {
                match (reply, acquisition) {
                    (Reply::Acquired { fence }, Acquisition::Acquired(lease)) => {
                        self.same_fence(*fence, lease.fence)
                    }
                    (
                        Reply::Busy {
                            holder,
                            position,
                            length,
                            hint,
                        },
                        Acquisition::Busy {
                            holder: real_holder,
                            position: real_position,
                            length: real_length,
                            hint: real_hint,
                            ..
                        },
                    ) => {
                        let real_holder = real_holder.as_ref().map(|h| tok_of_pid(h.who.pid));
                        if *holder != real_holder
                            || position != real_position
                            || length != real_length
                        {
                            return Err("busy differs".to_owned());
                        }
                        let real_hint = u64::try_from(real_hint.as_millis()).unwrap();
                        if !Self::same_length(real_hint, *hint) {
                            return Err(format!("hint {real_hint} ms, not {hint}"));
                        }
                        Ok(())
                    }
                    (Reply::Gone, Acquisition::Gone)
                    | (Reply::NotHeld, Acquisition::NotHeldByToken)
                    | (Reply::Cancelled, Acquisition::Cancelled) => Ok(()),
                    _ => Err("another answer".to_owned()),
                }
            }
            (Outcome::Reply(reply), RealOutcome::Release(Ok(release))) => match (reply, release) {
                (Reply::Released, Release::Released) | (Reply::NotHeld, Release::NotHeld) => Ok(()),
                (Reply::StillHeld(n), Release::StillHeld(m)) if u32::from(*n) == *m => Ok(()),
                (Reply::Kept(left), Release::Kept(real)) => {
                    if Self::same_length(u64::try_from(real.as_millis()).unwrap(), *left) {
                        Ok(())
                    } else {
                        Err("kept for another length".to_owned())
                    }
                }
                _ => Err("another answer".to_owned()),
            },
            (Outcome::Reply(Reply::Left), RealOutcome::Done(Ok(()))) => Ok(()),
            (Outcome::Reply(reply), RealOutcome::Extend(Ok(extended))) => {
                if (*reply == Reply::Extended) == *extended {
                    Ok(())
                } else {
                    Err("another answer".to_owned())
                }
            }
            (Outcome::Reply(reply), RealOutcome::Refresh(Ok(refreshed))) => {
                match (reply, refreshed) {
                    (
                        Reply::Queued { position, length },
                        Refreshed::Queued {
                            position: p,
                            length: l,
                            ..
                        },
                    ) if position == p && length == l => Ok(()),
                    (Reply::NotQueued, Refreshed::NotQueued { .. }) => Ok(()),
                    _ => Err("another answer".to_owned()),
                }
            }
            (Outcome::Reply(Reply::Forced(toks)), RealOutcome::Force(Ok(real))) => {
                let mut toks = toks.clone();
                toks.sort_unstable();
                if toks == *real {
                    Ok(())
                } else {
                    Err("other holders evicted".to_owned())
                }
            }
            (Outcome::Popped(msg), RealOutcome::Popped(real)) => {
                self.same_message(msg.as_ref(), real.as_deref())
            }
            _ => Err("another answer".to_owned()),
        }
    }

    fn same_message(&mut self, msg: Option<&Msg>, real: Option<&str>) -> Result<(), String> {
        let (Some(msg), Some(real)) = (msg, real) else {
            return if msg.is_none() && real.is_none() {
                Ok(())
            } else {
                Err("another message".to_owned())
            };
        };
        let mut parts = real.splitn(4, ':');
        let kind = parts.next().unwrap_or_default();
        let mut number = || parts.next().and_then(|part| part.parse::<u64>().ok());
        match (msg, kind) {
            (Msg::Granted { fence, exp }, "g") => {
                let (real_fence, real_exp) = (number().unwrap_or(0), number().unwrap_or(0));
                self.same_fence(*fence, real_fence)?;
                if self.same_time(real_exp, *exp) {
                    Ok(())
                } else {
                    Err("a grant of another length".to_owned())
                }
            }
            (Msg::Watch { exp, length }, "w") => {
                let (real_exp, real_length) = (number().unwrap_or(0), number().unwrap_or(0));
                if self.same_time(real_exp, *exp) && real_length == u64::try_from(*length).unwrap()
                {
                    Ok(())
                } else {
                    Err("another watch".to_owned())
                }
            }
            (Msg::Head { due }, "h") => {
                if self.same_time(number().unwrap_or(0), *due) {
                    Ok(())
                } else {
                    Err("another head lease".to_owned())
                }
            }
            _ => Err("another message".to_owned()),
        }
    }

    /// The lock's observable state against the model's.
    fn compare_state(&mut self) -> Result<(), String> {
        self.model.expire_keys();
        let state = self
            .lock
            .inspect(&mut self.session)
            .map_err(|e| format!("inspect: {e:#}"))?;
        // (By token: inspect lists them oldest first, the order the busy replies' holder is
        // compared in is the first lease to end.)
        let mut model_live: Vec<_> = self.model.live().into_iter().cloned().collect();
        model_live.sort_by_key(|holder| holder.tok);
        let mut real_live = Vec::new();
        for holder in &state.holders {
            real_live.push((tok_of_pid(holder.who.pid), holder.clone()));
        }
        real_live.sort_by_key(|(tok, _)| *tok);
        if model_live.len() != real_live.len() || state.holder_count != model_live.len() {
            return Err(format!(
                "live holders {:?}, the model's {:?}",
                real_live.iter().map(|(tok, _)| *tok).collect::<Vec<_>>(),
                model_live.iter().map(|h| h.tok).collect::<Vec<_>>()
            ));
        }
        for (model, (tok, real)) in model_live.iter().zip(&real_live) {
            let fence = model.fence;
            if model.tok != *tok
                || mode_name(model.mode) != real.mode
                || model.granted != real.granted
                || model.over != real.over
                || u32::from(model.count) != real.count
                || !self.same_time(real.exp, model.exp)
            {
                return Err(format!(
                    "holder {tok}: {real:?}, the model's {model:?}\n  real holders: {:?}\n  model's: {:?}",
                    real_live
                        .iter()
                        .map(|(tok, h)| (*tok, h.fence, self.walk_time(h.exp), h.count))
                        .collect::<Vec<_>>(),
                    model_live
                        .iter()
                        .map(|h| (h.tok, h.fence, h.exp, h.count))
                        .collect::<Vec<_>>()
                ));
            }
            self.same_fence(fence, real.fence)?;
        }
        // Live waiters in order, and the queue's length.
        let now = self.model.now;
        let model_waiting: Vec<Tok> = self
            .model
            .queue
            .iter()
            .filter(|entry| entry.exp > now)
            .map(|entry| entry.tok)
            .collect();
        let real_waiting: Vec<Tok> = state
            .waiters
            .iter()
            .map(|w| tok_of_pid(w.who.pid))
            .collect();
        if model_waiting != real_waiting || state.queue_length != self.model.queue.len() {
            return Err(format!(
                "waiters {real_waiting:?} of {}, the model's {model_waiting:?} of {}",
                state.queue_length,
                self.model.queue.len()
            ));
        }
        match (state.last_fence, self.model.fence) {
            (None, 0) => {}
            (Some(real), model) if model > 0 => self.same_fence(model, real)?,
            (real, model) => return Err(format!("last fence {real:?}, the model's {model}")),
        }
        self.compare_history()?;
        self.compare_keys()
    }

    fn compare_history(&mut self) -> Result<(), String> {
        let (_, entries, _) = self
            .lock
            .history(&mut self.session)
            .map_err(|e| format!("history: {e:#}"))?;
        let kept = self.model.history.len().min(100);
        let model = &self.model.history[self.model.history.len() - kept..];
        if entries.len() != model.len() {
            return Err(format!(
                "{} history entries, the model's {}",
                entries.len(),
                model.len()
            ));
        }
        for (hold, entry) in model.to_vec().iter().zip(&entries) {
            self.same_fence(hold.fence, entry.fence)?;
            let outcome = hold.ended.map(|(_, how)| match how {
                Ending::Released => "released",
                Ending::GivenBack => "given back",
                Ending::Forced => "forced",
                Ending::Lost => "lost",
            });
            if outcome != entry.outcome.as_deref() || !self.same_time(entry.exp, hold.exp) {
                return Err(format!(
                    "history of fence {}: {entry:?}, the model's {hold:?}",
                    hold.fence
                ));
            }
        }
        Ok(())
    }

    /// Which keys exist (each with an expiry, but the fence counter), and the wake lists.
    fn compare_keys(&mut self) -> Result<(), String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{KEY}:*"))
            .query(&mut self.con)
            .unwrap();
        keys.sort();
        for key in &keys {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut self.con).unwrap();
            if pttl == -1 && !key.ends_with(":fence") {
                return Err(format!("{key} has no expiry"));
            }
        }
        let has = |suffix: &str| keys.iter().any(|key| key.ends_with(suffix));
        if has(":holders") == self.model.holders.is_empty() {
            return Err(format!(
                "holders key there: {}, the model's {:?}",
                has(":holders"),
                self.model.holders
            ));
        }
        if has(":queue") == self.model.queue.is_empty() {
            return Err(format!(
                "queue key there: {}, the model's {:?}",
                has(":queue"),
                self.model.queue
            ));
        }
        let mut model_lists: Vec<(String, usize)> = self
            .model
            .wake
            .iter()
            .map(|list| {
                (
                    format!("{KEY}:wake:{}", waiter_id(list.id)),
                    list.msgs.len(),
                )
            })
            .collect();
        model_lists.sort();
        let mut real_lists = Vec::new();
        for key in keys.iter().filter(|key| key.contains(":wake:")) {
            let length: usize = redis::cmd("LLEN").arg(key).query(&mut self.con).unwrap();
            real_lists.push((key.clone(), length));
        }
        if model_lists != real_lists {
            return Err(format!(
                "wake lists {real_lists:?}, the model's {model_lists:?}"
            ));
        }
        let mut model_marks: Vec<String> = self
            .model
            .cancel
            .iter()
            .map(|(tok, _)| format!("{KEY}:cancel:{}", token(*tok).as_str()))
            .collect();
        model_marks.sort();
        let real_marks: Vec<String> = keys
            .iter()
            .filter(|key| key.contains(":cancel:"))
            .cloned()
            .collect();
        if model_marks != real_marks {
            return Err(format!(
                "cancel marks {real_marks:?}, the model's {model_marks:?}"
            ));
        }
        Ok(())
    }

    pub fn log(&self) -> String {
        self.server.log()
    }
}

/// What the model predicted.
#[derive(Debug)]
enum Outcome {
    Reply(Reply),
    Popped(Option<Msg>),
    Nothing,
}

/// What the real call answered.
// (One per step, moved once: its size does not matter.)
#[allow(clippy::large_enum_variant)]
enum RealOutcome {
    Acquire(Result<Acquisition, String>),
    Release(Result<Release, String>),
    Done(Result<(), String>),
    Extend(Result<bool, String>),
    Refresh(Result<Refreshed, String>),
    Force(Result<Vec<Tok>, String>),
    Popped(Option<String>),
    Nothing,
}

impl std::fmt::Display for RealOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RealOutcome::Acquire(result) => write!(f, "{result:?}"),
            RealOutcome::Release(result) => write!(f, "{result:?}"),
            RealOutcome::Done(result) => write!(f, "{result:?}"),
            RealOutcome::Extend(result) => write!(f, "{result:?}"),
            RealOutcome::Refresh(result) => write!(f, "{result:?}"),
            RealOutcome::Force(result) => write!(f, "{result:?}"),
            RealOutcome::Popped(result) => write!(f, "{result:?}"),
            RealOutcome::Nothing => write!(f, "-"),
        }
    }
}

/// Runs one seeded walk of `steps` (after `opening`) on a fresh server with `clients` clients.
/// A difference is reported with the seed and the shortest trace that still shows one
/// ([`shrink`]).
pub fn walk(seed: u64, clients: usize, opening: &[Step], steps: usize) -> Result<usize, String> {
    match walk_once(seed, clients, opening, steps) {
        Walked::Agreed { steps } => Ok(steps),
        Walked::Differed { why, steps } => {
            let budget = std::env::var("REDLOCK_SHRINK_SECS")
                .ok()
                .and_then(|secs| secs.parse().ok())
                .map_or(Duration::from_secs(300), Duration::from_secs);
            let (shortest, shown) = shrink(clients, steps, budget);
            Err(format!(
                "{why}\n\nthe shortest trace found that still differs ({} steps; replay it as an opening):\n{shortest:#?}\n{shown}",
                shortest.len()
            ))
        }
    }
}

/// One seeded walk, as it went.
pub fn walk_once(seed: u64, clients: usize, opening: &[Step], steps: usize) -> Walked {
    let mut walk = Walk::new(seed, clients);
    // (An opening is written for a read/write lock.)
    if !opening.is_empty() {
        walk.semaphore = None;
    }
    match walk.run(opening, steps) {
        Walked::Differed { why, steps } => Walked::Differed {
            why: format!(
                "the scripts differ from the model (seed {seed}, {clients} clients): {why}\nserver log:\n{}",
                walk.log()
            ),
            steps,
        },
        other => other,
    }
}

/// The shortest replay of `steps` (a walk that differed, ending with the step that did) that
/// still differs, found within `budget`: chunks of steps left out, halving their size down to
/// single steps, each candidate replayed on a fresh server. Returns the steps and what the
/// shortest replay reported.
pub fn shrink(clients: usize, mut steps: Vec<Step>, budget: Duration) -> (Vec<Step>, String) {
    let until = Instant::now() + budget;
    let mut shown = String::new();
    let mut chunk = steps.len().div_ceil(2);
    while chunk > 0 && Instant::now() < until {
        let mut start = 0;
        while start < steps.len() && Instant::now() < until {
            let mut candidate = steps.clone();
            candidate.drain(start..(start + chunk).min(steps.len()));
            match replay(clients, &candidate) {
                Walked::Differed { why, steps: made } => {
                    // What ran up to the difference: it may end before the candidate does.
                    steps = made;
                    shown = why;
                }
                Walked::Agreed { .. } => start += chunk,
            }
        }
        chunk /= 2;
    }
    (steps, shown)
}

/// Runs exactly `steps` on a fresh server with `clients` clients.
pub fn replay(clients: usize, steps: &[Step]) -> Walked {
    let mut walk = Walk::new(0, clients);
    walk.semaphore = None;
    match walk.run(steps, 0) {
        Walked::Differed { why, steps } => Walked::Differed {
            why: format!("{why}\nserver log:\n{}", walk.log()),
            steps,
        },
        other => other,
    }
}
