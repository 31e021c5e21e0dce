//! The request table: every request meets its handler here, in one match, and each family
//! of requests has its file (as mini-redis's `cmd/`): rigd itself (`daemon`), opening,
//! closing and stopping devices (`devices`), memory (`memory`), images and their
//! entries (`image`), and the queues' rings (`queues`). Inspection is
//! [`crate::inspect`]'s; the administrators' requests are [`crate::admin`]'s.
//!
//! What the table does not say, a request's route does ([`Request::route`], in rig-proto):
//! its name, whether it may block (the server then runs it on the blocking pool), whether it
//! is an administrator's, and the device it is answered on. A request on a device takes
//! that device's lock in one place (`State::on_device`): its handler gets the device
//! `Held` and answers with a [`Refusal`] or a reply, never "busy" — a lock found busy
//! ([`crate::table::Busy`], only when tried inline) is the lock step's answer, before
//! anything changed. Refusals become responses at the boundary (`State::answer`).

pub(crate) mod daemon;
pub(crate) mod devices;
pub(crate) mod image;
pub(crate) mod memory;
pub(crate) mod queues;

use std::os::fd::OwnedFd;

use rig_proto::Route;
use rig_proto::messages::{Request, Response};

use crate::logging::client_text;
use crate::refusal::Refusal;
use crate::state::{ClientId, Reply, State, none};
use crate::table::{Busy, Held, Mode, Try};

/// What a handler answers: a reply, or the refusal the boundary turns into one.
pub(crate) type Answered = Result<Reply, Refusal>;

impl State {
    /// Answers `request`, taking locks as `M` says; its refusal, if any, becomes the
    /// response here. `Err` (busy) only with [`Try`], from a lock step before anything
    /// changed: the request and `fds` are then as they came (the requests that take parts
    /// of theirs, a code object or a memfd, may block, and are never tried inline).
    pub(crate) fn answer<M: Mode>(
        &self,
        client: ClientId,
        request: &mut Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Reply, M::Busy> {
        let route = request.route();
        let answered = self.dispatch::<M>(client, &route, request, fds)?;
        Ok(answered.unwrap_or_else(|refusal| {
            let response = Response::from(refusal);
            if let Response::Error(e) = &response {
                tracing::debug!(client = client.0, request = route.name, device = route.device.map(|d| d.0), code = ?e.code, error = %client_text(&e.message), "request refused");
            }
            none(response)
        }))
    }

    /// The table: `request` to its family's handler.
    fn dispatch<M: Mode>(
        &self,
        client: ClientId,
        route: &Route,
        request: &mut Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Answered, M::Busy> {
        // The server checked at decode; the Handler is also called directly (an embedded
        // rigd, the fuzzers).
        if let Err(e) = request.check_bounds() {
            return Ok(Err(e.into()));
        }
        Ok(match request {
            Request::Ping => Ok(daemon::ping()),
            Request::ListGpus => Ok(daemon::list_gpus(self)),
            Request::OpenDevice { gpu } => devices::open(self, client, *gpu),
            Request::CloseDevice { device } => devices::close(self, client, *device),
            Request::StopDevice { last, fault, .. } => {
                devices::stop::<M>(self, client, route, *last, fault.as_deref())?
            }
            Request::DeviceStatus { .. } => devices::status::<M>(self, client, route)?,
            Request::Facts { .. } => devices::facts::<M>(self, client, route)?,
            Request::SampleClock { .. } => devices::sample_clock::<M>(self, client, route)?,
            Request::Alloc { memory, bytes, .. } => {
                memory::alloc::<M>(self, client, route, *memory, *bytes)?
            }
            Request::Free { region, .. } => memory::free::<M>(self, client, route, *region)?,
            Request::MapHost { bytes, offset, .. } => {
                memory::map_host::<M>(self, client, route, *bytes, *offset, fds)?
            }
            Request::MapPeerWord { peer, .. } => {
                memory::map_peer_word::<M>(self, client, route, *peer)?
            }
            Request::LoadImage { code_object, .. } => {
                image::load::<M>(self, client, route, code_object)?
            }
            Request::ResolveEntry { image, name, .. } => {
                image::resolve::<M>(self, client, route, *image, name)?
            }
            Request::Prepare { image, name, .. } => {
                image::prepare::<M>(self, client, route, *image, name)?
            }
            Request::Unload { image, .. } => image::unload::<M>(self, client, route, *image)?,
            Request::Grow {
                compute_bytes,
                copy_bytes,
                segment_bytes,
                installed,
                ..
            } => queues::grow::<M>(
                self,
                client,
                route,
                (*compute_bytes, *copy_bytes, *segment_bytes),
                *installed,
            )?,
            Request::ListClients => self.list_clients(client).map(none),
            Request::ListDevices => self.list_devices::<M>(client)?.map(none),
            Request::ShowDevice { device } => self.show_device::<M>(client, *device)?.map(none),
            Request::DaemonStatus
            | Request::GpuStatus
            | Request::ListProcesses
            | Request::AdminStop { .. }
            | Request::Evict { .. }
            | Request::Grant(_)
            | Request::Revoke { .. }
            | Request::Grants => Err(Refusal::AdminsRequest(route.name)),
        })
    }

    /// Runs `f` on the device `route` names, if it is `client`'s, held as `M` says, and
    /// settles its charges after: the one lock step of the requests on a device.
    pub(crate) fn on_device<M: Mode>(
        &self,
        client: ClientId,
        route: &Route,
        f: impl FnOnce(&mut Held<'_>) -> Answered,
    ) -> Result<Answered, M::Busy> {
        let Some(id) = route.device else {
            return Ok(Err(Refusal::Internal(format!(
                "{} names no device",
                route.name
            ))));
        };
        let slot = match self.book().owned(client, id) {
            Ok(s) => s,
            Err(r) => return Ok(Err(r)),
        };
        let mut h = Held::new::<M>(&slot)?;
        let r = f(&mut h);
        self.settle(&mut h);
        Ok(r)
    }

    /// Answers `request` if its route says it may not block and no lock it needs is held;
    /// else gives it back untouched, for [`crate::state::Handler::handle`] on a thread
    /// that may block.
    // The error gives the request back whole.
    #[allow(clippy::result_large_err)]
    pub fn try_handle(
        &self,
        client: ClientId,
        mut request: Request,
        mut fds: Vec<OwnedFd>,
    ) -> Result<Reply, (Request, Vec<OwnedFd>)> {
        if request.route().blocks || !fds.is_empty() {
            return Err((request, fds));
        }
        match self.answer::<Try>(client, &mut request, &mut fds) {
            Ok(reply) => Ok(reply),
            Err(Busy) => Err((request, fds)),
        }
    }
}
