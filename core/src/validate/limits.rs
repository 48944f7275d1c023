//! Ceilings on what one scenario may ask of the simulator (`[limits]`, docs/limits.md): every
//! family states what its validated cells demand (requests, simulated seconds, experts, ...) and
//! the loader refuses a demand above its ceiling with the field that asked for it, before anything
//! runs. The defaults are what a laptop runs in minutes; a scenario raises one on purpose with
//! `[limits] max_requests = ...` or `--set limits.max_requests=...`.

use super::{FieldError, field_error};
use serde::{Deserialize, Serialize};

/// `[limits]`: the ceilings in force for a scenario. Every key is optional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Requests one run may serve (a count, or rate x horizon for open-ended workloads).
    pub max_requests: f64,
    /// Simulated seconds one run may span (expected arrival horizon, or a stated duration).
    pub max_sim_seconds: f64,
    /// Tokens in one request's prompt or output.
    pub max_tokens_per_request: f64,
    /// Experts per MoE layer.
    pub max_experts: f64,
    /// MoE layers of a model.
    pub max_layers: f64,
    /// Topics of a CAPS workload.
    pub max_topics: f64,
    /// Entries of a routing table held in memory, each a float: CAPS's per-topic affinities
    /// (topics x layers x experts), GEM's expert-utilization trace (steps x layers x experts).
    pub max_routing_entries: f64,
    /// GPUs, devices or workers of a cluster.
    pub max_gpus: f64,
    /// Steps of a generated expert-utilization trace.
    pub max_trace_steps: f64,
    /// Adapters served at once.
    pub max_adapters: f64,
    /// Monte-Carlo samples of one run (GEM variability at scale: draws x GPUs).
    pub max_samples: f64,
    /// Sweep cells of one scenario (counted before the sweep is expanded).
    pub max_cells: f64,
    /// Runs of one scenario: sweep cells x seeds.
    pub max_runs: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_requests: 1_000_000.0,
            max_sim_seconds: 1e7,
            max_tokens_per_request: 1_048_576.0,
            max_experts: 1024.0,
            max_layers: 256.0,
            max_topics: 10_000.0,
            max_routing_entries: 50_000_000.0,
            max_gpus: 4096.0,
            max_trace_steps: 1_000_000.0,
            max_adapters: 1024.0,
            max_samples: 1e8,
            max_cells: 10_000.0,
            max_runs: 100_000.0,
        }
    }
}

/// What a quantity is, for the limit it is held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    Requests,
    SimSeconds,
    TokensPerRequest,
    Experts,
    Layers,
    Topics,
    RoutingEntries,
    Gpus,
    TraceSteps,
    Adapters,
    Samples,
}

impl Quantity {
    /// The `[limits]` key that bounds this quantity.
    pub fn key(self) -> &'static str {
        match self {
            Quantity::Requests => "max_requests",
            Quantity::SimSeconds => "max_sim_seconds",
            Quantity::TokensPerRequest => "max_tokens_per_request",
            Quantity::Experts => "max_experts",
            Quantity::Layers => "max_layers",
            Quantity::Topics => "max_topics",
            Quantity::RoutingEntries => "max_routing_entries",
            Quantity::Gpus => "max_gpus",
            Quantity::TraceSteps => "max_trace_steps",
            Quantity::Adapters => "max_adapters",
            Quantity::Samples => "max_samples",
        }
    }
    fn describe(self) -> &'static str {
        match self {
            Quantity::Requests => "requests in one run",
            Quantity::SimSeconds => "simulated seconds in one run",
            Quantity::TokensPerRequest => "tokens per request",
            Quantity::Experts => "experts per layer",
            Quantity::Layers => "MoE layers",
            Quantity::Topics => "topics",
            Quantity::RoutingEntries => {
                "routing-table entries (topics or trace steps x layers x experts)"
            }
            Quantity::Gpus => "GPUs",
            Quantity::TraceSteps => "trace steps",
            Quantity::Adapters => "adapters",
            Quantity::Samples => "Monte-Carlo samples (draws x GPUs)",
        }
    }
}

/// One thing a validated cell asks for: `value` of `quantity`, caused by the field `path`.
#[derive(Clone, Debug, PartialEq)]
pub struct Demand {
    pub quantity: Quantity,
    pub value: f64,
    pub path: String,
}

impl Demand {
    pub fn new(quantity: Quantity, value: f64, path: &str) -> Demand {
        Demand {
            quantity,
            value,
            path: path.to_string(),
        }
    }
}

impl Limits {
    /// The ceiling on `quantity`.
    pub fn ceiling(&self, quantity: Quantity) -> f64 {
        match quantity {
            Quantity::Requests => self.max_requests,
            Quantity::SimSeconds => self.max_sim_seconds,
            Quantity::TokensPerRequest => self.max_tokens_per_request,
            Quantity::Experts => self.max_experts,
            Quantity::Layers => self.max_layers,
            Quantity::Topics => self.max_topics,
            Quantity::RoutingEntries => self.max_routing_entries,
            Quantity::Gpus => self.max_gpus,
            Quantity::TraceSteps => self.max_trace_steps,
            Quantity::Adapters => self.max_adapters,
            Quantity::Samples => self.max_samples,
        }
    }

    /// Each ceiling must be a positive number; `max_sim_seconds` may not pass what integer
    /// nanoseconds hold (about 584 years).
    pub fn validate(&self) -> Result<(), FieldError> {
        let all = [
            ("max_requests", self.max_requests),
            ("max_sim_seconds", self.max_sim_seconds),
            ("max_tokens_per_request", self.max_tokens_per_request),
            ("max_experts", self.max_experts),
            ("max_layers", self.max_layers),
            ("max_topics", self.max_topics),
            ("max_routing_entries", self.max_routing_entries),
            ("max_gpus", self.max_gpus),
            ("max_trace_steps", self.max_trace_steps),
            ("max_adapters", self.max_adapters),
            ("max_samples", self.max_samples),
            ("max_cells", self.max_cells),
            ("max_runs", self.max_runs),
        ];
        for (key, value) in all {
            if !(value.is_finite() && value > 0.0) {
                return Err(field_error(
                    &format!("limits.{key}"),
                    format!("must be a positive number, got {value}"),
                ));
            }
        }
        // A run's arrivals may land past its expected horizon; keep a factor of 100 of headroom
        // below u64 nanoseconds (1.8e10 s).
        if self.max_sim_seconds > MAX_SIM_SECONDS_CEILING {
            return Err(field_error(
                "limits.max_sim_seconds",
                format!(
                    "must be at most {MAX_SIM_SECONDS_CEILING:e} (simulated time is integer \
                     nanoseconds, which end after 1.8e10 s), got {}",
                    self.max_sim_seconds
                ),
            ));
        }
        Ok(())
    }

    /// Refuses the first demand above its ceiling (a NaN or infinite demand is refused too).
    pub fn check(&self, demands: &[Demand]) -> Result<(), FieldError> {
        for demand in demands {
            let ceiling = self.ceiling(demand.quantity);
            if !(demand.value.is_finite() && demand.value <= ceiling) {
                return Err(field_error(
                    &demand.path,
                    format!(
                        "asks for {} {}, above the ceiling of {} (raise it with `[limits] {} = ...` \
                         or `--set limits.{}=...`; docs/limits.md)",
                        show(demand.value),
                        demand.quantity.describe(),
                        show(ceiling),
                        demand.quantity.key(),
                        demand.quantity.key()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Most Monte-Carlo samples a family may draw while a scenario is validated (GEM's moderate
/// variability factors): validation runs before any ceiling is read, so this bound is fixed.
pub const MAX_VALIDATION_SAMPLES: f64 = 1e8;

/// The largest `max_sim_seconds` a scenario may set.
pub const MAX_SIM_SECONDS_CEILING: f64 = 1e8;

/// A count as a person reads it: integers without a fraction, large or odd values in `e` form.
fn show(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e12 {
        format!("{value:.0}")
    } else {
        format!("{value:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demand_above_its_ceiling_names_the_field_and_the_key_to_raise() {
        let limits = Limits::default();
        let err = limits
            .check(&[
                Demand::new(Quantity::Experts, 60.0, "model.n_experts"),
                Demand::new(Quantity::Topics, 1e6, "workload.n_topics"),
            ])
            .unwrap_err();
        assert_eq!(err.path, "workload.n_topics");
        assert!(err.message.contains("1000000 topics"), "{}", err.message);
        assert!(err.message.contains("limits.max_topics"), "{}", err.message);
        let raised = Limits {
            max_topics: 2e6,
            ..Limits::default()
        };
        assert!(
            raised
                .check(&[Demand::new(Quantity::Topics, 1e6, "workload.n_topics")])
                .is_ok()
        );
    }

    #[test]
    fn nan_and_infinite_demands_are_refused() {
        let limits = Limits::default();
        for value in [f64::NAN, f64::INFINITY] {
            assert!(
                limits
                    .check(&[Demand::new(Quantity::SimSeconds, value, "x")])
                    .is_err()
            );
        }
    }

    #[test]
    fn ceilings_must_be_positive_and_time_stays_inside_integer_nanoseconds() {
        let mut limits = Limits::default();
        assert!(limits.validate().is_ok());
        limits.max_gpus = 0.0;
        assert_eq!(limits.validate().unwrap_err().path, "limits.max_gpus");
        limits.max_gpus = 8.0;
        limits.max_sim_seconds = 1e12;
        assert_eq!(
            limits.validate().unwrap_err().path,
            "limits.max_sim_seconds"
        );
    }
}
