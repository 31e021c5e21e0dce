//! Requests of rigd itself, on no device: the GPUs it serves and the ping.

use rig_proto::messages::Response;

use crate::state::{Reply, State, none};

/// `Ping`: answered at once, touching no lock.
pub(crate) fn ping() -> Reply {
    none(Response::Pong)
}

/// `ListGpus`: the GPUs rigd serves, in index order.
pub(crate) fn list_gpus(st: &State) -> Reply {
    none(Response::Gpus(
        st.gpus.iter().map(|g| g.info.clone()).collect(),
    ))
}
