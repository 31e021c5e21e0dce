//! The queues' rings and the argument segment: growing them for a submission.

use rig_proto::Route;
use rig_proto::messages::{Generations, Response};

use super::Answered;
use super::devices::live;
use crate::device::{Footprint, MakeError};
use crate::refusal::Refusal;
use crate::state::{ClientId, State};
use crate::table::Mode;

/// `Grow`: rings or an argument segment big enough for a submission of `sizes` (compute,
/// copy and segment bytes), retiring the queues older than `installed`.
pub(crate) fn grow<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    sizes: (u64, u64, u64),
    installed: Generations,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        live(&h.d)?;
        let want =
            h.d.growth_bytes(sizes.0, sizes.1, sizes.2)
                .map_err(|e| Refusal::Never(e.to_string()))?;
        if want > 0 {
            let queues = h.d.growth_queues(sizes.0, sizes.1);
            st.reserve_for(client, h, Footprint::growth(want).plus(queues))?;
        }
        let mut grown = h.d.grow(sizes.0, sizes.1, sizes.2, installed);
        if matches!(grown, Err(MakeError::Short { .. })) && st.reclaim(h) {
            grown = h.d.grow(sizes.0, sizes.1, sizes.2, installed);
        }
        match grown {
            Ok((g, fds)) => Ok((Response::Grown(g), fds)),
            // No slot for another queue is a resource the growth lacks, as memory is.
            Err(MakeError::Short { .. }) => Err(Refusal::gpu_short(want)),
            Err(e @ MakeError::Full { .. }) => {
                tracing::debug!(device = h.d.id().0, "a growth found no queue slot: {e}");
                Err(Refusal::gpu_short(want))
            }
            Err(e @ MakeError::Never { .. }) => Err(Refusal::Never(e.to_string())),
            Err(e) => Err(Refusal::Fault(e.to_string())),
        }
    })
}
