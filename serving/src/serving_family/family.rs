//! The serving family as a registered `Family`: its tables, what a cell demands, one seed's run
//! through the policies' queue policy and router (with or without a trace-event file), and what
//! live mode reads (it runs the CAPS preset, `live::caps`, and one continuous MoE replica,
//! `live::continuous`).

use super::config::{LengthSpec, SchedulerTable};
use super::{ServingConfig, ServingScenario};
use crate::arrivals::{ArrivalSpec, TraceStats};
use crate::family::{Family, FigureKind, LiveDescription, Run};
use crate::load_cache::LoadCache;
use crate::metrics::MetricInfo;
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::serving::expert_trace::TraceSpec;
use crate::validate::FieldError;
use crate::validate::limits::{Demand, Quantity};
use std::path::{Path, PathBuf};

/// The general serving family (docs/serving-family.md).
pub struct Serving;

impl Serving {
    fn run_with(
        scenario: &ServingScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
        trace_events: Option<&Path>,
    ) -> Result<Run, String> {
        if let Some(experiment) = &scenario.experiment {
            return Ok(Run {
                output: experiment.run(seed),
                cost_source: scenario.cost_model().to_string(),
            });
        }
        // `[placement.calibration]` and `[placement]`: the workers' sessions planned first.
        let prepared = match super::prepared(scenario, seed, policies) {
            Ok(prepared) => prepared,
            Err(reason) => {
                return Ok(Run {
                    output: super::failed(&reason),
                    cost_source: scenario.cost_model().to_string(),
                });
            }
        };
        let scenario = prepared.as_ref().unwrap_or(scenario);
        let mut p = super::ScenarioPolicies::of(scenario, policies);
        Ok(Run {
            output: super::run_policies(scenario, seed, &mut p, records, trace_events)?,
            cost_source: scenario.cost_model().to_string(),
        })
    }
}

impl Family for Serving {
    type Config = ServingConfig;
    type Scenario = ServingScenario;
    const NAME: &'static str = "serving";
    const DESCRIPTION: &'static str = "general serving: replicas of any catalogued dense or MoE model under vllm/sarathi/orca/static schedulers, routers, queue policies, expert mappings, adapters (docs/serving-family.md)";
    const METRICS: &'static [MetricInfo] = super::METRICS;
    const HEADLINE: &'static [&'static str] = super::HEADLINE;
    const HEADLINE_IMPROVEMENTS: &'static [&'static str] = super::HEADLINE_IMPROVEMENTS;
    const RATE_KEY: Option<&'static str> = Some("arrival.rate_per_s");
    const CSV_COLUMNS: Option<&'static [&'static str]> = Some(super::CSV_COLUMNS);
    const TRACE_EVENTS: bool = true;
    const QUICK_SCENARIO: &'static str = "scenarios/serving/quick.toml";
    const LIVE: bool = true;
    /// GEM's figures read the expert detail a traced MoE group records
    /// (`mapping::expert_detail`); ExpertWeave's memory figure the adapters' memory plan; the
    /// timeline what `[output] timeline` records, the decode curves what `[output]
    /// decode_curves` records.
    const FIGURE_KINDS: &'static [FigureKind] = &[
        FigureKind::GemExpertLoad,
        FigureKind::GemStaircase,
        FigureKind::ExpertweaveMemory,
        FigureKind::Timeline,
        FigureKind::DecodeCurve,
    ];
    const PROFILE_FIELD: Option<&'static str> = Some("replica.scheduler.profile");

    fn validate(
        config: ServingConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ServingScenario, FieldError> {
        config.validate(base_dir, cache)
    }

    fn demands(s: &ServingScenario) -> Vec<Demand> {
        use Quantity::*;
        let n = s.expected_requests();
        let rate_key = match &s.arrival {
            ArrivalSpec::Trace { .. } => "arrival.trace.time_scale",
            _ => "arrival.rate_per_s",
        };
        let mut d = vec![
            Demand::new(Requests, n as f64, "workload.n_requests"),
            Demand::new(SimSeconds, s.arrival.span_s(n), rate_key),
        ];
        for (i, c) in s.calls.iter().enumerate() {
            for (spec, field) in [
                (&c.prompt_tokens, "prompt_tokens"),
                (&c.output_tokens, "output_tokens"),
            ] {
                if let LengthSpec::Distribution(lengths) = spec {
                    d.push(Demand::new(
                        TokensPerRequest,
                        f64::from(lengths.max()),
                        &format!("workload.calls[{i}].{field}"),
                    ));
                }
            }
        }
        let trace = s.arrival.trace_stats(n).map(|(_, stats)| stats);
        for (spec, key, from_trace) in [
            (
                &s.prompt_tokens,
                "workload.prompt_tokens",
                trace.as_ref().and_then(|t| t.prompt_tokens.as_ref()),
            ),
            (
                &s.output_tokens,
                "workload.output_tokens",
                trace.as_ref().and_then(|t| t.output_tokens.as_ref()),
            ),
        ] {
            match (spec, from_trace) {
                (LengthSpec::Distribution(lengths), _) => {
                    d.push(Demand::new(TokensPerRequest, f64::from(lengths.max()), key));
                }
                // The trace's longest request, which the replica must hold.
                (LengthSpec::Trace, Some(lengths)) => d.push(Demand::new(
                    TokensPerRequest,
                    f64::from(lengths.max),
                    "arrival.trace.path",
                )),
                (LengthSpec::Trace, None) => {}
            }
        }
        d.push(Demand::new(Gpus, s.gpu_count() as f64, "replica.count"));
        // Placed sessions: each worker is one replica's GPUs (the largest placed group's; the
        // aggregator runs on the workers' GPUs).
        if let Some(placement) = &s.placement {
            let gpus = s
                .groups()
                .enumerate()
                .filter(|&(g, _)| placement.aggregator != Some(g))
                .map(|(_, (_, r))| r.gpus)
                .max()
                .unwrap_or(1);
            d.push(Demand::new(
                Gpus,
                f64::from(placement.workers) * gpus as f64,
                "placement.workers",
            ));
            // The calibration pass: its subset's draws and its sweep's largest session.
            if let Some(c) = &placement.calibration {
                d.push(Demand::new(
                    Requests,
                    f64::from(c.calls())
                        + f64::from(c.min_calls_per_model)
                            * placement.predicted_session_s.len() as f64,
                    "placement.calibration.calls",
                ));
                d.push(Demand::new(
                    Requests,
                    f64::from(c.sweep_max_calls),
                    "placement.calibration.sweep_max_calls",
                ));
            }
        }
        d.push(Demand::new(
            Topics,
            f64::from(s.n_topics),
            "workload.n_topics",
        ));
        if let Some(adapters) = &s.adapters {
            d.push(Demand::new(
                Adapters,
                adapters.adapters.len() as f64,
                "adapters.count",
            ));
        }
        for (model, _) in s.groups() {
            if let Some(shape) = model.experts() {
                d.push(Demand::new(Layers, shape.n_layers as f64, "model.name"));
                d.push(Demand::new(Experts, shape.n_experts as f64, "model.name"));
                d.extend(s.expert_mapping.demands(
                    shape.n_layers,
                    shape.n_experts,
                    "experts.mapping",
                ));
                // A synthetic trace is generated whole per seed: its steps x layers x experts
                // counts are held in memory (the gem family's demands).
                if let Some(TraceSpec::Synthetic(params)) = &s.expert_trace {
                    let steps = params.observed_steps as f64 + params.unseen_steps as f64;
                    d.push(Demand::new(TraceSteps, steps, "experts.trace.unseen_steps"));
                    d.push(Demand::new(
                        RoutingEntries,
                        steps * shape.n_layers as f64 * shape.n_experts as f64,
                        "experts.trace.unseen_steps",
                    ));
                }
            }
        }
        if let Some((samples, gpus)) = s.experiment.as_ref().and_then(|e| e.samples()) {
            d.push(Demand::new(Gpus, gpus, "experiment.gpus"));
            d.push(Demand::new(Samples, samples, "experiment.draws"));
        }
        d
    }

    fn run(
        scenario: &ServingScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        Serving::run_with(scenario, seed, policies, records, None)
    }

    fn run_traced(
        scenario: &ServingScenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
        path: &Path,
    ) -> Result<Run, String> {
        Serving::run_with(scenario, seed, policies, records, Some(path))
    }

    fn trace_events(s: &ServingScenario) -> bool {
        s.trace_events
    }

    fn per_request_csv(s: &ServingScenario) -> bool {
        s.per_request_csv
    }

    fn live_description(s: &ServingScenario) -> LiveDescription {
        // Live mode runs the CAPS preset (a static replica priced from expected routing) and a
        // continuous MoE replica (an MLA one with adapters: the ExpertWeave preset), whose steps
        // launch the MoE kernels of the model's routed geometry.
        let priced = s.replica.static_cost.as_ref().and_then(|c| c.model());
        let continuous = !matches!(s.replica.scheduler, SchedulerTable::Static { .. });
        let moe = !matches!(s.model, super::config::ServedModel::Dense(_));
        LiveDescription {
            moe_shape: (priced.is_some() || (continuous && moe))
                .then(|| s.model.experts())
                .flatten(),
            // Every group's model, as the chimera family named its engines'.
            model: s
                .groups()
                .map(|(model, _)| model.name())
                .collect::<Vec<_>>()
                .join(", "),
            cost_source: s.cost_model().to_string(),
        }
    }

    fn trace_replay(s: &ServingScenario) -> Option<(PathBuf, TraceStats)> {
        s.arrival.trace_stats(s.n_requests)
    }

    /// `bandwidth_share` of a replica table whose GPUs all run at speed 1 (`speed_factors`
    /// absent or every entry 1, no `variability`): the share of no slowdown is no slowdown
    /// (`SpeedFactors::split(1, share)` is `(1, 1)` for every share, the only place it is
    /// read), so study (b)'s uniform cells are the same runs with either share. And a replica's
    /// `batch_former` the registry builds under another name (`Policies::same_batch_selector`:
    /// best_fit is greedy_variance) is written by that name: the former is read only to build
    /// the selector.
    fn drop_inert_keys(document: &mut toml::Table, policies: &dyn Policies) {
        let nominal = |table: &toml::Table| {
            !table.contains_key("variability")
                && table.get("speed_factors").is_none_or(|factors| {
                    factors.as_array().is_some_and(|factors| {
                        factors.iter().all(|f| {
                            f.as_float() == Some(1.0) || f.as_integer() == Some(1)
                        })
                    })
                })
        };
        let drop_share = |table: &mut toml::Table| {
            if nominal(table) {
                table.remove("bandwidth_share");
            }
            let former = table.get_mut("batch_former");
            let config = former.as_ref().and_then(|f| (*f).clone().try_into().ok());
            if let (Some(former), Some(other)) =
                (former, config.and_then(|c| policies.same_batch_selector(&c)))
                && let Ok(other) = toml::Value::try_from(other)
            {
                *former = other;
            }
        };
        match document.get_mut("replica") {
            Some(toml::Value::Table(table)) => drop_share(table),
            Some(toml::Value::Array(groups)) => {
                for group in groups {
                    if let toml::Value::Table(table) = group {
                        drop_share(table);
                    }
                }
            }
            _ => {}
        }
    }
}
