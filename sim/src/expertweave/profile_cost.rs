//! ExpertWeave steps priced from a measured profile (`[cost] profile`) instead of the roofline:
//! per layer the dense part as the profile's dense GEMM scaled to the layer's width, the output
//! head likewise, and per MoE layer the rerouting kernel (the profile's measured series) and
//! every expert weight the step may read, priced on the profile's expert curve at its expected
//! load when read, weighted by the probability that it is read, the weights run concurrently
//! (the slowest counts) or one after another (they add up) as the profile's device does
//! (`expert_execution`).
//!
//! A dense GEMM of a width the profile measured (`dense_gemm/out=W`, `expertsim-calibrate
//! --gemm-widths`, which `--for-scenario` derives from the scenario's layers and vocabulary) is
//! priced from that measurement; any other width from the profile's dense GEMM taken as linear
//! in its output width (what a tiled GEMM does: one pass over the weights per output tile of
//! columns; a narrow GEMM on a GPU still pays its launch floor, which that assumption misses).

use super::config::{ExpertWeaveScenario, Rerouting};
use crate::cost::curve::CostCurve;
use crate::cost::profile::{ExpertExecution, ExpertFfnCurve, MeasuredProfile};
use crate::cost::shape::WeightDtype;
use crate::policies::memory::InstancePlan;
use crate::serving::{CostSource, StepBreakdown, StepCost, StepTime, StepWork};
use crate::serving_family::popularity::Popularity;
use crate::time::SimDuration;

/// What the step cost needs from a measured profile, checked against the scenario's model.
#[derive(Clone, Debug, PartialEq)]
pub struct EwProfile {
    /// The profile's device, as it names itself.
    pub device: String,
    /// Routed tokens on one expert -> ns: the profile's expert entry (the whole-layer curve
    /// and, when measured, the layer's split into its fixed part and each expert's GEMMs).
    pub expert: ExpertFfnCurve,
    pub expert_execution: ExpertExecution,
    /// Tokens -> ns of one GEMM of `dense_width` output features over `hidden`.
    pub dense: CostCurve,
    pub dense_width: usize,
    /// (width, tokens -> ns) of the GEMMs over `hidden` measured at their own output width.
    pub gemms: Vec<(usize, CostCurve)>,
    /// (adapters, tokens -> ns) of the configured rerouting variant, by adapter count.
    pub reroute: Vec<(usize, CostCurve)>,
}

impl EwProfile {
    /// Extracts the curves for experts of `hidden x expert_ffn` and `rerouting`; the error says
    /// what the profile lacks.
    pub fn from_measured(
        measured: &MeasuredProfile,
        hidden: usize,
        expert_ffn: usize,
        rerouting: Rerouting,
    ) -> Result<EwProfile, String> {
        let profile = &measured.profile;
        let expert = profile
            .expert_entry(hidden, expert_ffn, WeightDtype::Bf16)
            .ok_or_else(|| {
                format!(
                    "has no bf16 expert curve for hidden {hidden}, expert_ffn {expert_ffn} \
                     (calibrate with --expert-ffn {expert_ffn})"
                )
            })?
            .clone();
        if profile.model.hidden != hidden {
            return Err(format!(
                "its dense GEMM is over hidden {}, the model's is {hidden}",
                profile.model.hidden
            ));
        }
        let variant = match rerouting {
            Rerouting::Fused => "fused",
            Rerouting::Unfused => "unfused",
        };
        let prefix = format!("reroute/{variant}/adapters=");
        let mut reroute = Vec::new();
        let mut gemms = Vec::new();
        for m in &measured.calibration.measurements {
            if let Some(width) = m.name.strip_prefix("dense_gemm/out=") {
                let width: usize = width
                    .parse()
                    .map_err(|_| format!("measurement {:?}: bad width", m.name))?;
                let curve = CostCurve::new(m.points.iter().map(|p| (p[0], p[1])).collect())
                    .map_err(|e| format!("measurement {:?}: {e}", m.name))?;
                gemms.push((width, curve));
                continue;
            }
            let Some(adapters) = m.name.strip_prefix(&prefix) else {
                continue;
            };
            let adapters: usize = adapters
                .parse()
                .map_err(|_| format!("measurement {:?}: bad adapter count", m.name))?;
            let curve = CostCurve::new(m.points.iter().map(|p| (p[0], p[1])).collect())
                .map_err(|e| format!("measurement {:?}: {e}", m.name))?;
            reroute.push((adapters, curve));
        }
        if reroute.is_empty() {
            return Err(format!(
                "has no {variant} rerouting measurement (calibrate with --reroute-tokens and \
                 --adapters)"
            ));
        }
        reroute.sort_by_key(|(a, _)| *a);
        Ok(EwProfile {
            device: profile.gpu.clone(),
            expert,
            expert_execution: profile.expert_execution,
            dense: profile.non_expert_prefill.clone(),
            dense_width: (profile.model.dense_matmul_params_per_layer() as usize).div_ceil(hidden),
            gemms,
            reroute,
        })
    }

    /// One GEMM of `width` output features over `tokens` rows: measured at that width, else
    /// the dense GEMM scaled linearly in width.
    fn gemm_ns(&self, width: u64, tokens: u64) -> f64 {
        match self.gemms.iter().find(|(w, _)| *w as u64 == width) {
            Some((_, curve)) => curve.at(tokens as f64),
            None => self.dense.at(tokens as f64) * width as f64 / self.dense_width as f64,
        }
    }

    /// The rerouting series measured with the adapter count nearest to `adapters`.
    fn reroute_ns(&self, adapters: usize, tokens: u64) -> f64 {
        let (_, curve) = self
            .reroute
            .iter()
            .min_by_key(|(a, _)| a.abs_diff(adapters))
            .expect("validated: at least one series");
        curve.at(tokens as f64)
    }

    /// One expert weight's share of a MoE layer on a device that runs experts concurrently:
    /// read with probability `touched`, receiving `load` routed tokens in expectation
    /// (`load / touched` when it is read).
    fn expert_ns(&self, touched: f64, load: f64) -> f64 {
        if touched <= 0.0 || load <= 0.0 {
            return 0.0;
        }
        touched * self.expert.curve.at((load / touched).max(1.0))
    }
}

/// The profile-driven step cost of one instance of a scenario with `[cost] profile`.
pub struct ProfileStepCost<'a> {
    scenario: &'a ExpertWeaveScenario,
    profile: &'a EwProfile,
    instance: &'a InstancePlan,
    popularity: &'a Popularity,
    /// (probability read, routed rows) of every expert weight of one layer, reused.
    weights: Vec<(f64, f64)>,
}

impl<'a> ProfileStepCost<'a> {
    /// `None` when the scenario names no profile.
    pub fn new(
        scenario: &'a ExpertWeaveScenario,
        instance: &'a InstancePlan,
        popularity: &'a Popularity,
    ) -> Option<ProfileStepCost<'a>> {
        scenario.profile.as_ref().map(|profile| ProfileStepCost {
            scenario,
            profile,
            instance,
            popularity,
            weights: Vec::new(),
        })
    }
}

impl StepCost for ProfileStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let shape = &self.scenario.shape;
        let p = self.profile;
        let tokens = work.prefill_tokens + work.decode_tokens;
        let hidden = shape.hidden;
        let mut dense_ns = 0.0;
        for layer in 0..shape.n_layers {
            dense_ns += p.gemm_ns(
                shape.layer_non_routed_params(layer).div_ceil(hidden),
                tokens,
            );
        }
        dense_ns += p.gemm_ns(shape.vocab, tokens);
        let instance = self.instance;
        let use_adapters = instance.adapter_experts && instance.reroutes;
        let (mut reroute_ns, mut moe_ns) = (0.0, 0.0);
        for layer in 0..shape.n_moe_layers() as usize {
            if instance.reroutes && !instance.adapters.is_empty() {
                reroute_ns += p.reroute_ns(instance.adapters.len(), tokens);
            }
            self.popularity
                .expected_reads(layer, work.adapters, use_adapters, &mut self.weights);
            // Serial: one layer launch, every weight read costs its GEMMs (with the profile's
            // split, the layer's fixed part once); concurrent: the slowest one counts.
            moe_ns += match p.expert_execution {
                ExpertExecution::Serial => p.expert.serial_layer_ns(
                    (tokens * shape.top_k) as f64,
                    self.weights
                        .iter()
                        .map(|&(read, rows)| (read, if read > 0.0 { rows / read } else { 0.0 })),
                ),
                ExpertExecution::Concurrent => self
                    .weights
                    .iter()
                    .map(|&(read, rows)| p.expert_ns(read, rows))
                    .fold(0.0, f64::max),
            };
        }
        let nanos = dense_ns + reroute_ns + moe_ns;
        StepTime {
            duration: SimDuration(nanos.round().max(1.0) as u64),
            breakdown: StepBreakdown {
                moe_ns,
                ..StepBreakdown::default()
            },
            source: CostSource::Measured,
        }
    }
}
