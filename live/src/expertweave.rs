//! ExpertWeave in live mode: the adapter-memory plan and each instance's continuous-batching
//! loop run unchanged and ask an [`EwLive`] step cost for each step. Per MoE layer, every
//! token of the step draws its top-k experts from its adapter's routing popularity (the same
//! distribution the roofline assumes), the batch is rerouted by the rerouting kernel (fused or
//! unfused, as configured) to the adapters' fine-tuned expert copies, and the MoE layer runs on
//! the union of base experts and copies; each layer's dense part and the output head run as
//! GEMMs over the step's tokens.

use crate::device::Kernels;
use crate::fidelity::StepRecord;
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use kernels::reroute::{BASE_MODEL, RerouteProblem, RerouteVariant};
use rand::RngExt;
use sim::expertweave::config::Rerouting;
use sim::expertweave::{
    EwStepCost, EwStepWork, ExpertWeaveScenario, Popularity, ProfileStepCost, RooflineStepCost,
    run_on,
};
use sim::rng::SimRng;
use sim::runner::Policies;

/// One line per step: the instance's adapters and what the scheduler put into the step.
fn decision_line(work: &EwStepWork<'_>) -> String {
    format!(
        "instance {:?}: tokens by adapter {:?}, context {}, prefill_sq {}",
        work.instance.adapters, work.tokens_by_adapter, work.context_tokens, work.prefill_sq
    )
}

/// The scenario's step cost: its measured profile's when `[cost] profile` names one, the
/// roofline's otherwise (what `expertsim run` uses).
fn scenario_cost(scenario: &ExpertWeaveScenario) -> Box<dyn EwStepCost + '_> {
    match ProfileStepCost::new(scenario) {
        Some(profiled) => Box::new(profiled),
        None => Box::new(RooflineStepCost::new(scenario)),
    }
}

/// The simulated step cost, logging each step's decisions.
struct LoggedCost<'a> {
    cost: Box<dyn EwStepCost + 'a>,
    log: Vec<String>,
}

impl EwStepCost for LoggedCost<'_> {
    fn seconds(&mut self, work: &EwStepWork<'_>) -> f64 {
        self.log.push(decision_line(work));
        self.cost.seconds(work)
    }
}

/// The live step cost: the scenario's cost model predicts, the kernels measure.
pub struct EwLive<'a> {
    predictor: Box<dyn EwStepCost + 'a>,
    /// The routing popularity the step costs assume; live tokens draw their experts from it.
    popularity: Popularity,
    scenario: &'a ExpertWeaveScenario,
    kernels: &'a mut Kernels,
    routing: SimRng,
    clock: Clock,
    steps: Vec<StepRecord>,
    log: Vec<String>,
    error: Option<BackendError>,
}

/// `top_k` distinct experts drawn from `p` (by inversion, redrawing repeats).
fn draw_experts(p: &[f64], top_k: usize, rng: &mut SimRng, out: &mut Vec<i32>) {
    let start = out.len();
    let top_k = top_k.min(p.iter().filter(|&&x| x > 0.0).count());
    while out.len() - start < top_k {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut pick = p.len() - 1;
        for (e, &x) in p.iter().enumerate() {
            acc += x;
            if u < acc {
                pick = e;
                break;
            }
        }
        if !out[start..].contains(&(pick as i32)) {
            out.push(pick as i32);
        }
    }
}

impl EwLive<'_> {
    fn measure(&mut self, work: &EwStepWork<'_>) -> Result<f64, BackendError> {
        let shape = &self.scenario.shape;
        let n = shape.n_routed_experts as usize;
        let top_k = shape.top_k as usize;
        let instance = work.instance;
        let tokens: u64 = work.tokens_by_adapter.iter().sum();
        let variant = match self.scenario.cost.rerouting {
            Rerouting::Fused => RerouteVariant::Fused,
            Rerouting::Unfused => RerouteVariant::Unfused,
        };
        let k = &mut *self.kernels;
        let mut total = 0.0;
        for layer in 0..shape.n_layers {
            let out = shape.layer_non_routed_params(layer).div_ceil(shape.hidden) as usize;
            total += k.dense(out, tokens as usize, 0)?;
        }
        total += k.dense(shape.vocab as usize, tokens as usize, 0)?;
        let popularity = &self.popularity;
        let use_adapters = instance.adapter_experts && instance.reroutes;
        for moe_layer in 0..shape.n_moe_layers() as usize {
            // Route every token of the step from its adapter's popularity.
            let mut topk_ids = Vec::with_capacity(tokens as usize * top_k);
            let mut adapter_ids = Vec::with_capacity(tokens as usize);
            for (a, &count) in work.tokens_by_adapter.iter().enumerate() {
                let row = instance.adapters.iter().position(|&x| x == a);
                let aid = match row {
                    Some(j) if use_adapters => j as i32,
                    _ => BASE_MODEL,
                };
                for _ in 0..count {
                    draw_experts(
                        popularity.probabilities(a, moe_layer),
                        top_k,
                        &mut self.routing,
                        &mut topk_ids,
                    );
                    adapter_ids.push(aid);
                }
            }
            // The virtual weight tensor: base experts, then each served adapter's copies.
            let mut expert_map = Vec::with_capacity(instance.adapters.len() * n);
            let mut next_copy = n as i32;
            for &a in &instance.adapters {
                for (e, &tuned) in popularity.tuned(a, moe_layer).iter().enumerate() {
                    if tuned && use_adapters {
                        expert_map.push(next_copy);
                        next_copy += 1;
                    } else {
                        expert_map.push(e as i32);
                    }
                }
            }
            let rerouted: Vec<i32> = topk_ids
                .iter()
                .enumerate()
                .map(|(i, &id)| match adapter_ids[i / top_k] {
                    BASE_MODEL => id,
                    aid => expert_map[aid as usize * n + id as usize],
                })
                .collect();
            if instance.reroutes && !instance.adapters.is_empty() && tokens > 0 {
                total += k.reroute(
                    RerouteProblem {
                        n_experts: n,
                        top_k,
                        max_adapters: instance.adapters.len(),
                        topk_ids,
                        adapter_ids,
                        expert_map,
                    },
                    variant,
                )?;
            }
            let mut counts = vec![0u32; next_copy as usize];
            for id in rerouted {
                counts[id as usize] += 1;
            }
            total += k.moe(moe_layer, &counts, top_k)?;
        }
        Ok(total)
    }
}

impl EwStepCost for EwLive<'_> {
    fn seconds(&mut self, work: &EwStepWork<'_>) -> f64 {
        self.log.push(decision_line(work));
        let predicted = self.predictor.seconds(work);
        let measured = if self.error.is_none() {
            match self.measure(work) {
                Ok(ns) => ns * 1e-9,
                Err(e) => {
                    self.error = Some(e);
                    predicted
                }
            }
        } else {
            predicted
        };
        self.steps.push(StepRecord {
            index: self.steps.len(),
            what: format!(
                "step of {} tokens on the instance of adapters {:?}",
                work.tokens_by_adapter.iter().sum::<u64>(),
                work.instance.adapters
            ),
            predicted_ns: predicted * 1e9,
            measured_ns: measured * 1e9,
        });
        match self.clock {
            Clock::Measured => measured,
            Clock::Predicted => predicted,
        }
    }
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let mut simulated_cost = LoggedCost {
        cost: scenario_cost(scenario),
        log: Vec::new(),
    };
    let simulated = run_on(
        scenario,
        seed,
        policies.adapter_memory(&scenario.memory).as_mut(),
        &mut simulated_cost,
        &mut sim::records::DiscardRecords,
    );
    let mut live_cost = EwLive {
        predictor: scenario_cost(scenario),
        popularity: Popularity::new(scenario),
        scenario,
        kernels,
        routing: sim::rng::stream(seed, "live/expertweave/routing"),
        clock,
        steps: Vec::new(),
        log: Vec::new(),
        error: None,
    };
    let live = run_on(
        scenario,
        seed,
        policies.adapter_memory(&scenario.memory).as_mut(),
        &mut live_cost,
        &mut sim::records::DiscardRecords,
    );
    if let Some(e) = live_cost.error {
        return Err(LiveError::Backend(e));
    }
    let plan = |details: &serde_json::Value| {
        format!(
            "memory plan: {}; instances: {}",
            details["memory"], details["instances"]
        )
    };
    let mut simulated_lines = vec![plan(&simulated.details)];
    simulated_lines.extend(simulated_cost.log);
    let mut live_lines = vec![plan(&live.details)];
    live_lines.extend(live_cost.log);
    Ok(FamilyRun {
        steps: live_cost.steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "the adapter-memory plan, then every step's instance, tokens per adapter, context \
             and prefill lengths",
            simulated_lines,
            live_lines,
        ),
        variability: None,
        execution: None,
    })
}
