//! One ExpertWeave serving run: the memory manager plans the instances, requests stream from the
//! scenario's arrival process (`sim::arrivals`) until the horizon (offline: a batch at t = 0),
//! each drawing its adapter from the power-law shares and its lengths where the arrivals carry
//! none, and go to the instance whose plan serves their adapter. Each instance is one `serving::Replica` with the
//! reserve-full admission rule (`replica_config`), and each of its steps is priced through the
//! serving layer's `StepCost` seam (`RooflineStepCost`, or `ProfileStepCost` when `[cost]
//! profile` names a measured profile; a live wrapper in live mode).
//!
//! Engine events (`Event`): `Arrival` (the next request of the arrival process) and `StepEnd`
//! (an instance's step finishes: its tokens are emitted, its finished requests recorded, and its
//! next step scheduled).

use serde_json::json;

use super::config::ExpertWeaveScenario;
use super::profile_cost::ProfileStepCost;
use super::step_cost::RooflineStepCost;
use crate::arrivals::{Arrival, ArrivalProcess};
use crate::engine::{self, Model};
use crate::event_queue::EventQueue;
use crate::metrics::RunOutput;
use crate::policies::memory::device::GIB;
use crate::policies::memory::{AdapterMemory, InstancePlan, MemoryPlan};
use crate::recorder::RequestLatencies;
use crate::records::{DiscardRecords, Extra, RecordSink, RequestRecord};
use crate::rng::{SimRng, stream};
use crate::serving::{
    Admission, AdmitHook, Batching, KvConfig, QueuePolicy, QueuedRequest, Replica, ReplicaConfig,
    Seq, StepCost,
};
use crate::serving_family::popularity::Popularity;
use crate::time::SimTime;

/// The replica an ExpertWeave instance is: continuous batching under vLLM's
/// `max_num_seqs` and `max_num_batched_tokens` (`[serving]`), whole prompts (no chunked
/// prefill), and a KV cache of the instance's capacity counted in tokens from which each
/// admission reserves its prompt and its whole output (`ReserveFull`, docs/serving.md).
pub fn replica_config(scenario: &ExpertWeaveScenario, instance: &InstancePlan) -> ReplicaConfig {
    ReplicaConfig {
        max_num_seqs: scenario.serving.max_num_seqs as usize,
        max_num_batched_tokens: Some(scenario.serving.max_batch_tokens),
        chunked_prefill: false,
        kv: KvConfig {
            block_size: 1,
            blocks: instance.kv.kv_tokens,
            watermark_blocks: 0,
        },
        admission: Admission::ReserveFull,
        batching: Batching::Continuous,
    }
}

/// The ExpertWeave columns of the per-request CSV, after the common ones (`sim::records`).
pub const CSV_COLUMNS: &[&str] = &["adapter", "instance"];

/// Where each step's price comes from: `"measured"` when `[cost] profile` names a measured
/// profile, `"analytic-roofline"` otherwise.
pub fn cost_source(scenario: &ExpertWeaveScenario) -> &'static str {
    match scenario.profile {
        Some(_) => "measured",
        None => "analytic-roofline",
    }
}

/// Runs `scenario` for `seed` with the adapter-memory manager `memory` and the queue policy
/// `queue` (FCFS in every ExpertWeave run): plans the memory and, unless some instance is out
/// of memory, serves the requests, each step priced by the measured profile when `[cost]
/// profile` names one, by the roofline otherwise. Scalars follow `METRICS`.
pub fn run(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    memory: &mut dyn AdapterMemory,
    queue: &mut dyn QueuePolicy,
) -> RunOutput {
    run_recorded(scenario, seed, memory, queue, &mut DiscardRecords)
}

/// [`run`], streaming each served request's record to `sink`.
pub fn run_recorded(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    memory: &mut dyn AdapterMemory,
    queue: &mut dyn QueuePolicy,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    let plan = match plan(scenario, memory) {
        Ok(plan) => plan,
        Err(output) => return output,
    };
    let popularity = scenario.popularity();
    let mut costs = simulated_costs(scenario, &plan, &popularity);
    serve(
        scenario,
        seed,
        memory.kind(),
        &plan,
        queue,
        &mut costs,
        sink,
    )
}

/// The memory plan of `scenario` under `memory`, or the output of a run that could not be
/// planned: no numbers (NaN, `null` in results), only its reason.
pub fn plan(
    scenario: &ExpertWeaveScenario,
    memory: &mut dyn AdapterMemory,
) -> Result<MemoryPlan, RunOutput> {
    memory
        .plan(&scenario.shape, &scenario.device, &scenario.adapters)
        .map_err(|error| RunOutput {
            scalars: super::METRICS
                .iter()
                .map(|m| (m.name.to_string(), f64::NAN))
                .collect(),
            details: json!({ "error": error.to_string(), "manager": memory.kind() }),
        })
}

/// Each instance's simulated step cost: the measured profile's when `[cost] profile` names one,
/// the roofline's otherwise.
pub fn simulated_costs<'a>(
    scenario: &'a ExpertWeaveScenario,
    plan: &'a MemoryPlan,
    popularity: &'a Popularity,
) -> Vec<Box<dyn StepCost + 'a>> {
    plan.instances
        .iter()
        .map(
            |instance| match ProfileStepCost::new(scenario, instance, popularity) {
                Some(profiled) => Box::new(profiled) as Box<dyn StepCost + 'a>,
                None => Box::new(RooflineStepCost::new(scenario, instance, popularity)),
            },
        )
        .collect()
}

/// Serves `scenario`'s requests for `seed` on `plan`'s instances, instance `i`'s steps priced
/// by `costs[i]` (the simulated costs, or live wrappers of them); admission, batching and
/// routing are the same code either way. Out of memory, nothing is served.
pub fn serve(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    memory_kind: &str,
    plan: &MemoryPlan,
    queue: &mut dyn QueuePolicy,
    costs: &mut [Box<dyn StepCost + '_>],
    sink: &mut dyn RecordSink,
) -> RunOutput {
    assert_eq!(
        costs.len(),
        plan.instances.len(),
        "one step cost per instance"
    );
    let mut server = None;
    if !plan.report.out_of_memory {
        queue.reset(plan.instances.len());
        let mut s = Server::new(scenario, seed, plan, queue, costs, sink);
        engine::run(&mut s);
        server = Some(s.finish());
    }
    summarize(scenario, memory_kind, plan, server.as_ref())
}

/// What happens in an ExpertWeave run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// The arrival process's next request reaches the system.
    Arrival(Arrival),
    /// The step in flight on this instance finishes.
    StepEnd(usize),
}

/// An accepted request's adapter and true output length (8 bytes, kept by id for the run).
#[derive(Clone, Copy)]
struct Pending {
    adapter: u32,
    output: u32,
}

/// The family's side of an admission: the request's output length and adapter, by its id.
struct Admit<'x>(&'x [Pending]);

impl AdmitHook for Admit<'_> {
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32 {
        self.0[request.id as usize].output
    }
    fn adapter(&mut self, request: &QueuedRequest) -> Option<u32> {
        Some(self.0[request.id as usize].adapter)
    }
    fn admitted(&mut self, _now: SimTime, _request: &QueuedRequest, _output: u32) {}
}

/// What a finished run hands to the summary.
struct Served {
    /// The requests' latencies, merged from the instances' replicas.
    latencies: RequestLatencies,
    requests_per_adapter: Vec<u64>,
    rejected: u64,
    completed: u64,
    /// When the last step ended (0: none ran).
    end: SimTime,
    /// Time the instances' replicas spent in steps, summed, ns.
    busy_ns: u64,
    replicas: Vec<serde_json::Value>,
}

/// The engine model: arrivals into the instances' replicas, steps priced by their costs.
struct Server<'a, 'c> {
    scenario: &'a ExpertWeaveScenario,
    arrivals: Box<dyn ArrivalProcess>,
    horizon: SimTime,
    adapter_rng: SimRng,
    length_rng: SimRng,
    /// The instance serving each adapter.
    instance_of: Vec<usize>,
    /// Each instance's KV capacity in tokens; a request needing more is rejected on arrival.
    capacity: Vec<u64>,
    replicas: Vec<Replica>,
    queue: &'a mut dyn QueuePolicy,
    costs: &'a mut [Box<dyn StepCost + 'c>],
    /// Every accepted request's adapter and output length, indexed by its id (ids count up from
    /// 0): a vector, not a map, because the hot path looks each one up at admission.
    requests: Vec<Pending>,
    /// Instances that received a request at the current instant, reused.
    woken: Vec<usize>,
    finished: Vec<Seq>,
    served: Served,
    sink: &'a mut dyn RecordSink,
}

impl<'a, 'c> Server<'a, 'c> {
    fn new(
        scenario: &'a ExpertWeaveScenario,
        seed: u64,
        plan: &MemoryPlan,
        queue: &'a mut dyn QueuePolicy,
        costs: &'a mut [Box<dyn StepCost + 'c>],
        sink: &'a mut dyn RecordSink,
    ) -> Self {
        let instance_of = (0..scenario.adapters.len())
            .map(|a| {
                plan.instances
                    .iter()
                    .position(|i| i.adapters.contains(&a))
                    .expect("the memory plan serves every adapter")
            })
            .collect();
        Server {
            scenario,
            arrivals: scenario.arrival.process(
                scenario.max_arrivals,
                1,
                stream(seed, "expertweave/arrivals"),
            ),
            horizon: scenario.horizon,
            adapter_rng: stream(seed, "expertweave/adapters"),
            length_rng: stream(seed, "expertweave/lengths"),
            instance_of,
            capacity: plan.instances.iter().map(|i| i.kv.kv_tokens).collect(),
            replicas: plan
                .instances
                .iter()
                .map(|i| Replica::new(replica_config(scenario, i)))
                .collect(),
            queue,
            costs,
            requests: Vec::new(),
            woken: Vec::new(),
            finished: Vec::new(),
            served: Served {
                latencies: RequestLatencies::default(),
                requests_per_adapter: vec![0; scenario.adapters.len()],
                rejected: 0,
                completed: 0,
                end: SimTime::ZERO,
                busy_ns: 0,
                replicas: Vec::new(),
            },
            sink,
        }
    }

    /// The next arrival before the horizon, if any.
    fn next_arrival(&mut self) -> Option<Arrival> {
        self.arrivals
            .next_arrival()
            .filter(|arrival| arrival.time < self.horizon)
    }

    /// A request arrives: its adapter (one draw), then its lengths where the arrival carries
    /// none (prompt, then output); it joins its instance's queue, or is rejected when prompt +
    /// output exceed the instance's whole KV capacity. Returns the instance.
    fn submit(&mut self, now: SimTime, arrival: Arrival) -> Option<usize> {
        let s = self.scenario;
        let adapter = s.adapter_draw.sample(&mut self.adapter_rng);
        self.served.requests_per_adapter[adapter] += 1;
        let mut length = |given: Option<u32>, lengths: &crate::distributions::Uniform| {
            given.unwrap_or_else(|| (lengths.sample(&mut self.length_rng).round() as u32).max(1))
        };
        let prompt = length(arrival.prompt_tokens, &s.prompt_lengths);
        let output = length(arrival.output_tokens, &s.output_lengths);
        let instance = self.instance_of[adapter];
        // What the replica reserves: at least one prompt and one output token.
        if u64::from(prompt.max(1)) + u64::from(output.max(1)) > self.capacity[instance] {
            self.served.rejected += 1;
            return None;
        }
        let id = self.requests.len() as u64;
        self.requests.push(Pending {
            adapter: adapter as u32,
            output,
        });
        let request = QueuedRequest {
            id,
            workflow: id,
            stage: 0,
            submitted: now,
            workflow_arrival: now,
            enqueued_iteration: self.replicas[instance].iteration(),
            prompt_tokens: prompt,
            predicted_stage_tokens: 0.0,
            predicted_total_tokens: 0.0,
            attained_service: 0,
            rank_noise: 0.0,
            topic: 0,
        };
        self.replicas[instance].submit(now, request, &mut *self.queue, instance);
        Some(instance)
    }

    /// Schedules instance `i`'s next step and prices it, or leaves the instance idle.
    fn start_step(&mut self, now: SimTime, i: usize, events: &mut EventQueue<Event>) {
        let mut hook = Admit(&self.requests);
        let Some(work) = self.replicas[i].schedule(now, &mut *self.queue, i, &mut hook) else {
            return;
        };
        let time = self.costs[i].price(&work);
        self.replicas[i].begin_step(time.duration);
        events.schedule(now + time.duration, Event::StepEnd(i));
    }

    /// Instance `i`'s step ends: its replica records the finished requests' latencies, each
    /// gets its per-request record, and the next step starts.
    fn step_end(&mut self, now: SimTime, i: usize, events: &mut EventQueue<Event>) {
        let replica = &mut self.replicas[i];
        let mut finished = std::mem::take(&mut self.finished);
        replica.complete_step(now, &mut finished);
        for done in finished.drain(..) {
            let first_token = done.first_token();
            let adapter = done.adapter().expect("every request runs with its adapter");
            self.sink.record(&RequestRecord {
                id: done.request.id,
                arrival: done.request.submitted,
                first_token: Some(first_token),
                finish: now,
                prompt_tokens: u64::from(done.request.prompt_tokens),
                output_tokens: u64::from(done.output),
                extra: &[
                    Extra::Text(&self.scenario.adapters[adapter as usize].name),
                    Extra::Count(i as u64),
                ],
            });
        }
        self.finished = finished;
        self.served.end = now;
        self.start_step(now, i, events);
    }

    /// The run's totals, once the engine has drained.
    fn finish(mut self) -> Served {
        for replica in &self.replicas {
            let stats = replica.stats();
            self.served.completed += stats.completed;
            self.served.latencies.merge(&stats.latencies);
            self.served.busy_ns += stats.busy_ns;
            let end = self.served.end.max(SimTime(1));
            self.served.replicas.push(json!({
                "steps": stats.steps,
                "busy_ns": stats.busy_ns,
                "mean_batch_size": stats.batch_sum as f64 / stats.steps.max(1) as f64,
                "admitted": stats.admitted,
                "completed": stats.completed,
                "peak_kv_tokens": replica.kv().peak(),
                "mean_in_system": stats.mean_in_system(end),
                "mean_sojourn_ns": stats.mean_sojourn_ns(),
            }));
        }
        let admitted: u64 = self.replicas.iter().map(|r| r.stats().admitted).sum();
        assert_eq!(
            admitted,
            self.requests.len() as u64,
            "every accepted request was admitted"
        );
        self.served
    }
}

impl Model for Server<'_, '_> {
    type Event = Event;

    fn start(&mut self, events: &mut EventQueue<Event>) {
        if let Some(first) = self.next_arrival() {
            events.schedule(first.time, Event::Arrival(first));
        }
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        match event {
            Event::Arrival(arrival) => {
                // Requests arriving at the same instant join before any step is decided.
                let mut woken = std::mem::take(&mut self.woken);
                let mut next = Some(arrival);
                while let Some(arrival) = next.take() {
                    if let Some(i) = self.submit(now, arrival)
                        && !woken.contains(&i)
                    {
                        woken.push(i);
                    }
                    match self.next_arrival() {
                        Some(a) if a.time <= now => next = Some(a),
                        Some(a) => events.schedule(a.time, Event::Arrival(a)),
                        None => {}
                    }
                }
                for &i in &woken {
                    if !self.replicas[i].is_busy() {
                        self.start_step(now, i, events);
                    }
                }
                woken.clear();
                self.woken = woken;
            }
            Event::StepEnd(i) => self.step_end(now, i, events),
        }
    }
}

fn per_second(tokens: u64, ns: u64) -> f64 {
    match ns {
        0 => f64::NAN,
        ns => tokens as f64 / (ns as f64 * 1e-9),
    }
}

fn summarize(
    scenario: &ExpertWeaveScenario,
    kind: &str,
    plan: &MemoryPlan,
    served: Option<&Served>,
) -> RunOutput {
    let r = &plan.report;
    let gib = |bytes: u64| bytes as f64 / GIB as f64;
    // A run that served nothing (out of memory, or no request completed) has no latency and no
    // throughput: NaN (`null` in results), not 0.
    let (requests, prefill_tps, decode_tps, utilization, completed, rejected) = match served {
        Some(s) => (
            s.latencies.summary(),
            s.latencies.prefill_throughput_tps(),
            s.latencies.decode_throughput_tps(),
            // Busy time over (instances x the run's end): the share of time they step.
            per_second(s.busy_ns, s.end.0) * 1e-9 / s.replicas.len().max(1) as f64,
            s.completed as f64,
            s.rejected as f64,
        ),
        None => (
            RequestLatencies::default().summary(),
            f64::NAN,
            f64::NAN,
            f64::NAN,
            0.0,
            0.0,
        ),
    };
    let values = super::ExpertWeaveScalars {
        weights_gib: gib(r.weight_bytes),
        adapter_memory_gib: gib(r.adapter_allocated_bytes),
        padding_waste_gib: gib(r.padding_waste_bytes),
        fragmentation_factor: r.fragmentation_factor,
        sparsity_factor: r.sparsity_factor,
        kv_capacity_tokens: r.kv_capacity_tokens as f64,
        out_of_memory: if r.out_of_memory { 1.0 } else { 0.0 },
        requests,
        prefill_throughput_tps: prefill_tps,
        decode_throughput_tps: decode_tps,
        utilization,
        requests_completed: completed,
        requests_rejected: rejected,
    };
    let scalars = crate::metrics::scalars(&super::METRIC_TABLE, &values);
    let mut details = json!({
        "manager": kind,
        "adapters": scenario.adapters.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
        "shares": scenario.shares,
        "requests_per_adapter": served.map(|s| &s.requests_per_adapter),
        "memory": r,
        "instances": plan.instances,
        "replicas": served.map(|s| &s.replicas),
        "arrival_trace": scenario
            .arrival
            .trace_stats(scenario.max_arrivals)
            .map(|(_, stats)| stats),
        "cost_source": cost_source(scenario),
    });
    if r.out_of_memory {
        // No latency number, but the reason (docs/metrics.md).
        details["failed"] = json!(
            "out of memory: the weights and adapter memory leave no room for a KV cache on some \
             instance (details.memory)"
        );
    }
    RunOutput { scalars, details }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::Trace;
    use crate::cost::shape::MlaMoeShape;
    use crate::expertweave::config::{ExpertWeaveConfig, Rerouting};
    use crate::load_cache::LoadCache;
    use crate::policies::memory::adapters::EsftAdapter;
    use crate::policies::memory::device::{DeviceMemory, KvCapacity};
    use crate::policies::memory::{AdapterMemoryError, MemoryReport};
    use crate::serving::tests::Fifo;
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

    fn roomy() -> FixedKv {
        FixedKv {
            kv_tokens: 1_000_000,
            reroutes: true,
        }
    }

    fn load(text: &str, base_dir: &Path) -> ExpertWeaveScenario {
        toml::from_str::<ExpertWeaveConfig>(text)
            .unwrap()
            .validate(base_dir, &mut LoadCache::default())
            .unwrap()
    }

    fn scenario(rate: f64, alpha: f64) -> ExpertWeaveScenario {
        load(
            &format!(
                r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
count = 5
[memory]
kind = "virtual_weight_tensor"
[arrival]
pattern = "poisson"
rate_per_s = {rate}
[workload]
alpha = {alpha}
horizon_s = 20
prompt_tokens = 256
output_tokens = 32
length_spread = 0.5
"#
            ),
            Path::new("."),
        )
    }

    /// Every served request's (id, arrival, first token, finish, prompt, output, adapter).
    #[derive(Default)]
    struct Served(Vec<(u64, SimTime, SimTime, SimTime, u64, u64, String)>);
    impl RecordSink for Served {
        fn record(&mut self, r: &RequestRecord<'_>) {
            let Extra::Text(adapter) = r.extra[0] else {
                panic!("the first ExpertWeave column is the adapter")
            };
            self.0.push((
                r.id,
                r.arrival,
                r.first_token.unwrap(),
                r.finish,
                r.prompt_tokens,
                r.output_tokens,
                adapter.to_string(),
            ));
        }
    }

    fn served(scenario: &ExpertWeaveScenario, seed: u64, memory: &mut FixedKv) -> Served {
        let mut records = Served::default();
        run_recorded(scenario, seed, memory, &mut Fifo::default(), &mut records);
        records.0.sort_unstable_by_key(|r| r.0);
        records
    }

    #[test]
    fn arrivals_follow_the_rate_the_horizon_and_the_shares() {
        // 5 req/s for 20 s: 100 expected (Poisson sd 10); alpha 0.3 over 5 adapters gives the
        // first adapter 1 / sum_{k=1..5} k^-(1/0.3 - 1) = 1 / 1.3382 = 0.747 of them (sd 0.04
        // over 100).
        let s = scenario(5.0, 0.3);
        let output = run(&s, 1, &mut roomy(), &mut Fifo::default());
        let per_adapter: Vec<u64> =
            serde_json::from_value(output.details["requests_per_adapter"].clone()).unwrap();
        let n: u64 = per_adapter.iter().sum();
        assert!((70..=130).contains(&n), "{n}");
        let expected = s.shares[0];
        assert!((0.745..0.749).contains(&expected), "{expected}");
        let first = per_adapter[0] as f64 / n as f64;
        assert!((first - expected).abs() < 0.15, "{first}");
        let records = served(&s, 1, &mut roomy());
        assert_eq!(records.0.len() as u64, n);
        let horizon = SimTime::from_secs_f64(20.0);
        assert!(records.0.iter().all(|r| r.1 < horizon));
        assert!(records.0.iter().all(|r| r.1 <= r.2 && r.2 <= r.3));
        // Lengths: uniform on mean x [0.5, 1.5].
        assert!(
            records
                .0
                .iter()
                .all(|r| (128..=384).contains(&r.4) && (16..=48).contains(&r.5))
        );
    }

    #[test]
    fn every_request_completes_and_runs_are_deterministic() {
        let s = scenario(2.0, 1.0);
        let a = run(&s, 7, &mut roomy(), &mut Fifo::default());
        let b = run(&s, 7, &mut roomy(), &mut Fifo::default());
        assert_eq!(a, b);
        assert_ne!(a, run(&s, 8, &mut roomy(), &mut Fifo::default()));
        let n: u64 = serde_json::from_value::<Vec<u64>>(a.details["requests_per_adapter"].clone())
            .unwrap()
            .iter()
            .sum();
        assert_eq!(a.scalar("requests_completed"), Some(n as f64));
        assert_eq!(a.scalar("requests_rejected"), Some(0.0));
        assert!(a.scalar("ttft_mean_ms").unwrap() > 0.0);
        assert!(a.scalar("tpot_mean_ms").unwrap() > 0.0);
        assert_eq!(a.scalars.len(), crate::expertweave::METRICS.len());
        assert_eq!(a.details["cost_source"], "analytic-roofline");
    }

    #[test]
    fn an_offline_batch_arrives_at_zero_and_decodes_together() {
        // Section 5.3's decode benchmark: 8 requests of 1,024 prompt tokens at t = 0, whose 8,192
        // prompt tokens fill one step: all share one prefill step, so all emit their first token
        // at the same instant and their last together, 127 decode steps later.
        let batch = |n: usize| {
            load(
                &format!(
                    r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
names = ["gate-math"]
[memory]
kind = "virtual_weight_tensor"
[arrival]
pattern = "offline"
[workload]
n_requests = {n}
prompt_tokens = 1024
output_tokens = 128
"#
                ),
                Path::new("."),
            )
        };
        let s = batch(8);
        let records = served(&s, 1, &mut roomy());
        assert_eq!(records.0.len(), 8);
        let (first, last) = (records.0[0].2, records.0[0].3);
        for r in &records.0 {
            assert_eq!((r.1, r.2, r.3), (SimTime::ZERO, first, last), "{r:?}");
            assert_eq!((r.4, r.5), (1024, 128));
        }
        let out = run(&s, 1, &mut roomy(), &mut Fifo::default());
        let tpot = out.scalar("tpot_p50_ms").unwrap();
        let expected = (last - first).0 as f64 * 1e-6 / 127.0;
        assert!(
            (tpot - expected).abs() <= expected * 1e-3,
            "{tpot} vs {expected}"
        );
        // One request alone decodes faster: its steps read fewer distinct experts.
        let alone = run(&batch(1), 1, &mut roomy(), &mut Fifo::default());
        assert!(alone.scalar("tpot_p50_ms").unwrap() < tpot);
    }

    #[test]
    fn a_lone_request_is_timed_by_its_steps() {
        // One request (one adapter, rate so low that a second one is unlikely within 1 s... the
        // horizon admits the first arrival only when it falls before it): its TTFT is its prefill
        // step and its TPOT the mean of its decode steps, each priced by the instance's cost.
        let s = load(
            r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
names = ["gate-math"]
[memory]
kind = "virtual_weight_tensor"
[arrival]
pattern = "trace"
trace = { path = "azure_conv_2023.csv", time_scale = 1.0 }
[workload]
horizon_s = 1
prompt_tokens = 1
output_tokens = 1
"#,
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/traces"),
        );
        // The trace's first row (t = 0, prompt 374, output 44) is the only one before 1 s.
        assert_eq!(s.max_arrivals, 1);
        let mut memory = roomy();
        let plan = plan(&s, &mut memory).unwrap();
        let popularity = s.popularity();
        let mut cost = RooflineStepCost::new(&s, &plan.instances[0], &popularity);
        // The same steps priced by hand through a replica of the same configuration.
        let mut replica = Replica::new(replica_config(&s, &plan.instances[0]));
        let mut fifo = Fifo::default();
        fifo.reset(1);
        let requests = [Pending {
            adapter: 0,
            output: 44,
        }];
        let request = QueuedRequest {
            id: 0,
            workflow: 0,
            stage: 0,
            submitted: SimTime::ZERO,
            workflow_arrival: SimTime::ZERO,
            enqueued_iteration: 0,
            prompt_tokens: 374,
            predicted_stage_tokens: 0.0,
            predicted_total_tokens: 0.0,
            attained_service: 0,
            rank_noise: 0.0,
            topic: 0,
        };
        replica.submit(SimTime::ZERO, request, &mut fifo, 0);
        let mut now = SimTime::ZERO;
        let mut steps = vec![];
        let mut done = vec![];
        while let Some(work) = replica.schedule(now, &mut fifo, 0, &mut Admit(&requests)) {
            let d = cost.price(&work).duration;
            steps.push(d);
            replica.begin_step(d);
            now += d;
            replica.complete_step(now, &mut done);
        }
        // One prefill step, then 43 decode steps.
        assert_eq!(steps.len(), 44);
        let output = run(&s, 1, &mut roomy(), &mut Fifo::default());
        let ttft_ms = steps[0].as_millis_f64();
        let tpot_ns = steps[1..].iter().map(|d| d.0).sum::<u64>() / 43;
        assert!((output.scalar("ttft_mean_ms").unwrap() - ttft_ms).abs() < 1e-3 * ttft_ms);
        let tpot_ms = output.scalar("tpot_mean_ms").unwrap();
        assert!((tpot_ms - tpot_ns as f64 * 1e-6).abs() < 1e-3 * tpot_ms);
        assert_eq!(output.scalar("requests_completed"), Some(1.0));
        // Alone from t = 0: no queueing, its end to end is the whole run, the instance always
        // busy.
        assert_eq!(output.scalar("queueing_p99_ms"), Some(0.0));
        let e2e_ms = output.scalar("e2e_mean_ms").unwrap();
        assert!((e2e_ms - now.as_millis_f64()).abs() < 1e-9 * e2e_ms);
        assert!((output.scalar("utilization").unwrap() - 1.0).abs() < 1e-12);
        // Each phase's tokens over its own time, not over the run: the prompt over the time to
        // the first token, the 43 tokens after it over the decode steps.
        let prefill = output.scalar("prefill_throughput_tps").unwrap();
        assert!((prefill - 374.0 / steps[0].as_secs_f64()).abs() < 1e-9 * prefill);
        let decode = output.scalar("decode_throughput_tps").unwrap();
        let decode_s = steps[1..].iter().map(|d| d.as_secs_f64()).sum::<f64>();
        assert!((decode - 43.0 / decode_s).abs() < 1e-9 * decode);
        assert!(prefill > 374.0 / now.as_secs_f64() && decode > 43.0 / now.as_secs_f64());
    }

    #[test]
    fn the_azure_traces_replay_their_rows() {
        // The committed Azure traces' first rows (scenarios/traces/), replayed at half speed:
        // each request arrives at its row's time x 0.5 with the row's lengths; the horizon of
        // 2.3 s keeps the rows at 0, 4.31 and 4.54 s (2.16 and 2.27 s replayed) of the
        // conversation trace and the first 12 of the code trace (the 12th at 1.40 s, replayed at
        // 0.70 s; the 13th at 29.48 s).
        let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/traces");
        for (file, rows, n) in [
            (
                "azure_conv_2023.csv",
                &[(0.0, 374, 44), (4.314579, 396, 109), (4.541877, 879, 55)][..],
                3,
            ),
            (
                "azure_code_2023.csv",
                &[(0.0, 4808, 10), (0.052, 3180, 8), (0.098189, 110, 27)][..],
                12,
            ),
        ] {
            let s = load(
                &format!(
                    r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
count = 3
[memory]
kind = "virtual_weight_tensor"
[arrival]
pattern = "trace"
trace = {{ path = "{file}", time_scale = 0.5 }}
[workload]
horizon_s = 2.3
prompt_tokens = 1
output_tokens = 1
"#
                ),
                &traces,
            );
            let trace = Trace::load(traces.join(file)).unwrap();
            let before = trace
                .rows()
                .iter()
                .take_while(|r| r.timestamp_s * 0.5 < 2.3)
                .count();
            assert_eq!((s.max_arrivals, before), (n, n), "{file}");
            let records = served(&s, 1, &mut roomy());
            assert_eq!(records.0.len(), n, "{file}");
            for (i, (record, &(t, prompt, output))) in records.0.iter().zip(rows).enumerate() {
                assert_eq!(
                    (record.0, record.1, record.4, record.5),
                    (i as u64, SimTime::from_secs_f64(t * 0.5), prompt, output),
                    "{file}"
                );
            }
            // Every replayed row is served with its own lengths.
            for (record, row) in records.0.iter().zip(trace.rows()) {
                assert_eq!(
                    (Some(record.4 as u32), Some(record.5 as u32)),
                    (row.prompt_tokens, row.output_tokens)
                );
            }
        }
    }

    #[test]
    fn a_small_cache_rejects_what_cannot_fit_and_queues_the_rest() {
        let s = scenario(5.0, 1.0);
        let roomy = run(&s, 3, &mut roomy(), &mut Fifo::default());
        let mut tight = FixedKv {
            kv_tokens: 400,
            reroutes: true,
        };
        // Requests of more than 400 tokens (prompt 128-384 plus output 16-48) are rejected; the
        // rest wait for the cache.
        let records = served(&s, 3, &mut tight);
        assert!(records.0.iter().all(|r| r.4 + r.5 <= 400));
        let tight = run(&s, 3, &mut tight, &mut Fifo::default());
        let rejected = tight.scalar("requests_rejected").unwrap();
        assert!(rejected > 0.0);
        assert_eq!(
            tight.scalar("requests_completed").unwrap() + rejected,
            roomy.scalar("requests_completed").unwrap()
        );
        assert!(tight.scalar("ttft_mean_ms").unwrap() > roomy.scalar("ttft_mean_ms").unwrap());
    }

    #[test]
    fn rerouting_and_adapter_experts_cost_time() {
        let s = scenario(3.0, 1.0);
        let base = run(
            &s,
            5,
            &mut FixedKv {
                kv_tokens: 1_000_000,
                reroutes: false,
            },
            &mut Fifo::default(),
        );
        let weave = run(&s, 5, &mut roomy(), &mut Fifo::default());
        assert!(weave.scalar("tpot_mean_ms").unwrap() > base.scalar("tpot_mean_ms").unwrap());
        let mut unfused = s.clone();
        unfused.cost.rerouting = Rerouting::Unfused;
        let slow = run(&unfused, 5, &mut roomy(), &mut Fifo::default());
        assert!(slow.scalar("tpot_mean_ms").unwrap() > weave.scalar("tpot_mean_ms").unwrap());
    }

    #[test]
    fn out_of_memory_serves_nothing_and_reports_no_latency_or_throughput() {
        let s = scenario(2.0, 1.0);
        let out = run(
            &s,
            1,
            &mut FixedKv {
                kv_tokens: 0,
                reroutes: true,
            },
            &mut Fifo::default(),
        );
        assert_eq!(out.scalar("out_of_memory"), Some(1.0));
        assert_eq!(out.scalar("requests_completed"), Some(0.0));
        // It served nothing, so it has no latency and no throughput (not 0), and says why.
        let latency_rows = crate::expertweave::METRICS
            .iter()
            .map(|m| m.name)
            .filter(|name| name.ends_with("_ms"));
        assert_eq!(latency_rows.clone().count(), 16);
        for metric in latency_rows.chain([
            "throughput_rps",
            "prefill_throughput_tps",
            "decode_throughput_tps",
            "utilization",
        ]) {
            assert!(out.scalar(metric).unwrap().is_nan(), "{metric}");
        }
        assert!(
            out.details["failed"]
                .as_str()
                .unwrap()
                .starts_with("out of memory")
        );
        assert!(out.details["requests_per_adapter"].is_null());
    }
}
