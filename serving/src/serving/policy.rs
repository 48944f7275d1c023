//! The registry enums of the serving layer's queue-policy and router extension points,
//! `QueuePolicyConfig` and `RouterConfig`, which scenarios name (the traits are `queue::QueuePolicy`
//! and `router::Router`). Chimera brought them; every family that queues requests names one
//! (FCFS where it has no `[queue]` table). Implementations live in the `strategies` crate
//! (`strategies::queue`, `strategies::routing`).

use crate::validate::{FieldError, at_least_one, non_negative};
use serde::{Deserialize, Serialize};

/// The queue policies a scenario's `[queue]` table can name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum QueuePolicyConfig {
    /// First-come first-served by submission time (vLLM's default).
    Fcfs,
    /// Shortest job first on the predicted output tokens of the request itself.
    Sjf,
    /// Shortest total job first on the predicted remaining workflow tokens, with Chimera's aging:
    /// key (starvation level, priority, arrival); a request's level drops by one for every
    /// `starvation_threshold` iterations it waits (0: no aging). `quantum` is the paper's Q.
    Stjf {
        #[serde(default = "default_starvation_threshold")]
        starvation_threshold: u64,
        #[serde(default = "default_quantum")]
        quantum: u64,
    },
    /// Multi-level feedback queue on the workflow's attained service (Autellix-style program-level
    /// least-attained-service): level k holds workflows that have generated at least
    /// `base_quantum_tokens * 2^(k-1)` tokens; FCFS within a level.
    Mlfq {
        #[serde(default = "default_levels")]
        levels: u32,
        #[serde(default = "default_base_quantum_tokens")]
        base_quantum_tokens: u64,
    },
    /// Learning to rank (Fu et al. 2024): SJF on a predicted rank of the request's output length,
    /// with extra log-normal ranking noise `noise`.
    Ltr {
        #[serde(default = "default_ltr_noise")]
        noise: f64,
    },
}

/// Chimera's starvation threshold S, in engine iterations (our choice; the paper gives no value):
/// 4096 steps of 20-50 ms are 1.5-3.5 minutes, beyond the queueing of a loaded engine, so aging
/// catches starvation without turning an overloaded queue into FCFS (with S = 256 it did, see
/// docs/chimera.md). Every Chimera scenario with an aging STJF queue uses this value.
pub fn default_starvation_threshold() -> u64 {
    4096
}
/// Chimera's running quantum Q, in engine iterations (our choice; the paper gives no value).
pub fn default_quantum() -> u64 {
    64
}
fn default_levels() -> u32 {
    4
}
fn default_base_quantum_tokens() -> u64 {
    256
}
fn default_ltr_noise() -> f64 {
    0.5
}

impl QueuePolicyConfig {
    /// The parameters' own ranges; errors name the key under `path` (the policy's table).
    pub fn validate(&self, path: &str) -> Result<(), FieldError> {
        match self {
            QueuePolicyConfig::Mlfq {
                levels,
                base_quantum_tokens,
            } => {
                at_least_one(&format!("{path}.levels"), *levels as usize)?;
                at_least_one(
                    &format!("{path}.base_quantum_tokens"),
                    *base_quantum_tokens as usize,
                )?;
            }
            QueuePolicyConfig::Ltr { noise } => {
                non_negative(&format!("{path}.noise"), *noise)?;
            }
            QueuePolicyConfig::Stjf { quantum, .. } => {
                at_least_one(&format!("{path}.quantum"), *quantum as usize)?;
            }
            QueuePolicyConfig::Fcfs | QueuePolicyConfig::Sjf => {}
        }
        Ok(())
    }

    pub fn kind(&self) -> &'static str {
        match self {
            QueuePolicyConfig::Fcfs => "fcfs",
            QueuePolicyConfig::Sjf => "sjf",
            QueuePolicyConfig::Stjf { .. } => "stjf",
            QueuePolicyConfig::Mlfq { .. } => "mlfq",
            QueuePolicyConfig::Ltr { .. } => "ltr",
        }
    }
}

/// The routers a scenario's `[routing]` table can name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouterConfig {
    /// vLLM's data-parallel load balancer: the engine with the lowest
    /// `waiting_weight * waiting + running_weight * running`.
    LeastLoaded {
        #[serde(default = "default_waiting_weight")]
        waiting_weight: f64,
        #[serde(default = "default_running_weight")]
        running_weight: f64,
    },
    /// Engines in turn.
    RoundRobin,
    /// Chimera's dispatcher (Algorithm 1): the highest-confidence engine within `(1 + slack)` of
    /// the fastest estimated delay, switching away from the fastest only for a confidence gain of
    /// at least `margin`; sticky per workflow.
    Chimera {
        slack: f64,
        #[serde(default = "default_margin")]
        margin: f64,
    },
}

/// vLLM v1's DP load-balancing score weighs waiting requests 4x running ones.
fn default_waiting_weight() -> f64 {
    4.0
}
fn default_running_weight() -> f64 {
    1.0
}
/// Chimera's confidence margin Δs (our choice; the paper gives no value).
pub fn default_margin() -> f64 {
    0.05
}

impl RouterConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            RouterConfig::LeastLoaded { .. } => "least_loaded",
            RouterConfig::RoundRobin => "round_robin",
            RouterConfig::Chimera { .. } => "chimera",
        }
    }
}
