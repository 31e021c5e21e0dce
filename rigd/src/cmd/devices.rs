//! Opening, closing and stopping devices, and what a client reads of its own device: its
//! status, facts and clock.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rig_proto::Route;
use rig_proto::messages::{DeviceId, DeviceStatus, Response};

use super::Answered;
use crate::device::{Device, Footprint, MakeError};
use crate::inspect::facts as facts_of;
use crate::path::{Events, Refusal as PathRefusal};
use crate::refusal::Refusal;
use crate::state::{ClientId, Reply, State, none};
use crate::table::{Held, Mode, Slot};
use crate::watch::Msg;

/// `Ok` if `d` is neither lost nor stopped; else the refusal saying which.
pub(crate) fn live(d: &Device) -> Result<(), Refusal> {
    if let Some(why) = d.lost() {
        return Err(Refusal::Lost {
            device: d.id(),
            why: why.clone(),
        });
    }
    if d.is_stopped() {
        return Err(Refusal::Stopped(d.id()));
    }
    Ok(())
}

/// `OpenDevice`: a new device on `gpu`, charged to the client's user.
pub(crate) fn open(st: &State, client: ClientId, gpu: u32) -> Answered {
    let Some(entry) = st.gpus.get(gpu as usize) else {
        return Err(Refusal::NoGpu {
            gpu,
            served: st.gpus.len(),
        });
    };
    let Some(backend) = entry.backend.clone() else {
        return Err(Refusal::NotDrivable {
            gpu,
            name: entry.info.name.clone(),
            why: entry
                .why_not
                .clone()
                .unwrap_or_else(|| "rigd has no path for it".into()),
        });
    };
    let reserved = Footprint::opening_on(backend.description());
    st.reserve(client, gpu, reserved, true)?;
    let id = DeviceId(st.next_device.fetch_add(1, Ordering::Relaxed));
    let made = make(st, client, id, gpu, backend.as_ref());
    let mut book = st.book();
    let uid = book.uid_of(client);
    let grant = book.grant_of(client);
    let (mut device, reply) = match made {
        Ok(x) => x,
        Err(r) => {
            // Nothing was made: the reservation goes back.
            book.apply(client, uid, grant, gpu, reserved, Footprint::default());
            book.count_device(uid, grant, false);
            return Err(r);
        }
    };
    if book.stopping {
        // Opened while rigd loses every device to stop: lost like the others, before any
        // other thread can reach it.
        device.lose(crate::watch::shutting_down());
    }
    let (_, now) = device.recharge();
    book.apply(client, uid, grant, gpu, reserved, now);
    if let Some(c) = book.clients.get_mut(&client) {
        c.devices.insert(id);
        c.opened = true;
        tracing::info!(
            client = client.0,
            pid = c.peer.pid,
            uid = c.peer.uid,
            program = %crate::logging::client_text(&c.program),
            device = id.0,
            gpu,
            "device opened"
        );
    }
    book.devices.insert(
        id,
        Arc::new(Slot {
            owner: client,
            uid,
            grant,
            gpu,
            device: Mutex::new(device),
        }),
    );
    Ok(reply)
}

/// Makes device `id` on `backend` and the reply that hands it over; touches no lock.
fn make(
    st: &State,
    client: ClientId,
    id: DeviceId,
    gpu: u32,
    backend: &dyn crate::path::Backend,
) -> Result<(Device, Reply), Refusal> {
    let interrupt = crate::device::interrupt_fd().map_err(|e| Refusal::Internal(e.to_string()))?;
    let on_irq = interrupt.clone();
    let on_fault = interrupt.clone();
    let faults = st.faults.clone();
    let events = Events {
        interrupt: Arc::new(move || {
            let _ = on_irq.write(1);
        }),
        fault: Arc::new(move |fault| {
            let _ = faults.send(Msg::Fault { device: id, fault });
            let _ = on_fault.write(1);
        }),
    };
    let path = match backend.open(crate::path::Owner(client.0), events) {
        Ok(p) => p,
        Err(PathRefusal::Lacking(r)) => {
            tracing::debug!(reason = %r, "the gpu has no room for another address space");
            return Err(Refusal::gpu_short(0));
        }
        Err(r) => {
            return Err(Refusal::Fault(format!(
                "the gpu refused a new address space: {r}"
            )));
        }
    };
    let desc = backend.description().clone();
    let device = match Device::make(id, gpu, desc, path, interrupt, st.losses.clone()) {
        Ok(d) => d,
        Err(MakeError::Short { .. }) => {
            return Err(Refusal::gpu_short(
                Footprint::opening_on(backend.description()).bytes,
            ));
        }
        Err(e) => return Err(Refusal::Fault(e.to_string())),
    };
    let facts = facts_of(&device);
    let (opened, fds) = device
        .opened(facts)
        .map_err(|e| Refusal::Internal(format!("cannot share the device's memory: {e}")))?;
    Ok((device, (Response::DeviceOpened(Box::new(opened)), fds)))
}

/// `CloseDevice`: stops the device if needed and gives back everything it holds.
pub(crate) fn close(st: &State, client: ClientId, id: DeviceId) -> Answered {
    st.book().owned(client, id)?;
    st.remove_device(id);
    tracing::debug!(client = client.0, device = id.0, "device closed");
    Ok(none(Response::Done))
}

/// `StopDevice`: destroys the device's queues; with a reason, the client's own verdict
/// that the device is lost.
pub(crate) fn stop<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    last: u64,
    fault: Option<&str>,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h: &mut Held<'_>| {
        if h.d.is_stopped() {
            return Err(Refusal::AlreadyStopped(h.d.id()));
        }
        // A stop with a reason is the client's own verdict that the device is lost (a
        // consumer of a lost producer): rigctl and later requests show it.
        match fault {
            Some(why) => h.d.lose_at(
                rig_proto::Fault::new(rig_proto::FaultKind::StoppedByClient, why),
                last,
            ),
            None => {
                h.d.stop(last, None);
            }
        }
        Ok(none(Response::Done))
    })
}

/// `DeviceStatus`: whether the device is live, and how far its timeline is.
pub(crate) fn status<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        Ok(none(Response::Status(DeviceStatus {
            lost: h.d.lost().cloned(),
            stopped: h.d.is_stopped(),
            submitted: h.d.submitted(),
            reached: h.d.reached(),
        })))
    })
}

/// `Facts`: the device's facts, live or not.
pub(crate) fn facts<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        Ok(none(Response::Facts(Box::new(facts_of(&h.d)))))
    })
}

/// `SampleClock`: one read of the GPU's clock through the path's source, on the host's clock.
pub(crate) fn sample_clock<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        live(&h.d)?;
        Ok(none(Response::Clock(h.d.read_clock())))
    })
}
