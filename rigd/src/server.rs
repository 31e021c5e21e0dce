//! The control server: accepting connections, who may connect and how many, the handshake,
//! and passing each request to the state owner.
//!
//! The accept loop never waits for a connection: at accept it reads the peer's credentials
//! from the socket (`SO_PEERCRED`, `SO_PEERGROUPS`), refuses at once a peer `[access]` does
//! not allow, and gives every other one a slot ([`Slots`]): at most `connections.per_uid`
//! per user, so one user cannot take another's, and `daemon.max_connections` in all, which
//! bounds rigd's descriptors. A peer over either cap is refused at once, with the limit
//! named, but only after the slots of peers that hung up are given back: a slot is its
//! socket's, free as soon as the peer closes it, whatever the teardown of its devices still
//! does (see [`Slots`]). A refused peer is answered without its hello being read and holds nothing; such
//! refusals are logged at most once a second for each reason, with a count of the rest.
//!
//! One tokio task per connection then reads the hello (within `connections.hello_ms`),
//! reads a request, answers it through the state's [`Handler`] ([`crate::state`]) and sends
//! the answer back, one request at a time. A request whose route says it may block
//! ([`rig_proto::Route::blocks`]: making, growing, stopping or closing a device, which make
//! or join queue threads; loading an image, parsed before the device's lock
//! ([`crate::image`]); mapping host memory; an administrator's), one whose device is busy,
//! and the disconnect's cleanup run on tokio's blocking pool; the rest are answered in
//! the task ([`crate::state::State::try_handle`]), so no async worker ever waits for a
//! path or for another request, and a slow stop of one device delays no other client's
//! hello or request. A frame that started must arrive whole within `connections.frame_ms`
//! and an answer be taken by the client within the same bound; a connection holding no
//! device that sends no request for `connections.idle_ms` is closed (one holding a device
//! never is: its work goes through shared memory).
//!
//! Shutdown follows mini-redis: a broadcast tells every handler to stop, and each handler
//! holds an `mpsc::Sender` clone, so the server knows all are done when the receiver sees
//! none left. Before the broadcast every device is lost as rigd is shutting down
//! ([`crate::state::State::lose_all_at_shutdown`]: flags raised, waiters woken), and a
//! connection holding a device is served on until its client has been answered that each
//! of its devices is lost (or closed them, or hung up), for at most [`SHUTDOWN_GRACE_MS`]: so
//! a client reads "rigd is shutting down", not a connection that broke.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rig_proto::frame::FrameError;
use rig_proto::messages::{DeviceId, ErrorCode, Request, Response};
use rig_proto::{FrameBudget, ServerConnection, reply_for};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, mpsc as tmpsc};

use crate::config::{AccessRule, Connections, Peer};
use crate::logging::client_text;
use crate::refusal::Refusal;
use crate::state::{ClientId, Handler, Reply, Shared};

/// Refusals at accept are logged at most once a second for each reason, with how many
/// were not: a storm of refused connections must not become a storm of log lines.
#[derive(Debug, Default)]
struct Refusals {
    /// For each reason: when it was last logged, and refusals since.
    by_reason: Mutex<HashMap<&'static str, (std::time::Instant, u64)>>,
}

impl Refusals {
    /// `Some(n)` if this refusal should be logged, `n` being those not logged before it.
    fn note(&self, reason: &'static str) -> Option<u64> {
        let now = std::time::Instant::now();
        let mut m = self.by_reason.lock().unwrap_or_else(|e| e.into_inner());
        match m.get_mut(reason) {
            Some((last, quiet)) if now.duration_since(*last) < Duration::from_secs(1) => {
                *quiet += 1;
                None
            }
            Some((last, quiet)) => {
                *last = now;
                Some(std::mem::take(quiet))
            }
            None => {
                m.insert(reason, (now, 0));
                Some(0)
            }
        }
    }
}

/// What the server needs besides the listener.
#[derive(Debug, Clone)]
pub struct Server {
    /// The state requests change.
    pub state: Shared,
    /// Who may connect.
    pub access: Arc<AccessRule>,
    /// The most connections served at once, over all users (`daemon.max_connections`).
    pub max_connections: usize,
    /// Per-user cap and timeouts (`[connections]`).
    pub connections: Connections,
    /// The figures requests and connections count into.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Administrators' requests.
    pub admin: Arc<crate::admin::Admin>,
    /// Each user's budget of large frames (`connections.frame_bytes_per_uid`).
    pub frame_budgets: FrameBudgets,
    /// The grants' sockets it serves besides its own ([`crate::grant`]).
    pub grants: Arc<crate::grant::Grants>,
}

/// What every socket a running server accepts on shares: the connection slots, the
/// refusals' log, the stop broadcast, and the sender each handler holds a clone of, so
/// that [`Server::run`] knows when all are done.
#[derive(Debug)]
struct Serving {
    slots: Arc<Slots>,
    refusals: Refusals,
    notify: broadcast::Sender<()>,
    /// Never read: dropped with the last handler, which ends [`Server::run`]'s wait.
    _done: tmpsc::Sender<()>,
}

/// A connection's grant, and the signal of its revocation.
#[derive(Debug, Clone)]
struct OnGrant {
    of: crate::grant::GrantOf,
    revoked: tokio::sync::watch::Receiver<bool>,
}

/// The budget of large frames of each user with a connection, shared by its connections
/// (`connections.frame_bytes_per_uid`, `frame_bytes_per_second_per_uid`).
#[derive(Debug, Clone, Default)]
pub struct FrameBudgets {
    by_uid: Arc<std::sync::Mutex<std::collections::HashMap<u32, FrameBudget>>>,
}

impl FrameBudgets {
    /// The budget of `uid`'s connections, made with `bytes` if it has none; budgets no
    /// connection holds any more go.
    fn of(&self, uid: u32, limits: &Connections) -> FrameBudget {
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        by_uid.retain(|_, b| b.shared());
        by_uid
            .entry(uid)
            .or_insert_with(|| {
                FrameBudget::new(
                    limits.frame_bytes_per_uid,
                    limits.frame_bytes_per_second_per_uid,
                )
            })
            .clone()
    }
}

/// Reads a peer's credentials from the socket: `SO_PEERCRED` and `SO_PEERGROUPS`, both as
/// the kernel recorded them when the peer connected.
pub fn peer_of(stream: &UnixStream) -> std::io::Result<Peer> {
    let cred = stream.peer_cred()?;
    Ok(Peer {
        pid: cred.pid().unwrap_or(0),
        uid: cred.uid(),
        gid: cred.gid(),
        groups: crate::listen::peer_groups(stream.as_fd())?,
    })
}

/// Why a connection got no slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// Every slot is taken.
    #[error(
        "rigd serves {max} connections, the most its daemon.max_connections allows; try again later, or ask the administrator to raise daemon.max_connections"
    )]
    Full {
        /// `daemon.max_connections`.
        max: usize,
    },
    /// The user holds its share.
    #[error(
        "user {uid} holds {max} connections to rigd, the most its connections.per_uid allows; close some (each rig-client Rig and rigctl holds one) or ask the administrator to raise connections.per_uid"
    )]
    PerUid {
        /// The user.
        uid: u32,
        /// `connections.per_uid`.
        max: usize,
    },
    /// The grant's connections hold its share.
    #[error(
        "grant {grant} holds {max} connections to rigd, the most connections.per_uid allows each grant; close some (each rig-client Rig holds one) or ask the administrator to raise connections.per_uid"
    )]
    PerGrant {
        /// The grant.
        grant: String,
        /// `connections.per_uid`.
        max: usize,
    },
}

/// Whose share of the connection slots a connection takes: its user's on rigd's own socket,
/// its grant's on a grant's socket, so that a container (often root) cannot take the slots
/// of the host's user of the same uid (the device plugin, rigctl).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SlotOwner {
    /// A user, by uid.
    User(u32),
    /// A grant, by id.
    Grant(Arc<str>),
}

/// The connection slots: how many each user holds and how many all hold.
///
/// A slot is the socket's, not the connection's work: it is given back as soon as rigd
/// learns the peer closed its end, before the connection's devices are torn down. rigd
/// learns that at once, not when the connection's task next runs: every held slot's socket
/// is in one epoll set, and a peer over a cap has the set asked (without waiting) which
/// sockets hung up (`EPOLLHUP`: the peer closed or died), whose slots are then given back
/// first. So a client that closes its connections and connects again is never refused for
/// the ones it closed, however busy rigd is. The kernel drops a socket from the set when
/// rigd closes it, so the set never names a closed descriptor and costs none per slot.
///
/// A slot is not given back while its connection answers a request (from the request read
/// to its answer made): that work is the user's and counts against its cap until done.
/// Once given back, the connection answers nothing more (nobody can read it) and only
/// gives back its devices, which the user's device limit bounds.
#[derive(Debug)]
pub struct Slots {
    max_total: usize,
    max_per_uid: usize,
    held: Mutex<Held>,
    /// The held slots' sockets, to learn which peers hung up; `None` if rigd could not make
    /// an epoll set (then a slot comes back when its connection's task ends).
    hangups: Option<nix::sys::epoll::Epoll>,
}

/// What the slots hold, under one lock.
#[derive(Debug, Default)]
struct Held {
    /// Slots held in all.
    total: usize,
    /// Slots held by each user or grant holding any.
    by_owner: HashMap<SlotOwner, usize>,
    /// The owner and the state of each slot held, by its number (a slot given back leaves).
    slots: HashMap<u64, (SlotOwner, Arc<AtomicU8>)>,
    /// The next slot's number: numbers are never reused, so a late hang-up report of a
    /// slot given back names none.
    next: u64,
}

impl Held {
    /// Gives back slot `id` if it is still held.
    fn give_back(&mut self, id: u64) {
        let Some((owner, _)) = self.slots.remove(&id) else {
            return;
        };
        self.total -= 1;
        if let Some(n) = self.by_owner.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                self.by_owner.remove(&owner);
            }
        }
    }
}

/// A connection's slot, given back when dropped (or before, once its peer hung up while
/// it answered no request).
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    state: Arc<AtomicU8>,
}

/// A slot's state: its connection waits for a request (its slot may be given back if the
/// peer hung up), ...
const IDLE: u8 = 0;
/// ... answers one (it may not), ...
const ANSWERING: u8 = 1;
/// ... or its slot was given back (it answers nothing more).
const GIVEN_BACK: u8 = 2;

impl Slot {
    /// Called with a request read: `false` if the slot was given back (the peer hung up), so
    /// the request must not be answered; else the slot is kept until [`Slot::answered`].
    pub fn answering(&self) -> bool {
        self.state
            .compare_exchange(IDLE, ANSWERING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The request's answer is made (before it is sent: a peer that read it and hung up
    /// must find its slot free).
    pub fn answered(&self) {
        self.state.store(IDLE, Ordering::Release);
    }
}

/// Hang-up reports read from the epoll set at a time.
const HANGUPS_AT_ONCE: usize = 64;

impl Slots {
    /// At most `max_total` slots, `max_per_uid` of them for any one user.
    pub fn new(max_total: usize, max_per_uid: usize) -> Arc<Self> {
        use nix::sys::epoll::{Epoll, EpollCreateFlags};
        let hangups = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "cannot make an epoll set: a closed connection's slot comes back only once its devices are given back");
            })
            .ok();
        Arc::new(Self {
            max_total,
            max_per_uid,
            held: Mutex::new(Held::default()),
            hangups,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for `owner`'s connection `socket`, if it and everyone together are under their
    /// caps once the slots of peers that hung up are given back.
    pub fn take(
        self: &Arc<Self>,
        owner: SlotOwner,
        socket: BorrowedFd<'_>,
    ) -> Result<Slot, SlotError> {
        let mut held = self.lock();
        let over = |h: &Held| {
            let mine = h.by_owner.get(&owner).copied().unwrap_or(0);
            if mine >= self.max_per_uid {
                Err(match &owner {
                    SlotOwner::User(uid) => SlotError::PerUid {
                        uid: *uid,
                        max: self.max_per_uid,
                    },
                    SlotOwner::Grant(grant) => SlotError::PerGrant {
                        grant: grant.to_string(),
                        max: self.max_per_uid,
                    },
                })
            } else if h.total >= self.max_total {
                Err(SlotError::Full {
                    max: self.max_total,
                })
            } else {
                Ok(())
            }
        };
        if over(&held).is_err() {
            self.give_back_hung_up(&mut held);
            over(&held)?;
        }
        let id = held.next;
        held.next += 1;
        if let Some(set) = &self.hangups {
            use nix::sys::epoll::{EpollEvent, EpollFlags};
            // Interest in nothing but what epoll always reports (hang-up, error); level
            // triggered, so a hang-up seen while the connection answers is seen again.
            if let Err(e) = set.add(socket, EpollEvent::new(EpollFlags::empty(), id)) {
                tracing::warn!(error = %e, "cannot watch a connection for its hang-up: its slot comes back once its devices are given back");
            }
        }
        let state = Arc::new(AtomicU8::new(IDLE));
        *held.by_owner.entry(owner.clone()).or_insert(0) += 1;
        held.slots.insert(id, (owner, state.clone()));
        held.total += 1;
        Ok(Slot {
            slots: self.clone(),
            id,
            state,
        })
    }

    /// Gives back the slots whose peers hung up, without waiting.
    fn give_back_hung_up(&self, held: &mut Held) {
        use nix::sys::epoll::{EpollEvent, EpollFlags, EpollTimeout};
        let Some(set) = &self.hangups else {
            return;
        };
        let mut events = [EpollEvent::empty(); HANGUPS_AT_ONCE];
        // A socket is reported until rigd closes it, and epoll reports the ready ones in
        // turn: enough reads to see every held slot's socket, and those closing.
        for _ in 0..=self.max_total.div_ceil(HANGUPS_AT_ONCE) {
            let n = match set.wait(&mut events, EpollTimeout::ZERO) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read which connections hung up");
                    return;
                }
            };
            for e in &events[..n] {
                if !e.events().contains(EpollFlags::EPOLLHUP) {
                    continue;
                }
                // Not while it answers: a later read sees the hang-up again.
                let idle = held.slots.get(&e.data()).is_some_and(|(_, state)| {
                    state
                        .compare_exchange(IDLE, GIVEN_BACK, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                });
                if idle {
                    held.give_back(e.data());
                }
            }
            if n < events.len() {
                return;
            }
        }
    }

    /// Slots held by `owner`.
    pub fn held_by(&self, owner: &SlotOwner) -> usize {
        self.lock().by_owner.get(owner).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().give_back(self.id);
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The longest a connection holding a device is served once rigd is shutting down, for
/// its client to ask why its devices were lost, in milliseconds.
pub const SHUTDOWN_GRACE_MS: u64 = 3000;

impl Server {
    /// Serves `listener` until `shutdown` completes, then stops taking connections, tells
    /// every handler to finish and waits for them.
    pub async fn run(self, listener: UnixListener, shutdown: impl Future<Output = ()>) {
        let (notify, _) = broadcast::channel::<()>(1);
        let (done_tx, mut done_rx) = tmpsc::channel::<()>(1);
        let serving = Arc::new(Serving {
            slots: Slots::new(self.max_connections, self.connections.per_uid),
            refusals: Refusals::default(),
            notify,
            _done: done_tx,
        });
        tokio::pin!(shutdown);
        loop {
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // EMFILE and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let Some((stream, peer, slot)) = self.admit(stream, &serving, None) else {
                continue;
            };
            self.spawn_connection(stream, peer, slot, &serving, None);
        }
        // Every device lost before any connection closes: a client asking why is told.
        let state = self.state.clone();
        let lost = tokio::task::spawn_blocking(move || state.lose_all_at_shutdown())
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "losing the devices at shutdown panicked");
                0
            });
        tracing::info!(
            devices = lost,
            grace_ms = SHUTDOWN_GRACE_MS,
            "shutting down: no more connections; every device lost; telling the connected clients"
        );
        let _ = serving.notify.send(());
        drop(serving);
        let _ = done_rx.recv().await;
    }

    /// Serves an admitted connection in a task of its own.
    fn spawn_connection(
        &self,
        stream: UnixStream,
        peer: Peer,
        slot: Slot,
        serving: &Arc<Serving>,
        grant: Option<OnGrant>,
    ) {
        let server = self.clone();
        let mut stop = serving.notify.subscribe();
        let ctx = serving.clone();
        let counted = self.metrics.connection();
        tokio::spawn(async move {
            server
                .connection(stream, peer, (slot, counted), &mut stop, &ctx, grant)
                .await;
            drop(ctx);
        });
    }

    /// Decides at accept, without reading anything from the peer, whether it is served: its
    /// credentials against `[access]`, then a slot. A peer refused is answered at once and
    /// dropped.
    ///
    /// On a grant's socket (`grant` names it) `[access]` is not asked: reaching that socket
    /// is the credential ([`crate::grant`]), the grant bounds what the peer may hold, and
    /// its connections take the grant's share of the slots, not their user's.
    fn admit(
        &self,
        stream: UnixStream,
        serving: &Serving,
        grant: Option<&Arc<str>>,
    ) -> Option<(UnixStream, Peer, Slot)> {
        let (slots, refusals) = (&serving.slots, &serving.refusals);
        let peer = match peer_of(&stream) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a peer's credentials; dropping it");
                return None;
            }
        };
        let refusal: rig_proto::ErrorReply = if grant.is_none() && !self.access.allows(&peer) {
            self.metrics.refused("access");
            if let Some(unlogged) = refusals.note("access") {
                tracing::warn!(
                    pid = peer.pid,
                    uid = peer.uid,
                    gid = peer.gid,
                    unlogged,
                    "peer not allowed by [access]; refused"
                );
            }
            Refusal::NotAllowed { uid: peer.uid }.into()
        } else {
            let owner = grant.map_or(SlotOwner::User(peer.uid), |g| SlotOwner::Grant(g.clone()));
            match slots.take(owner, stream.as_fd()) {
                Ok(slot) => return Some((stream, peer, slot)),
                Err(e) => {
                    self.metrics.refused("slots");
                    if let Some(unlogged) = refusals.note("slots") {
                        tracing::warn!(pid = peer.pid, uid = peer.uid, unlogged, error = %e, "connection refused");
                    }
                    Refusal::from(e).into()
                }
            }
        };
        // Best effort: a peer whose buffer cannot take the answer now is just closed.
        let _ = ServerConnection::new(stream).refuse_now(refusal);
        None
    }

    /// Serves one connection; `held` (its slot and its place in the figures) is given back
    /// with its socket, before the teardown of what the client held.
    async fn connection(
        &self,
        stream: UnixStream,
        peer: Peer,
        held: (Slot, crate::metrics::ConnectionGuard),
        stop: &mut broadcast::Receiver<()>,
        serving: &Arc<Serving>,
        grant: Option<OnGrant>,
    ) {
        let limits = self.connections;
        let mut conn = ServerConnection::new(stream);
        conn.set_frame_timeout(ms(limits.frame_ms));
        conn.set_budget(self.frame_budgets.of(peer.uid, &limits));
        let hello = tokio::select! {
            h = tokio::time::timeout(ms(limits.hello_ms), conn.read_hello()) => h,
            _ = stop.recv() => return,
        };
        let hello = match hello {
            Ok(Ok(Some(h))) => h,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::info!(pid = peer.pid, uid = peer.uid, error = %e, "handshake refused");
                return;
            }
            Err(_) => {
                tracing::info!(
                    pid = peer.pid,
                    uid = peer.uid,
                    hello_ms = limits.hello_ms,
                    "no hello within connections.hello_ms; dropping the connection"
                );
                return;
            }
        };
        if conn.welcome(DAEMON_NAME, std::process::id()).await.is_err() {
            return;
        }
        // Kept once, within rig_proto::MOST_PROGRAM (read_hello refused a longer one).
        let program: Arc<str> = hello.program.into();
        let pod = crate::pod::of_pid(peer.pid);
        let client = self.state.connect_on(
            peer.clone(),
            program.clone(),
            grant.as_ref().map(|g| g.of.clone()),
            pod.clone(),
        );
        // At debug: inspection-only connections (rigctl, `watch rigctl`) must not flood the
        // journal; a client's first device open is logged at info with its pid.
        tracing::debug!(
            client = client.0,
            pid = peer.pid,
            uid = peer.uid,
            gid = peer.gid,
            program = %client_text(&program),
            grant = grant.as_ref().map(|g| &*g.of.id),
            pod = pod.as_ref().map(|p| p.uid.as_str()),
            container = pod.as_ref().and_then(|p| p.container.as_deref()),
            "client connected"
        );
        let revoked = grant.map(|g| g.revoked);
        self.serve(client, &mut conn, &held.0, stop, serving, revoked)
            .await;
        // The socket is done with: its slot is free for the user's next connection, which
        // must not wait for this one's devices to be torn down.
        drop(conn);
        drop(held);
        // Closing its devices joins their queues' threads: off the async workers.
        let state = self.state.clone();
        if tokio::task::spawn_blocking(move || state.disconnect(client))
            .await
            .is_err()
        {
            tracing::error!(client = client.0, "giving back a client's devices panicked");
        }
    }

    /// Answers one request: inline when it cannot block and nothing it needs is busy
    /// ([`crate::state::State::try_handle`]), else on the blocking pool. `None` if that
    /// panicked (a bug; the connection is closed, which gives back what the client holds).
    async fn answer(&self, client: ClientId, request: Request, fds: Vec<OwnedFd>) -> Option<Reply> {
        let (request, fds) = match self.state.try_handle(client, request, fds) {
            Ok(reply) => return Some(reply),
            Err(back) => back,
        };
        let state = self.state.clone();
        let name = request.name();
        let done = tokio::task::spawn_blocking(move || state.handle(client, request, fds)).await;
        match done {
            Ok(reply) => Some(reply),
            Err(e) => {
                tracing::error!(client = client.0, request = name, error = %e, "a request panicked");
                None
            }
        }
    }

    async fn serve(
        &self,
        client: ClientId,
        conn: &mut ServerConnection,
        slot: &Slot,
        stop: &mut broadcast::Receiver<()>,
        serving: &Arc<Serving>,
        mut revoked: Option<tokio::sync::watch::Receiver<bool>>,
    ) {
        let limits = self.connections;
        // Devices this connection opened and has not closed: with none it holds nothing,
        // and may be closed for silence.
        let mut devices: BTreeSet<DeviceId> = BTreeSet::new();
        // Devices its client was answered are lost (a status saying so, a refusal because
        // of it).
        let mut told: BTreeSet<DeviceId> = BTreeSet::new();
        // Once rigd is shutting down: until when the connection is served.
        let mut draining: Option<tokio::time::Instant> = None;
        loop {
            if draining.is_some() && devices.is_subset(&told) {
                // Nothing more to tell.
                return;
            }
            let idle = devices.is_empty() && limits.idle_ms > 0;
            let next = tokio::select! {
                r = conn.read_request() => r,
                () = tokio::time::sleep(ms(limits.idle_ms)), if idle => {
                    if conn.at_boundary() {
                        tracing::info!(
                            client = client.0,
                            idle_ms = limits.idle_ms,
                            "closing a connection that holds no device and sent nothing for connections.idle_ms"
                        );
                        return;
                    }
                    // A frame is arriving: its own bound (frame_ms) applies.
                    continue;
                }
                _ = stop.recv(), if draining.is_none() => {
                    // Every device was lost just before: served on until the client knows.
                    draining = Some(tokio::time::Instant::now() + ms(SHUTDOWN_GRACE_MS));
                    continue;
                }
                () = revoked_of(&mut revoked), if revoked.is_some() => {
                    // Its devices were lost at the revocation; closing gives back the rest.
                    tracing::info!(client = client.0, "the connection's grant was revoked; closing it");
                    return;
                }
                () = tokio::time::sleep_until(draining.unwrap_or_else(tokio::time::Instant::now)), if draining.is_some() => {
                    tracing::debug!(
                        client = client.0,
                        grace_ms = SHUTDOWN_GRACE_MS,
                        "shutting down: the client did not ask about its lost devices in time; closing its connection"
                    );
                    return;
                }
            };
            let (request, fds) = match next {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(FrameError::Stalled { ms }) => {
                    tracing::info!(
                        client = client.0,
                        frame_ms = ms,
                        "a frame did not arrive whole within connections.frame_ms; closing the connection"
                    );
                    return;
                }
                Err(e) if !e.is_fatal() => {
                    tracing::debug!(client = client.0, error = %e, "malformed request");
                    if conn.send(&reply_for(&e), &[]).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!(client = client.0, error = %e, "connection broken");
                    return;
                }
            };
            if !slot.answering() {
                tracing::debug!(
                    client = client.0,
                    "the peer hung up and its slot went to another connection; what it sent last is not answered"
                );
                return;
            }
            let closing = match request {
                Request::CloseDevice { device } => Some(device),
                _ => None,
            };
            let route = request.route();
            let (kind, began) = (route.name, std::time::Instant::now());
            let (response, fds) = if draining.is_some()
                && matches!(request, Request::OpenDevice { .. })
            {
                (Response::from(Refusal::ShuttingDown), Vec::new())
            } else if matches!(
                request,
                Request::Grant(_) | Request::Revoke { .. } | Request::Grants
            ) {
                (
                    self.grant_request(client, request, serving).await,
                    Vec::new(),
                )
            } else if route.admin {
                // An administrator's stop or eviction stops devices: off the async workers.
                let admin = self.admin.clone();
                match tokio::task::spawn_blocking(move || admin.handle(client, request)).await {
                    Ok(response) => (response, Vec::new()),
                    Err(e) => {
                        tracing::error!(client = client.0, request = kind, error = %e, "a request panicked");
                        return;
                    }
                }
            } else {
                let Some(reply) = self.answer(client, request, fds).await else {
                    return;
                };
                reply
            };
            slot.answered();
            self.metrics.request(kind, began.elapsed());
            match (&response, closing, route.device) {
                (Response::DeviceOpened(d), _, _) => {
                    devices.insert(d.device);
                }
                (Response::Done, Some(id), _) => {
                    devices.remove(&id);
                    told.remove(&id);
                }
                (Response::Status(s), _, Some(id)) if s.lost.is_some() => {
                    told.insert(id);
                }
                (Response::Error(e), _, Some(id)) if e.code == ErrorCode::Lost => {
                    told.insert(id);
                }
                _ => {}
            }
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            match tokio::time::timeout(ms(limits.frame_ms), conn.send(&response, &borrowed)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(client = client.0, error = %e, "cannot send a reply");
                    return;
                }
                Err(_) => {
                    tracing::info!(
                        client = client.0,
                        frame_ms = limits.frame_ms,
                        "the client did not take an answer within connections.frame_ms; closing the connection"
                    );
                    return;
                }
            }
        }
    }
}

/// Completes once the grant `revoked` watches is revoked (or its sender is gone).
async fn revoked_of(revoked: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match revoked {
        Some(r) => {
            let _ = r.wait_for(|r| *r).await;
        }
        None => std::future::pending().await,
    }
}

impl Server {
    /// Answers an administrator's `Grant`, `Revoke` or `Grants` ([`crate::grant`]).
    async fn grant_request(
        &self,
        client: ClientId,
        request: Request,
        serving: &Arc<Serving>,
    ) -> Response {
        if let Err(r) = self.admin.may_administer(client, request.name()) {
            return r.into();
        }
        let answered = match request {
            Request::Grant(spec) => self.grant(*spec, serving).await,
            Request::Revoke { id } => self.revoke(&id).await.map(|()| Response::Done),
            Request::Grants => Ok(Response::Grants(self.grants.list(&self.state))),
            other => Err(Refusal::NotAdminsRequest(other.name())),
        };
        answered.unwrap_or_else(Response::from)
    }

    /// Makes grant `spec.id`, or keeps it with new holder names when its share is the same.
    async fn grant(
        &self,
        spec: rig_proto::GrantSpec,
        serving: &Arc<Serving>,
    ) -> Result<Response, Refusal> {
        use crate::grant::GrantRefusal;
        crate::grant::check_id(&spec.id)?;
        crate::grant::check_share(&spec, self.state.gpus.len())?;
        let same = {
            let mut table = self.grants.table();
            match table.get_mut(&spec.id) {
                Some(g) if g.spec.gpus == spec.gpus && g.spec.devices == spec.devices => {
                    g.spec.holder = spec.holder.clone();
                    Some(g.socket.clone())
                }
                _ => None,
            }
        };
        if let Some(socket) = same {
            tracing::debug!(grant = %spec.id, holder = ?spec.holder, "grant kept; holder updated");
            return Ok(Response::Granted {
                socket: socket.display().to_string(),
            });
        }
        // Another share under this id: the old grant ends first.
        match self.revoke(&spec.id).await {
            Ok(()) | Err(Refusal::Grant(GrantRefusal::NoGrant(_))) => {}
            Err(e) => return Err(e),
        }
        // Subscribed before the check: a stop after it is heard by the accept loop.
        let stop = serving.notify.subscribe();
        if self.state.book().stopping {
            return Err(GrantRefusal::ShuttingDown.into());
        }
        let path = self.grants.prepare(&spec.id)?;
        let (listener, file) =
            crate::listen::bind(&path, None, 0o666).map_err(|e| GrantRefusal::Socket {
                grant: spec.id.clone(),
                path: path.clone(),
                why: crate::grant::chain(&e),
            })?;
        let key = self.grants.new_key();
        self.state.enter_grant(key, &spec);
        let (revoke, revoked) = tokio::sync::watch::channel(false);
        let of = crate::grant::GrantOf {
            key,
            id: spec.id.as_str().into(),
        };
        tracing::info!(
            grant = %spec.id,
            socket = %path.display(),
            gpus = ?spec.gpus.iter().map(|g| (g.gpu, g.bytes)).collect::<Vec<_>>(),
            devices = spec.devices,
            resource = %spec.holder.resource,
            kubelet_devices = spec.holder.devices.len(),
            "grant made"
        );
        let server = self.clone();
        let ctx = serving.clone();
        let accept = tokio::spawn(async move {
            server
                .accept_granted(listener, file, OnGrant { of, revoked }, stop, &ctx)
                .await;
            drop(ctx);
        });
        self.grants.table().insert(
            spec.id.clone(),
            crate::grant::Live {
                key,
                spec,
                socket: path.clone(),
                made: std::time::Instant::now(),
                revoked: revoke,
                accept,
            },
        );
        Ok(Response::Granted {
            socket: path.display().to_string(),
        })
    }

    /// Ends grant `id` ([`rig_proto::Request::Revoke`]).
    async fn revoke(&self, id: &str) -> Result<(), Refusal> {
        use crate::grant::GrantRefusal;
        let Some(live) = self.grants.table().remove(id) else {
            return Err(GrantRefusal::NoGrant(
                rig_proto::cut(id, rig_proto::MOST_GRANT_ID).to_owned(),
            )
            .into());
        };
        let _ = live.revoked.send(true);
        // Its socket and directory are gone once its accept loop ends: a grant made again
        // under this id binds afresh.
        if tokio::time::timeout(Duration::from_secs(5), live.accept)
            .await
            .is_err()
        {
            tracing::warn!(
                grant = id,
                "a revoked grant's accept loop did not end in time"
            );
        }
        // Losing devices waits for their locks: off the async workers.
        let state = self.state.clone();
        let lost = tokio::task::spawn_blocking(move || state.revoke_grant(live.key))
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "revoking a grant panicked");
                Vec::new()
            });
        tracing::info!(
            grant = id,
            devices_lost = lost.len(),
            "grant revoked: its socket removed, its connections closed"
        );
        Ok(())
    }

    /// Accepts on grant `grant`'s socket until it is revoked or rigd stops; then removes the
    /// socket, and at a revocation its directory.
    async fn accept_granted(
        &self,
        listener: UnixListener,
        file: crate::listen::SocketFile,
        grant: OnGrant,
        mut stop: broadcast::Receiver<()>,
        serving: &Arc<Serving>,
    ) {
        let mut revoked = Some(grant.revoked.clone());
        loop {
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(grant = %grant.of.id, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = revoked_of(&mut revoked) => break,
                _ = stop.recv() => break,
            };
            if *grant.revoked.borrow() {
                break;
            }
            let Some((stream, peer, slot)) = self.admit(stream, serving, Some(&grant.of.id)) else {
                continue;
            };
            self.spawn_connection(stream, peer, slot, serving, Some(grant.clone()));
        }
        let dir = file.path().parent().map(std::path::Path::to_path_buf);
        drop(listener);
        drop(file);
        if *grant.revoked.borrow() {
            if let Some(dir) = dir {
                // Only an empty directory goes; a container's mount of it keeps its own.
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// The daemon's name in the handshake.
pub const DAEMON_NAME: &str = concat!("rigd ", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket pair: rigd's end (the slot's) and the peer's.
    fn pair() -> (
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    ) {
        std::os::unix::net::UnixStream::pair().unwrap()
    }

    #[test]
    fn a_grants_connections_take_the_grants_slots_not_their_users() {
        let s = Slots::new(8, 2);
        let socks: Vec<_> = (0..5).map(|_| pair()).collect();
        let fd = |i: usize| socks[i].0.as_fd();
        let grant = SlotOwner::Grant("pod-a".into());
        let _g1 = s.take(grant.clone(), fd(0)).unwrap();
        let _g2 = s.take(grant.clone(), fd(1)).unwrap();
        assert_eq!(
            s.take(grant.clone(), fd(2)).unwrap_err(),
            SlotError::PerGrant {
                grant: "pod-a".into(),
                max: 2
            }
        );
        // Root inside the container holds the grant's share; root on the host has its own.
        let _r1 = s.take(SlotOwner::User(0), fd(3)).unwrap();
        let _r2 = s.take(SlotOwner::User(0), fd(4)).unwrap();
        assert_eq!((s.held_by(&grant), s.held_by(&SlotOwner::User(0))), (2, 2));
    }

    #[test]
    fn slots_cap_each_user_and_everyone() {
        let s = Slots::new(3, 2);
        let socks: Vec<_> = (0..6).map(|_| pair()).collect();
        let fd = |i: usize| socks[i].0.as_fd();
        let a1 = s.take(SlotOwner::User(1), fd(0)).unwrap();
        let _a2 = s.take(SlotOwner::User(1), fd(1)).unwrap();
        assert_eq!(
            s.take(SlotOwner::User(1), fd(2)).unwrap_err(),
            SlotError::PerUid { uid: 1, max: 2 }
        );
        let b1 = s.take(SlotOwner::User(2), fd(3)).unwrap();
        assert_eq!(
            s.take(SlotOwner::User(3), fd(4)).unwrap_err(),
            SlotError::Full { max: 3 }
        );
        assert_eq!(s.held_by(&SlotOwner::User(3)), 0);
        drop(a1);
        let _c = s.take(SlotOwner::User(3), fd(5)).unwrap();
        drop(b1);
        assert_eq!(
            (
                s.held_by(&SlotOwner::User(1)),
                s.held_by(&SlotOwner::User(2)),
                s.held_by(&SlotOwner::User(3))
            ),
            (1, 0, 1)
        );
        let msg = SlotError::PerUid { uid: 7, max: 64 }.to_string();
        assert!(
            msg.contains("connections.per_uid") && msg.contains("64"),
            "{msg}"
        );
    }

    #[test]
    fn a_slot_comes_back_when_its_peer_hangs_up_not_before() {
        let s = Slots::new(3, 2);
        let (mine1, peer1) = pair();
        let (mine2, peer2) = pair();
        let (mine3, peer3) = pair();
        let (mine4, _peer4) = pair();
        let first = s.take(SlotOwner::User(1), mine1.as_fd()).unwrap();
        let _second = s.take(SlotOwner::User(1), mine2.as_fd()).unwrap();
        // A peer that only stopped writing still reads its answers: it keeps its slot.
        peer1.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(
            s.take(SlotOwner::User(1), mine3.as_fd()).unwrap_err(),
            SlotError::PerUid { uid: 1, max: 2 }
        );
        // One that closed gives its slot back at once, though its connection (the Slot
        // and rigd's end) is still being torn down.
        drop(peer2);
        let third = s.take(SlotOwner::User(1), mine3.as_fd()).unwrap();
        assert_eq!(s.held_by(&SlotOwner::User(1)), 2);
        // The same for the cap over everyone.
        let _other = s.take(SlotOwner::User(2), mine4.as_fd()).unwrap();
        drop(peer3);
        let (mine5, _peer5) = pair();
        let _again = s.take(SlotOwner::User(2), mine5.as_fd()).unwrap();
        // Given back once only: the task's own drop later changes nothing.
        drop(third);
        assert_eq!(
            (
                s.held_by(&SlotOwner::User(1)),
                s.held_by(&SlotOwner::User(2))
            ),
            (1, 2)
        );
        let (mine6, _peer6) = pair();
        assert_eq!(
            s.take(SlotOwner::User(3), mine6.as_fd()).unwrap_err(),
            SlotError::Full { max: 3 }
        );
        drop(first);
        assert!(s.take(SlotOwner::User(3), mine6.as_fd()).is_ok());
    }

    #[test]
    fn a_slot_answering_a_request_is_kept_until_answered() {
        let s = Slots::new(8, 1);
        let (mine, peer) = pair();
        let (next, _next_peer) = pair();
        let busy = s.take(SlotOwner::User(1), mine.as_fd()).unwrap();
        assert!(busy.answering());
        drop(peer);
        // The peer hung up mid-request: the request's work still counts against the user.
        assert_eq!(
            s.take(SlotOwner::User(1), next.as_fd()).unwrap_err(),
            SlotError::PerUid { uid: 1, max: 1 }
        );
        // Answered: the hang-up, seen again, gives the slot back ...
        busy.answered();
        let _next = s.take(SlotOwner::User(1), next.as_fd()).unwrap();
        // ... and the old connection answers nothing more.
        assert!(!busy.answering());
        drop(busy);
        assert_eq!(s.held_by(&SlotOwner::User(1)), 1);
    }

    #[test]
    fn the_embedded_configuration_states_the_defaults() {
        use crate::config::{Config, Images};
        let c = Config::embedded();
        let d = Connections::default();
        let e = c.connections;
        assert_eq!(
            (e.per_uid, e.backlog, e.hello_ms, e.frame_ms, e.idle_ms),
            (d.per_uid, d.backlog, d.hello_ms, d.frame_ms, d.idle_ms)
        );
        assert_eq!(c.images.max_bytes, Images::default().max_bytes);
        assert_eq!(c.daemon.max_connections, 1024);
        let p = std::path::Path::new("t.toml");
        for bad in [
            "[connections]\nper_uid = 0\n",
            "[connections]\nframe_ms = 0\n",
            "[images]\nmax_bytes = 8589934592\n",
        ] {
            assert!(Config::parse(bad, p).is_err(), "{bad}");
        }
    }
}
