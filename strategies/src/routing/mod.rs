//! The serving family's routers (`[routing]`): which replica serves a request (and, with
//! `[workload.workflow]`, each stage of a workflow). One file per router, each a [`Router`]
//! built from its [`RouterConfig`] variant by [`build`]; `chimera` is the Chimera paper's load
//! balancer (a policy of this crate, not the chimera family's code).

use crate::batch::PolicyInfo;
use expertsim_serving::serving::{Router, RouterConfig};

pub mod chimera;
pub mod least_loaded;
pub mod round_robin;

/// The router a scenario's `[routing]` table asks for.
pub fn build(config: &RouterConfig) -> Box<dyn Router> {
    match config {
        RouterConfig::LeastLoaded {
            waiting_weight,
            running_weight,
        } => Box::new(least_loaded::LeastLoaded::new(
            *waiting_weight,
            *running_weight,
        )),
        RouterConfig::RoundRobin => Box::new(round_robin::RoundRobin::default()),
        RouterConfig::Chimera { slack, margin } => {
            Box::new(chimera::ChimeraDispatcher::new(*slack, *margin))
        }
    }
}

const fn routing(kind: &'static str, description: &'static str) -> PolicyInfo {
    PolicyInfo {
        family: "routing",
        kind,
        description,
    }
}

/// Every router.
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        routing(
            "least_loaded",
            "vLLM's load balancer: lowest 4 x waiting + running requests",
        ),
        routing("round_robin", "engines in turn"),
        routing(
            "chimera",
            "most confident model within (1 + slack) of the fastest estimated delay, sticky per workflow",
        ),
    ]
}

#[cfg(test)]
pub(crate) mod testutil {
    use expertsim_serving::serving::EngineState;

    /// An engine of model `model` with the given queue, batch and in-flight predicted tokens.
    pub fn engine(model: usize, waiting: usize, running: usize, in_flight: f64) -> EngineState {
        EngineState {
            model,
            waiting,
            running,
            in_flight_predicted_tokens: in_flight,
            decode_ms_per_token: 20.0,
            max_batch_size: 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_kinds_build_and_round_trip() {
        let infos = catalogue();
        assert_eq!(infos.len(), 3);
        for info in infos {
            let mut json = serde_json::json!({ "kind": info.kind });
            if info.kind == "chimera" {
                json["slack"] = serde_json::json!(0.5);
            }
            let config: RouterConfig =
                serde_json::from_value(json).unwrap_or_else(|e| panic!("{}: {e}", info.kind));
            assert_eq!(config.kind(), info.kind);
            assert_eq!(build(&config).name(), info.kind);
            let back: RouterConfig =
                serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
            assert_eq!(back, config);
        }
        // Chimera needs its slack.
        assert!(
            serde_json::from_value::<RouterConfig>(serde_json::json!({"kind": "chimera"})).is_err()
        );
    }
}
