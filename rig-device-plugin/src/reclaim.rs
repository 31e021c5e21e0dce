//! Reclaim: an allocation the kubelet no longer lists gives its grant back.
//!
//! Every interval the plugin asks the kubelet which devices each pod's containers hold
//! (the pod-resources API's `List`, [`crate::podresources`], on the kubelet's
//! `pod-resources/kubelet.sock`) and rigd which grants it holds, and squares them with its
//! [`Ledger`] ([`reconcile`]):
//!
//! - a grant whose devices a container holds takes that container's namespace, pod and
//!   container names (rigd keeps the grant and its connections; `rigctl grants` shows them);
//! - a grant whose devices no container holds is revoked once the kubelet listed them
//!   before (the container is gone), or once it is older than the grace (the kubelet
//!   records an allocation only after Allocate answers, and a pod may fail to start after
//!   it): rigd then loses its devices, closes its connections and frees what they held;
//! - a grant rigd lacks (rigd restarted) is asked again under its id while it is held or
//!   within its grace, so the container's mounted directory gets its socket back;
//! - a grant rigd holds and the ledger lacks (the plugin restarted) is taken in.
//!
//! Nothing is revoked while the kubelet or rigd does not answer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rig_proto::{GrantInfo, GrantSpec};

use crate::grants::{self, Held, Ledger};
use crate::podresources::ListPodResourcesRequest;
use crate::podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::resources::Resource;

/// The kubelet's pod-resources socket unless configured otherwise.
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// How long one List may take.
const LIST_WITHIN: Duration = Duration::from_secs(5);

/// One container's devices of one resource, as the kubelet lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod.
    pub pod: String,
    /// The container.
    pub container: String,
    /// The resource, such as `rig.dev/gpu-memory`.
    pub resource: String,
    /// Its device ids.
    pub devices: BTreeSet<String>,
}

/// What [`reconcile`] asks of rigd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Make or keep this grant (same id and share: rigd keeps its connections and takes
    /// the holder's names).
    Grant(GrantSpec),
    /// Revoke the grant of this id.
    Revoke(String),
}

/// Whether `resource` is one of the plugin's.
fn ours(resource: &str) -> bool {
    Resource::ALL.iter().any(|r| r.name() == resource)
}

/// Squares the ledger with what rigd holds (`rigd`) and what the kubelet lists (`listed`)
/// at `now`, and says what to ask of rigd (see the module's docs).
pub fn reconcile(
    ledger: &mut BTreeMap<String, Held>,
    rigd: &[GrantInfo],
    listed: &[Holding],
    now: Instant,
    grace: Duration,
) -> Vec<Action> {
    for g in rigd {
        if ours(&g.spec.holder.resource) && !ledger.contains_key(&g.spec.id) {
            let age = Duration::from_millis(g.age_ms);
            ledger.insert(
                g.spec.id.clone(),
                Held {
                    spec: g.spec.clone(),
                    made: now.checked_sub(age).unwrap_or(now),
                    seen: false,
                },
            );
        }
    }
    let in_rigd: BTreeSet<&str> = rigd.iter().map(|g| g.spec.id.as_str()).collect();
    let mut actions = Vec::new();
    let mut gone = Vec::new();
    for (id, held) in ledger.iter_mut() {
        let h = &held.spec.holder;
        let holding = listed
            .iter()
            .find(|l| l.resource == h.resource && h.devices.iter().any(|d| l.devices.contains(d)));
        let here = in_rigd.contains(id.as_str());
        match holding {
            Some(l) => {
                held.seen = true;
                let names = (
                    Some(l.namespace.clone()),
                    Some(l.pod.clone()),
                    Some(l.container.clone()),
                );
                let h = &mut held.spec.holder;
                let named = (h.namespace.clone(), h.pod.clone(), h.container.clone()) == names;
                if !named {
                    (h.namespace, h.pod, h.container) = names;
                }
                if !named || !here {
                    actions.push(Action::Grant(held.spec.clone()));
                }
            }
            None if held.seen || now.saturating_duration_since(held.made) > grace => {
                if here {
                    actions.push(Action::Revoke(id.clone()));
                }
                gone.push(id.clone());
            }
            None if !here => actions.push(Action::Grant(held.spec.clone())),
            None => {}
        }
    }
    for id in gone {
        ledger.remove(&id);
    }
    actions
}

/// The containers' devices of the plugin's resources, as the kubelet at `socket` lists them.
pub async fn list_holdings(socket: &std::path::Path) -> Result<Vec<Holding>, String> {
    let channel = crate::uds::channel(socket).await.map_err(|e| {
        format!(
            "cannot reach the kubelet's pod-resources socket {}: {}",
            socket.display(),
            crate::health::error_chain(&e)
        )
    })?;
    let answer = tokio::time::timeout(
        LIST_WITHIN,
        PodResourcesListerClient::new(channel).list(ListPodResourcesRequest {}),
    )
    .await
    .map_err(|_| format!("the kubelet did not answer List within {LIST_WITHIN:?}"))?
    .map_err(|s| format!("the kubelet refused List: {}", s.message()))?;
    let mut out = Vec::new();
    for pod in answer.into_inner().pod_resources {
        for c in pod.containers {
            for d in c.devices.into_iter().filter(|d| ours(&d.resource_name)) {
                out.push(Holding {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: c.name.clone(),
                    resource: d.resource_name,
                    devices: d.device_ids.into_iter().collect(),
                });
            }
        }
    }
    Ok(out)
}

/// Reclaims every `every` until the process ends: the kubelet at `pod_resources`, rigd at
/// `rigd`, grants within their first `grace` kept while the kubelet does not list them.
pub async fn run(
    rigd: PathBuf,
    pod_resources: PathBuf,
    ledger: Ledger,
    every: Duration,
    grace: Duration,
) {
    let mut failing: Option<String> = None;
    loop {
        tokio::time::sleep(every).await;
        let why = pass(&rigd, &pod_resources, &ledger, grace).await.err();
        if why != failing {
            match &why {
                Some(w) => {
                    tracing::warn!(why = %w, "reclaim waits: nothing is revoked while this lasts")
                }
                None => tracing::info!("reclaim runs: the kubelet and rigd answer"),
            }
            failing = why;
        }
    }
}

/// One pass: list, reconcile, ask.
async fn pass(
    rigd: &std::path::Path,
    pod_resources: &std::path::Path,
    ledger: &Ledger,
    grace: Duration,
) -> Result<(), String> {
    let listed = list_holdings(pod_resources).await?;
    let socket = rigd.to_owned();
    let held = tokio::task::spawn_blocking(move || grants::list(&socket))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| crate::health::error_chain(&e))?;
    let actions = reconcile(&mut ledger.lock(), &held, &listed, Instant::now(), grace);
    for action in actions {
        let socket = rigd.to_owned();
        let done = tokio::task::spawn_blocking(move || match &action {
            Action::Grant(spec) => grants::grant(&socket, spec).map(|_| action),
            Action::Revoke(id) => grants::revoke(&socket, id).map(|()| action),
        })
        .await
        .map_err(|e| e.to_string())?;
        match done {
            Ok(Action::Revoke(id)) => {
                tracing::info!(grant = %id, "allocation no longer listed by the kubelet: grant revoked")
            }
            Ok(Action::Grant(spec)) => tracing::info!(
                grant = %spec.id,
                namespace = spec.holder.namespace.as_deref().unwrap_or("-"),
                pod = spec.holder.pod.as_deref().unwrap_or("-"),
                container = spec.holder.container.as_deref().unwrap_or("-"),
                "grant made or named in rigd"
            ),
            Err(e) => {
                tracing::warn!(error = %crate::health::error_chain(&e), "a grant request failed; the next pass asks again")
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rig_proto::{GrantGpu, Holder};

    fn spec(id: &str, devices: &[&str]) -> GrantSpec {
        GrantSpec {
            id: id.into(),
            gpus: vec![GrantGpu {
                gpu: 0,
                bytes: 1 << 30,
            }],
            devices: 4,
            holder: Holder {
                resource: "rig.dev/gpu-memory".into(),
                devices: devices.iter().map(|d| d.to_string()).collect(),
                ..Holder::default()
            },
        }
    }

    fn info(s: &GrantSpec, age_ms: u64) -> GrantInfo {
        GrantInfo {
            spec: s.clone(),
            socket: format!("/run/rig/alloc/{}/rigd.sock", s.id),
            age_ms,
            connections: 0,
            devices: 0,
            gpu_bytes: vec![0],
        }
    }

    fn holding(devices: &[&str]) -> Holding {
        Holding {
            namespace: "ns".into(),
            pod: "tenant-a".into(),
            container: "work".into(),
            resource: "rig.dev/gpu-memory".into(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    const GRACE: Duration = Duration::from_secs(60);

    #[test]
    fn a_listed_grant_takes_its_pods_names_once() {
        let now = Instant::now();
        let a = spec("a", &["gpu0-m0", "gpu0-m1"]);
        let mut ledger = BTreeMap::new();
        let rigd = [info(&a, 10)];
        let listed = [holding(&["gpu0-m0", "gpu0-m1"])];
        let actions = reconcile(&mut ledger, &rigd, &listed, now, GRACE);
        let [Action::Grant(named)] = actions.as_slice() else {
            panic!("{actions:?}")
        };
        assert_eq!(named.holder.pod.as_deref(), Some("tenant-a"));
        assert_eq!(
            (named.gpus.clone(), named.devices),
            (a.gpus.clone(), a.devices)
        );
        // Named: nothing more to ask.
        let rigd = [info(named, 20)];
        assert_eq!(reconcile(&mut ledger, &rigd, &listed, now, GRACE), []);
    }

    #[test]
    fn a_grant_no_container_holds_is_revoked_once_seen_or_past_its_grace() {
        let now = Instant::now();
        let (a, b) = (spec("a", &["gpu0-m0"]), spec("b", &["gpu0-m5"]));
        let mut ledger = BTreeMap::new();
        // New and not yet listed: kept.
        let rigd = [info(&a, 0), info(&b, 0)];
        assert_eq!(reconcile(&mut ledger, &rigd, &[], now, GRACE), []);
        // a is listed, then its container goes: revoked at once.
        reconcile(&mut ledger, &rigd, &[holding(&["gpu0-m0"])], now, GRACE);
        let actions = reconcile(&mut ledger, &rigd, &[], now, GRACE);
        assert_eq!(actions, [Action::Revoke("a".into())]);
        assert!(!ledger.contains_key("a"));
        // b never listed: revoked past its grace.
        let later = now + GRACE + Duration::from_secs(1);
        let rigd = [info(&b, 0)];
        assert_eq!(
            reconcile(&mut ledger, &rigd, &[], later, GRACE),
            [Action::Revoke("b".into())]
        );
        assert!(ledger.is_empty());
    }

    #[test]
    fn a_grant_rigd_lost_is_asked_again_and_others_are_not_touched() {
        let now = Instant::now();
        let a = spec("a", &["gpu0-m0"]);
        let mut ledger = BTreeMap::new();
        reconcile(
            &mut ledger,
            &[info(&a, 0)],
            &[holding(&["gpu0-m0"])],
            now,
            GRACE,
        );
        // rigd restarted: it holds nothing; the container still holds the devices.
        let actions = reconcile(&mut ledger, &[], &[holding(&["gpu0-m0"])], now, GRACE);
        let [Action::Grant(again)] = actions.as_slice() else {
            panic!("{actions:?}")
        };
        assert_eq!(again.id, "a");
        // A grant of another resource's (not the plugin's) is never adopted nor revoked.
        let mut foreign = spec("f", &["x"]);
        foreign.holder.resource = "example.com/other".into();
        let mut ledger = BTreeMap::new();
        let later = now + GRACE * 2;
        assert_eq!(
            reconcile(&mut ledger, &[info(&foreign, 0)], &[], later, GRACE),
            []
        );
        assert!(ledger.is_empty());
    }
}
