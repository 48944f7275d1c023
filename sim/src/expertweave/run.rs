//! One ExpertWeave serving run: per-adapter Poisson requests with power-law shares, routed to the
//! instances a memory manager's plan creates, each instance a continuous-batching loop whose
//! admission is bounded by its KV capacity and whose step time is the cost model's roofline over
//! the non-expert part (MLA attention over the latent KV cache included), the MoE experts the
//! batch touches (base and adapter copies, as distinct weights to stream, through
//! `cost::moe_layer`) and the batched-rerouting operator.

use std::collections::VecDeque;

use rand::RngExt;
use serde_json::json;

use super::adapters::domain_ranking;
use super::config::{ExpertWeaveScenario, Rerouting};
use super::memory::{AdapterMemory, InstancePlan, MemoryPlan};
use super::model::GIB;
use crate::cost::moe_layer::{MoeLayerCost, MoeLayerParams, SpeedFactors};
use crate::cost::roofline::{Roofline, StepRoofline, StepTokens};
use crate::cost::shape::WeightDtype;
use crate::engine::{self, Model};
use crate::event_queue::EventQueue;
use crate::metrics::{LatencyRecorder, RunOutput};
use crate::records::{DiscardRecords, Extra, RecordSink, RequestRecord};
use crate::rng::stream;
use crate::time::SimTime;

/// Kernels per transformer layer outside the routed experts and rerouting (norms, projections,
/// attention, router, combine), each paying one launch per step; the routed experts' grouped
/// GEMM launches its own 3 (`cost::moe_layer`), 8 per MoE layer in all.
pub const NON_EXPERT_KERNELS_PER_LAYER: u32 = 5;

/// One generated request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub arrival_ns: u64,
    pub adapter: usize,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
}

/// The requests of `scenario` for `seed`: each adapter's Poisson stream (rate = aggregate rate
/// x share) over the horizon, merged in arrival order (ties by adapter index).
pub fn generate_requests(scenario: &ExpertWeaveScenario, seed: u64) -> Vec<Request> {
    let w = &scenario.workload;
    let horizon_ns = (w.horizon_s * 1e9) as u64;
    let mut requests = Vec::new();
    for (adapter, share) in scenario.shares.iter().enumerate() {
        let rate_per_ns = w.rate_rps * share * 1e-9;
        let mut arrivals = stream(seed, &format!("arrivals/{adapter}"));
        let mut lengths = stream(seed, &format!("lengths/{adapter}"));
        let mut t = 0.0f64;
        loop {
            let u: f64 = arrivals.random();
            t += -(1.0 - u).ln() / rate_per_ns;
            if t >= horizon_ns as f64 {
                break;
            }
            let mut length = |mean: u64| {
                let f: f64 = lengths.random_range(-1.0..=1.0);
                ((mean as f64 * (1.0 + w.length_spread * f)).round() as u64).max(1)
            };
            let prompt_tokens = length(w.prompt_tokens);
            let output_tokens = length(w.output_tokens);
            requests.push(Request {
                arrival_ns: t as u64,
                adapter,
                prompt_tokens,
                output_tokens,
            });
        }
    }
    requests.sort_by_key(|r| (r.arrival_ns, r.adapter));
    requests
}

/// Expert popularity of each domain in each MoE layer: Zipf(s) over the domain's relevance
/// ranking (the same ranking the adapters' fine-tuned experts come from).
pub struct Popularity {
    /// [adapter][layer][expert] probability that one routing draw of a token picks the expert.
    by_adapter: Vec<Vec<Vec<f64>>>,
    /// [adapter][layer][expert] whether the adapter fine-tuned the expert.
    tuned: Vec<Vec<Vec<bool>>>,
}

impl Popularity {
    /// Probability that one routing draw of a token of `adapter` picks each expert of MoE
    /// layer `layer`.
    pub fn probabilities(&self, adapter: usize, layer: usize) -> &[f64] {
        &self.by_adapter[adapter][layer]
    }

    /// Whether `adapter` fine-tuned each expert of MoE layer `layer`.
    pub fn tuned(&self, adapter: usize, layer: usize) -> &[bool] {
        &self.tuned[adapter][layer]
    }

    pub fn new(scenario: &ExpertWeaveScenario) -> Self {
        let n = scenario.shape.n_routed_experts as usize;
        let layers = scenario.shape.n_moe_layers() as usize;
        let s = scenario.cost.expert_zipf_s;
        let zipf: Vec<f64> = (0..n).map(|r| ((r + 1) as f64).powf(-s)).collect();
        let total: f64 = zipf.iter().sum();
        let by_adapter = scenario
            .adapters
            .iter()
            .map(|adapter| {
                (0..layers)
                    .map(|layer| {
                        let ranking = domain_ranking(&adapter.domain, layer, n as u32);
                        let mut p = vec![0.0; n];
                        for (rank, &expert) in ranking.iter().enumerate() {
                            p[expert as usize] = zipf[rank] / total;
                        }
                        p
                    })
                    .collect()
            })
            .collect();
        let tuned = scenario
            .adapters
            .iter()
            .map(|adapter| {
                adapter
                    .experts
                    .iter()
                    .map(|ids| {
                        let mut mask = vec![false; n];
                        for &id in ids {
                            mask[id as usize] = true;
                        }
                        mask
                    })
                    .collect()
            })
            .collect();
        Popularity { by_adapter, tuned }
    }

    /// Every expert weight `layer` may read for `tokens[adapter]` tokens with top-k routing,
    /// base experts then adapters' copies, as (probability it is read, expected routed tokens
    /// it receives), calling `each` per weight: a base expert is read if any token not rerouted
    /// away from it picks it; an adapter's copy if one of that adapter's tokens does.
    pub(crate) fn expected_loads(
        &self,
        layer: usize,
        tokens: &[u64],
        top_k: u64,
        use_adapters: bool,
        mut each: impl FnMut(f64, f64),
    ) {
        let n = self.by_adapter.first().map_or(0, |a| a[layer].len());
        for expert in 0..n {
            let (mut base_missed, mut base_load) = (1.0, 0.0);
            for (adapter, &count) in tokens.iter().enumerate() {
                if count == 0 {
                    continue;
                }
                let p = self.by_adapter[adapter][layer][expert];
                let draws = (count * top_k) as f64;
                let missed = (1.0 - p).powf(draws);
                if use_adapters && self.tuned[adapter][layer][expert] {
                    each(1.0 - missed, draws * p);
                } else {
                    base_missed *= missed;
                    base_load += draws * p;
                }
            }
            each(1.0 - base_missed, base_load);
        }
    }
}

/// What one continuous-batching step of an instance asks of its devices.
#[derive(Clone, Copy, Debug)]
pub struct EwStepWork<'a> {
    pub instance: &'a InstancePlan,
    /// Tokens of the step per adapter (index into the scenario's adapter list).
    pub tokens_by_adapter: &'a [u64],
    /// Cached tokens the decoding sequences attend to.
    pub context_tokens: u64,
    /// Sum of squared prompt lengths of the prefills (the attention's quadratic part).
    pub prefill_sq: f64,
    /// Sequences in the step (decoding and prefilling): the rows the output head scores.
    pub sequences: u64,
}

/// Whoever prices an ExpertWeave step: the roofline in simulation ([`RooflineStepCost`]), the
/// kernels in live mode. The serving loop cannot tell which one it talks to.
pub trait EwStepCost {
    /// The step's duration in seconds.
    fn seconds(&mut self, work: &EwStepWork<'_>) -> f64;
}

/// The analytic step cost: the cost model's roofline over the non-expert part
/// (`StepRoofline::mla_moe_non_expert`), each MoE layer's expected distinct expert weights and
/// tile-padded rows as grouped GEMMs spread over the instance's devices (`cost::moe_layer`),
/// and the rerouting operator.
pub struct RooflineStepCost<'a> {
    scenario: &'a ExpertWeaveScenario,
    popularity: Popularity,
    experts: MoeLayerCost,
    /// The non-expert roofline per instance size (devices), built on first use.
    non_expert: Vec<(u64, StepRoofline)>,
    /// (probability read, rows when read) of every expert weight of one layer, reused.
    weights: Vec<(f64, f64)>,
}

impl<'a> RooflineStepCost<'a> {
    pub fn new(scenario: &'a ExpertWeaveScenario) -> RooflineStepCost<'a> {
        let shape = &scenario.shape;
        RooflineStepCost {
            scenario,
            popularity: Popularity::new(scenario),
            experts: MoeLayerCost::for_experts(
                &scenario.gpu,
                shape.hidden as usize,
                shape.expert_ffn as usize,
                WeightDtype::Bf16,
                MoeLayerParams::default(),
            ),
            non_expert: Vec::new(),
            weights: Vec::new(),
        }
    }

    /// The non-expert roofline of an instance on `devices` devices.
    fn non_expert(&mut self, devices: u64) -> &StepRoofline {
        let index = match self.non_expert.iter().position(|(d, _)| *d == devices) {
            Some(index) => index,
            None => {
                let tensor_parallel = self.scenario.tensor_parallel.min(devices);
                let roofline = StepRoofline::mla_moe_non_expert(
                    &self.scenario.shape,
                    Roofline::of(&self.scenario.gpu),
                    tensor_parallel,
                    devices,
                    NON_EXPERT_KERNELS_PER_LAYER,
                );
                self.non_expert.push((devices, roofline));
                self.non_expert.len() - 1
            }
        };
        &self.non_expert[index].1
    }
}

impl EwStepCost for RooflineStepCost<'_> {
    fn seconds(&mut self, work: &EwStepWork<'_>) -> f64 {
        let instance = work.instance;
        let tokens: u64 = work.tokens_by_adapter.iter().sum();
        let mut ns = self
            .non_expert(instance.n_devices)
            .price(&StepTokens {
                rows: tokens,
                sequences: work.sequences,
                context_tokens: work.context_tokens,
                prefill_square: work.prefill_sq,
            })
            .nanos;
        let shape = &self.scenario.shape;
        let devices = instance.n_devices as f64;
        let use_adapters = instance.adapter_experts && instance.reroutes;
        for layer in 0..shape.n_moe_layers() as usize {
            let weights = &mut self.weights;
            weights.clear();
            self.popularity.expected_loads(
                layer,
                work.tokens_by_adapter,
                shape.top_k,
                use_adapters,
                |read, load| {
                    if read > 0.0 {
                        weights.push((read, load / read));
                    }
                },
            );
            ns += self.experts.grouped_gemm_spread(
                weights.iter().copied(),
                devices,
                SpeedFactors::NOMINAL,
            );
        }
        if instance.reroutes {
            // Per MoE layer: read the AID and top-k ids, the expert map rows, write the ids;
            // the unfused chain moves the intermediate arrays through memory between operators.
            let roofline = &self.experts.roofline;
            let bytes = (tokens * (4 + 2 * 4 * shape.top_k)) as f64
                + (instance.adapters.len() as u64 * shape.n_routed_experts * 4) as f64;
            let ops = match self.scenario.cost.rerouting {
                Rerouting::Fused => 1.0,
                Rerouting::Unfused => self.scenario.cost.unfused_ops as f64,
            };
            let per_layer = ops * (roofline.launch_ns + roofline.op(bytes / devices, 0.0).nanos());
            ns += shape.n_moe_layers() as f64 * per_layer;
        }
        ns * 1e-9
    }
}

#[derive(Default)]
struct InstanceOutcome {
    prompt_tokens: u64,
    output_tokens: u64,
    completed: u64,
    rejected: u64,
    end_ns: u64,
    steps: u64,
}

/// TTFT and TPOT samples of every instance of a run.
#[derive(Default)]
struct Latencies {
    ttft: LatencyRecorder,
    tpot: LatencyRecorder,
}

struct Running {
    request: usize,
    generated: u64,
    first_token_ns: u64,
}

/// Continuous batching on one instance: each step decodes one token for every running request
/// and prefills admitted prompts (FIFO) while the step's token budget, the sequence limit and
/// the KV capacity (prompt + output tokens reserved at admission) allow. Runs on the shared
/// engine as an `InstanceServer`.
#[allow(clippy::too_many_arguments)]
fn serve_instance(
    scenario: &ExpertWeaveScenario,
    cost: &mut dyn EwStepCost,
    instance: &InstancePlan,
    instance_idx: usize,
    requests: &[Request],
    mine: &[usize],
    latencies: &mut Latencies,
    sink: &mut dyn RecordSink,
) -> InstanceOutcome {
    let mut server = InstanceServer {
        scenario,
        cost,
        instance,
        instance_idx,
        requests,
        mine,
        latencies,
        sink,
        outcome: InstanceOutcome::default(),
        waiting: VecDeque::new(),
        running: Vec::new(),
        in_flight: None,
        next: 0,
        kv_used: 0,
    };
    engine::run(&mut server);
    server.outcome
}

/// What happens to one serving instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// An idle instance wakes up for the next arrival.
    Arrival,
    /// The step in execution finishes.
    StepComplete,
}

/// One instance's continuous-batching state as an engine `Model`.
struct InstanceServer<'a> {
    scenario: &'a ExpertWeaveScenario,
    cost: &'a mut dyn EwStepCost,
    instance: &'a InstancePlan,
    instance_idx: usize,
    requests: &'a [Request],
    /// Indices (into `requests`) of this instance's requests, in arrival order.
    mine: &'a [usize],
    latencies: &'a mut Latencies,
    sink: &'a mut dyn RecordSink,
    outcome: InstanceOutcome,
    waiting: VecDeque<usize>,
    running: Vec<Running>,
    /// The prompts prefilled by the step in execution.
    in_flight: Option<Vec<usize>>,
    next: usize,
    kv_used: u64,
}

impl InstanceServer<'_> {
    /// Admits what waits and starts the next step, or sleeps until the next arrival.
    fn start_step(&mut self, now: u64, events: &mut EventQueue<Event>) {
        let (requests, mine) = (self.requests, self.mine);
        while self.next < mine.len() && requests[mine[self.next]].arrival_ns <= now {
            self.waiting.push_back(mine[self.next]);
            self.next += 1;
        }
        let limits = &self.scenario.serving;
        let kv_capacity = self.instance.kv.kv_tokens;
        let mut prefill: Vec<usize> = Vec::new();
        let mut prefill_tokens = 0;
        while let Some(&candidate) = self.waiting.front() {
            let r = &requests[candidate];
            let need = r.prompt_tokens + r.output_tokens;
            if need > kv_capacity {
                self.waiting.pop_front();
                self.outcome.rejected += 1;
                continue;
            }
            let seqs = (self.running.len() + prefill.len()) as u64;
            let budget = limits
                .max_batch_tokens
                .saturating_sub(self.running.len() as u64);
            let fits_budget = prefill.is_empty() && self.running.is_empty()
                || prefill_tokens + r.prompt_tokens <= budget;
            if self.kv_used + need > kv_capacity || seqs >= limits.max_num_seqs || !fits_budget {
                break;
            }
            self.waiting.pop_front();
            self.kv_used += need;
            prefill_tokens += r.prompt_tokens;
            prefill.push(candidate);
        }
        if prefill.is_empty() && self.running.is_empty() {
            // Idle: nothing waits (an idle instance admits any request that fits at all).
            if let Some(&index) = mine.get(self.next) {
                events.schedule(SimTime(requests[index].arrival_ns.max(now)), Event::Arrival);
            }
            return;
        }
        let mut tokens_by_adapter = vec![0u64; self.scenario.adapters.len()];
        let mut context = 0;
        let mut prefill_sq = 0.0;
        for &index in &prefill {
            let r = &requests[index];
            tokens_by_adapter[r.adapter] += r.prompt_tokens;
            prefill_sq += (r.prompt_tokens * r.prompt_tokens) as f64;
        }
        for run in &self.running {
            let r = &requests[run.request];
            tokens_by_adapter[r.adapter] += 1;
            context += r.prompt_tokens + run.generated;
        }
        let seconds = self.cost.seconds(&EwStepWork {
            instance: self.instance,
            tokens_by_adapter: &tokens_by_adapter,
            context_tokens: context,
            prefill_sq,
            sequences: (self.running.len() + prefill.len()) as u64,
        });
        let duration = (seconds * 1e9).round().max(1.0) as u64;
        self.in_flight = Some(prefill);
        events.schedule(SimTime(now + duration), Event::StepComplete);
    }

    /// The step in execution ends at `now`: one token for every running request, the first for
    /// every prefilled prompt.
    fn complete_step(&mut self, now: u64) {
        let prefill = self
            .in_flight
            .take()
            .expect("a step completion has a step in flight");
        let requests = self.requests;
        self.outcome.steps += 1;
        let mut still = Vec::with_capacity(self.running.len() + prefill.len());
        for mut run in std::mem::take(&mut self.running) {
            let r = &requests[run.request];
            run.generated += 1;
            self.outcome.output_tokens += 1;
            if run.generated >= r.output_tokens {
                let per_token = (now - run.first_token_ns) / (r.output_tokens - 1).max(1);
                self.latencies.tpot.record(per_token);
                self.outcome.completed += 1;
                record(
                    self.sink,
                    self.scenario,
                    self.instance_idx,
                    run.request,
                    r,
                    run.first_token_ns,
                    now,
                );
                self.kv_used -= r.prompt_tokens + r.output_tokens;
            } else {
                still.push(run);
            }
        }
        for index in prefill {
            let r = &requests[index];
            self.latencies.ttft.record(now - r.arrival_ns);
            self.outcome.prompt_tokens += r.prompt_tokens;
            self.outcome.output_tokens += 1;
            if r.output_tokens <= 1 {
                self.outcome.completed += 1;
                record(
                    self.sink,
                    self.scenario,
                    self.instance_idx,
                    index,
                    r,
                    now,
                    now,
                );
                self.kv_used -= r.prompt_tokens + r.output_tokens;
            } else {
                still.push(Running {
                    request: index,
                    generated: 1,
                    first_token_ns: now,
                });
            }
        }
        self.running = still;
        self.outcome.end_ns = now;
    }
}

impl Model for InstanceServer<'_> {
    type Event = Event;
    fn start(&mut self, events: &mut EventQueue<Event>) {
        self.start_step(0, events);
    }
    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        if event == Event::StepComplete {
            self.complete_step(now.0);
        }
        self.start_step(now.0, events);
    }
}

/// The ExpertWeave columns of the per-request CSV, after the common ones (`sim::records`).
pub const CSV_COLUMNS: &[&str] = &["adapter", "instance"];

fn record(
    sink: &mut dyn RecordSink,
    scenario: &ExpertWeaveScenario,
    instance_idx: usize,
    id: usize,
    r: &Request,
    first_token_ns: u64,
    finish_ns: u64,
) {
    sink.record(&RequestRecord {
        id: id as u64,
        arrival: SimTime(r.arrival_ns),
        first_token: Some(SimTime(first_token_ns)),
        finish: SimTime(finish_ns),
        prompt_tokens: r.prompt_tokens,
        output_tokens: r.output_tokens,
        extra: &[
            Extra::Text(&scenario.adapters[r.adapter].name),
            Extra::Count(instance_idx as u64),
        ],
    });
}

/// Runs `scenario` for `seed` with the adapter-memory manager `memory`: plans the memory, and
/// unless some instance is out of memory, serves the requests, each step priced by the measured
/// profile when `[cost] profile` names one, by the roofline otherwise. Scalars follow `METRICS`.
pub fn run(scenario: &ExpertWeaveScenario, seed: u64, memory: &mut dyn AdapterMemory) -> RunOutput {
    run_recorded(scenario, seed, memory, &mut DiscardRecords)
}

/// [`run`], streaming each served request's record to `sink`.
pub fn run_recorded(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    memory: &mut dyn AdapterMemory,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    match super::profile_cost::ProfileStepCost::new(scenario) {
        Some(mut profiled) => run_on(scenario, seed, memory, &mut profiled, sink),
        None => run_on(
            scenario,
            seed,
            memory,
            &mut RooflineStepCost::new(scenario),
            sink,
        ),
    }
}

/// [`run`] with step times from `cost` (the kernels in live mode); admission, batching and
/// memory planning are the same code.
pub fn run_on(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    memory: &mut dyn AdapterMemory,
    cost: &mut dyn EwStepCost,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    let plan = match memory.plan(&scenario.shape, &scenario.device, &scenario.adapters) {
        Ok(plan) => plan,
        Err(error) => {
            // A run that could not be planned reports no numbers (NaN, `null` in results), only
            // its reason.
            return RunOutput {
                scalars: super::METRICS
                    .iter()
                    .map(|m| (m.name.to_string(), f64::NAN))
                    .collect(),
                details: json!({ "error": error.to_string(), "manager": memory.kind() }),
            };
        }
    };
    let requests = generate_requests(scenario, seed);
    let mut outcomes = Vec::new();
    let mut latencies = Latencies::default();
    if !plan.report.out_of_memory {
        for (instance_idx, instance) in plan.instances.iter().enumerate() {
            let mine: Vec<usize> = requests
                .iter()
                .enumerate()
                .filter(|(_, r)| instance.adapters.contains(&r.adapter))
                .map(|(i, _)| i)
                .collect();
            outcomes.push(serve_instance(
                scenario,
                cost,
                instance,
                instance_idx,
                &requests,
                &mine,
                &mut latencies,
                sink,
            ));
        }
    }
    summarize(
        scenario,
        memory.kind(),
        &plan,
        &requests,
        &outcomes,
        &latencies,
    )
}

fn summarize(
    scenario: &ExpertWeaveScenario,
    kind: &str,
    plan: &MemoryPlan,
    requests: &[Request],
    outcomes: &[InstanceOutcome],
    latencies: &Latencies,
) -> RunOutput {
    let (ttft, tpot) = (&latencies.ttft, &latencies.tpot);
    let (mut prompt, mut output, mut completed, mut rejected, mut end) = (0, 0, 0, 0, 0);
    for outcome in outcomes {
        prompt += outcome.prompt_tokens;
        output += outcome.output_tokens;
        completed += outcome.completed;
        rejected += outcome.rejected;
        end = end.max(outcome.end_ns);
    }
    let seconds = end as f64 * 1e-9;
    let per_second = |count: u64| {
        if end == 0 {
            0.0
        } else {
            count as f64 / seconds
        }
    };
    let r = &plan.report;
    let gib = |bytes: u64| bytes as f64 / GIB as f64;
    let values = super::ExpertWeaveScalars {
        weights_gib: gib(r.weight_bytes),
        adapter_memory_gib: gib(r.adapter_allocated_bytes),
        padding_waste_gib: gib(r.padding_waste_bytes),
        fragmentation_factor: r.fragmentation_factor,
        sparsity_factor: r.sparsity_factor,
        kv_capacity_tokens: r.kv_capacity_tokens as f64,
        out_of_memory: if r.out_of_memory { 1.0 } else { 0.0 },
        // No request served (out of memory, or none completed): no latency, not 0 ms.
        ttft_mean_ms: if ttft.count() == 0 {
            f64::NAN
        } else {
            ttft.mean_ms()
        },
        ttft_p99_ms: if ttft.count() == 0 {
            f64::NAN
        } else {
            ttft.quantile_ms(0.99)
        },
        tpot_mean_ms: if tpot.count() == 0 {
            f64::NAN
        } else {
            tpot.mean_ms()
        },
        prefill_throughput_tps: per_second(prompt),
        decode_throughput_tps: per_second(output),
        requests_completed: completed as f64,
        requests_rejected: rejected as f64,
    };
    let scalars = crate::metrics::scalars(&super::METRIC_TABLE, &values);
    let per_adapter: Vec<u64> = (0..scenario.adapters.len())
        .map(|a| requests.iter().filter(|r| r.adapter == a).count() as u64)
        .collect();
    let details = json!({
        "manager": kind,
        "adapters": scenario.adapters.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
        "shares": scenario.shares,
        "requests_per_adapter": per_adapter,
        "memory": r,
        "instances": plan.instances,
        "steps": outcomes.iter().map(|o| o.steps).collect::<Vec<_>>(),
        "cost_source": match &scenario.profile {
            Some(p) => format!("measured profile ({})", p.device),
            None => "analytic roofline (no kernel profile)".into(),
        },
    });
    RunOutput { scalars, details }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::shape::MlaMoeShape;
    use crate::expertweave::EsftAdapter;
    use crate::expertweave::config::ExpertWeaveConfig;
    use crate::expertweave::memory::{AdapterMemoryError, MemoryReport};
    use crate::expertweave::model::{DeviceMemory, KvCapacity};
    use std::path::Path;

    /// A stand-in manager: one shared instance with a fixed KV capacity.
    struct FixedKv {
        kv_tokens: u64,
        reroutes: bool,
    }

    impl AdapterMemory for FixedKv {
        fn kind(&self) -> &'static str {
            "fixed"
        }
        fn plan(
            &mut self,
            shape: &MlaMoeShape,
            device: &DeviceMemory,
            adapters: &[EsftAdapter],
        ) -> Result<MemoryPlan, AdapterMemoryError> {
            let kv = KvCapacity {
                kv_bytes: self.kv_tokens * shape.kv_bytes_per_token(),
                kv_tokens: self.kv_tokens,
                out_of_memory: self.kv_tokens == 0,
            };
            Ok(MemoryPlan {
                instances: vec![InstancePlan {
                    adapters: (0..adapters.len()).collect(),
                    reroutes: self.reroutes,
                    adapter_experts: self.reroutes,
                    n_devices: device.n_devices,
                    weight_bytes: shape.weight_bytes(),
                    kv,
                }],
                report: MemoryReport {
                    n_adapters: adapters.len(),
                    weight_bytes: shape.weight_bytes(),
                    base_weight_bytes: shape.weight_bytes(),
                    adapter_expert_bytes: 0,
                    adapter_allocated_bytes: 0,
                    padding_waste_bytes: 0,
                    fragmentation_factor: 1.0,
                    sparsity_factor: 0.0,
                    kv_bytes: kv.kv_bytes,
                    kv_capacity_tokens: kv.kv_tokens,
                    out_of_memory: kv.out_of_memory,
                    mapped_pages: 0,
                    shared_pages: 0,
                },
            })
        }
    }

    fn scenario(rate: f64, alpha: f64) -> ExpertWeaveScenario {
        let text = format!(
            r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
count = 5
[memory]
kind = "virtual_weight_tensor"
[workload]
rate_rps = {rate}
alpha = {alpha}
horizon_s = 20
prompt_tokens = 256
output_tokens = 32
length_spread = 0.5
"#
        );
        toml::from_str::<ExpertWeaveConfig>(&text)
            .unwrap()
            .validate(Path::new("."))
            .unwrap()
    }

    #[test]
    fn arrivals_follow_rate_and_shares() {
        let scenario = scenario(5.0, 0.3);
        let requests = generate_requests(&scenario, 1);
        // 100 expected; Poisson sd 10
        assert!((70..=130).contains(&requests.len()), "{}", requests.len());
        let first = requests.iter().filter(|r| r.adapter == 0).count();
        assert!(first as f64 > 0.4 * requests.len() as f64);
        assert!(
            requests
                .windows(2)
                .all(|w| w[0].arrival_ns <= w[1].arrival_ns)
        );
        assert_eq!(requests, generate_requests(&scenario, 1));
        assert_ne!(requests, generate_requests(&scenario, 2));
    }

    #[test]
    fn every_request_completes_and_runs_are_deterministic() {
        let scenario = scenario(2.0, 1.0);
        let mut manager = FixedKv {
            kv_tokens: 1_000_000,
            reroutes: true,
        };
        let a = run(&scenario, 7, &mut manager);
        let b = run(&scenario, 7, &mut manager);
        assert_eq!(a, b);
        let n = generate_requests(&scenario, 7).len() as f64;
        assert_eq!(a.scalar("requests_completed"), Some(n));
        assert!(a.scalar("ttft_mean_ms").unwrap() > 0.0);
        assert!(a.scalar("tpot_mean_ms").unwrap() > 0.0);
        assert_eq!(a.scalars.len(), crate::expertweave::METRICS.len());
    }

    #[test]
    fn small_kv_rejects_long_requests_and_queues_the_rest() {
        let scenario = scenario(5.0, 1.0);
        let mut roomy = FixedKv {
            kv_tokens: 1_000_000,
            reroutes: true,
        };
        let mut tight = FixedKv {
            kv_tokens: 400,
            reroutes: true,
        };
        let roomy = run(&scenario, 3, &mut roomy);
        let tight = run(&scenario, 3, &mut tight);
        assert!(tight.scalar("requests_rejected").unwrap() > 0.0);
        assert!(tight.scalar("ttft_mean_ms").unwrap() > roomy.scalar("ttft_mean_ms").unwrap());
    }

    #[test]
    fn rerouting_and_adapter_experts_cost_time() {
        let scenario = scenario(3.0, 1.0);
        let base = run(
            &scenario,
            5,
            &mut FixedKv {
                kv_tokens: 1_000_000,
                reroutes: false,
            },
        );
        let weave = run(
            &scenario,
            5,
            &mut FixedKv {
                kv_tokens: 1_000_000,
                reroutes: true,
            },
        );
        assert!(weave.scalar("tpot_mean_ms").unwrap() > base.scalar("tpot_mean_ms").unwrap());
        let mut unfused = scenario.clone();
        unfused.cost.rerouting = Rerouting::Unfused;
        let slow = run(
            &unfused,
            5,
            &mut FixedKv {
                kv_tokens: 1_000_000,
                reroutes: true,
            },
        );
        assert!(slow.scalar("tpot_mean_ms").unwrap() > weave.scalar("tpot_mean_ms").unwrap());
    }

    #[test]
    fn out_of_memory_is_a_result() {
        let scenario = scenario(2.0, 1.0);
        let out = run(
            &scenario,
            1,
            &mut FixedKv {
                kv_tokens: 0,
                reroutes: true,
            },
        );
        assert_eq!(out.scalar("out_of_memory"), Some(1.0));
        assert_eq!(out.scalar("requests_completed"), Some(0.0));
        // It served nothing, so it has no latency (not 0 ms).
        for metric in ["ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms"] {
            assert!(out.scalar(metric).unwrap().is_nan(), "{metric}");
        }
    }

    #[test]
    fn touched_experts_grow_with_tokens_and_adapter_copies() {
        let scenario = scenario(1.0, 1.0);
        let popularity = Popularity::new(&scenario);
        let touched = |tokens: &[u64], use_adapters: bool| {
            let mut sum = 0.0;
            popularity.expected_loads(0, tokens, 6, use_adapters, |read, _| sum += read);
            sum
        };
        let few = touched(&[4, 0, 0, 0, 0], true);
        let many = touched(&[400, 0, 0, 0, 0], true);
        assert!(few < many && many <= 64.0 + 12.0);
        let mixed_base = touched(&[50, 50, 50, 50, 50], false);
        let mixed_weave = touched(&[50, 50, 50, 50, 50], true);
        assert!(mixed_weave > mixed_base);
        assert!(mixed_base <= 64.0);
    }
}
