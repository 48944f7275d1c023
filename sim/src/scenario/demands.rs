//! What each family's validated cell asks of the simulator, in the quantities `[limits]` bounds
//! (docs/limits.md): requests, simulated seconds, tokens per request, model and cluster sizes.
//! Each demand names the field that causes it, so a refusal points at what to change.

use super::Scenario;
use super::limits::{Demand, Quantity};
use crate::caps::config::{ArrivalSpec, ExecutionSpec};

impl Scenario {
    /// Every quantity this cell asks for, with the field that asks.
    pub fn demands(&self) -> Vec<Demand> {
        use Quantity::*;
        let mut d = Vec::new();
        match self {
            Scenario::Caps(s) => {
                let n = s.workload.n_requests as f64;
                d.push(Demand::new(Requests, n, "workload.n_requests"));
                match &s.arrival {
                    ArrivalSpec::Poisson { rate_per_s }
                    | ArrivalSpec::Bursty { rate_per_s, .. } => d.push(Demand::new(
                        SimSeconds,
                        n / rate_per_s,
                        "arrival.rate_per_s",
                    )),
                    ArrivalSpec::Offline => {}
                    ArrivalSpec::Trace { trace, time_scale } => d.push(Demand::new(
                        SimSeconds,
                        trace.span_s() * time_scale,
                        "arrival.time_scale",
                    )),
                }
                // A queueing reference serves one batch at a time: the busy time alone bounds
                // the span from below.
                let service = match &s.execution {
                    ExecutionSpec::Constant { service } => Some(service.as_secs_f64()),
                    ExecutionSpec::Exponential { mean } => Some(mean.as_secs_f64()),
                    ExecutionSpec::CostModel(_) => None,
                };
                if let Some(service) = service {
                    let batches = (n / s.scheduler.max_batch_size as f64).ceil();
                    d.push(Demand::new(
                        SimSeconds,
                        batches * service,
                        "execution.service_ms",
                    ));
                }
                for (path, dist) in [
                    ("workload.prompt_tokens", &s.workload.prompt_tokens),
                    ("workload.output_tokens", &s.workload.output_tokens),
                ] {
                    d.push(Demand::new(
                        TokensPerRequest,
                        dist.median,
                        &format!("{path}.median"),
                    ));
                    d.push(Demand::new(
                        TokensPerRequest,
                        f64::from(dist.max),
                        &format!("{path}.max"),
                    ));
                }
                let (layers, experts) = (s.shape.n_layers as f64, s.shape.n_experts as f64);
                d.push(Demand::new(Layers, layers, "model.n_layers"));
                d.push(Demand::new(Experts, experts, "model.n_experts"));
                let topics = s.workload.n_topics as f64;
                d.push(Demand::new(Topics, topics, "workload.n_topics"));
                d.push(Demand::new(
                    RoutingEntries,
                    topics * layers * experts,
                    "workload.n_topics",
                ));
            }
            Scenario::Gem(s) => {
                let n = s.n_requests as f64;
                d.push(Demand::new(Requests, n, "workload.n_requests"));
                let span = s.arrival.span_s(s.n_requests);
                if span > 0.0 {
                    let field = match s.arrival {
                        crate::arrivals::ArrivalSpec::Trace { .. } => "arrival.trace.time_scale",
                        _ => "arrival.rate_per_s",
                    };
                    d.push(Demand::new(SimSeconds, span, field));
                }
                for (path, dist) in [
                    ("workload.prompt_tokens", &s.prompt_tokens),
                    ("workload.output_tokens", &s.output_tokens),
                ] {
                    d.push(Demand::new(
                        TokensPerRequest,
                        f64::from(dist.max),
                        &format!("{path}.max"),
                    ));
                }
                d.push(Demand::new(Layers, s.shape.n_layers as f64, "model.name"));
                d.push(Demand::new(Experts, s.shape.n_experts as f64, "model.name"));
                d.push(Demand::new(Gpus, s.n_gpus as f64, "cluster.n_gpus"));
                if s.experiment == crate::gem::config::Experiment::VariabilityAtScale {
                    d.push(Demand::new(
                        Samples,
                        s.scale.draws as f64 * s.n_gpus as f64,
                        "scale.draws",
                    ));
                }
                if let crate::gem::config::TraceSpec::Synthetic(params) = &s.trace {
                    let steps = params.observed_steps as f64 + params.unseen_steps as f64;
                    d.push(Demand::new(TraceSteps, steps, "trace.unseen_steps"));
                    d.push(Demand::new(
                        RoutingEntries,
                        steps * s.shape.n_layers as f64 * s.shape.n_experts as f64,
                        "trace.unseen_steps",
                    ));
                }
            }
            Scenario::Chimera(s) => {
                d.push(Demand::new(SimSeconds, s.duration_s, "workload.duration_s"));
                d.push(Demand::new(Requests, s.rps * s.duration_s, "workload.rps"));
                d.push(Demand::new(Gpus, s.engines.len() as f64, "cluster.models"));
            }
            Scenario::Expertweave(s) => {
                let w = &s.workload;
                d.push(Demand::new(SimSeconds, w.horizon_s, "workload.horizon_s"));
                d.push(Demand::new(
                    Requests,
                    w.rate_rps * w.horizon_s,
                    "workload.rate_rps",
                ));
                // Lengths spread up to (1 + length_spread) times their mean.
                let spread = 1.0 + w.length_spread;
                d.push(Demand::new(
                    TokensPerRequest,
                    w.prompt_tokens as f64 * spread,
                    "workload.prompt_tokens",
                ));
                d.push(Demand::new(
                    TokensPerRequest,
                    w.output_tokens as f64 * spread,
                    "workload.output_tokens",
                ));
                d.push(Demand::new(
                    Gpus,
                    s.device.n_devices as f64,
                    "device.n_devices",
                ));
                d.push(Demand::new(
                    Adapters,
                    s.adapters.len() as f64,
                    "adapters.count",
                ));
            }
            Scenario::Serving(s) => {
                let n = s.requests();
                d.push(Demand::new(Requests, n as f64, "workload.n_requests"));
                let rate_key = match &s.arrival {
                    crate::arrivals::ArrivalSpec::Trace { .. } => "arrival.trace.time_scale",
                    _ => "arrival.rate_per_s",
                };
                d.push(Demand::new(SimSeconds, s.arrival.span_s(n), rate_key));
                for (spec, key) in [
                    (&s.prompt_tokens, "workload.prompt_tokens"),
                    (&s.output_tokens, "workload.output_tokens"),
                ] {
                    if let crate::serving_family::config::LengthSpec::Distribution(d_) = spec {
                        d.push(Demand::new(TokensPerRequest, f64::from(d_.max()), key));
                    }
                }
                d.push(Demand::new(
                    Gpus,
                    (s.replica.count * s.replica.gpus) as f64,
                    "replica.count",
                ));
                d.push(Demand::new(
                    Topics,
                    f64::from(s.n_topics),
                    "workload.n_topics",
                ));
                if let crate::serving_family::config::ServedModel::Moe(shape) = &s.model {
                    d.push(Demand::new(Layers, shape.n_layers as f64, "model.name"));
                    d.push(Demand::new(Experts, shape.n_experts as f64, "model.name"));
                }
            }
            Scenario::Mosaic(s) => {
                d.push(Demand::new(
                    Requests,
                    f64::from(s.dataset.questions) * 3.0,
                    "dataset.questions",
                ));
                d.push(Demand::new(
                    Gpus,
                    f64::from(s.n_workers),
                    "cluster.n_workers",
                ));
                d.push(Demand::new(
                    TokensPerRequest,
                    f64::from(s.dataset.prompt.max),
                    "dataset.prompt_tokens_mean",
                ));
                for (i, expert) in s.experts.iter().enumerate() {
                    d.push(Demand::new(
                        TokensPerRequest,
                        f64::from(expert.output.max),
                        &format!("experts[{i}].max_output_tokens"),
                    ));
                }
            }
        }
        d
    }
}
