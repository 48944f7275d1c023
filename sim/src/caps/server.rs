//! The CAPS serving model on the shared serving layer: requests queue with their
//! router-predicted expert loads in the CAPS batch former (`SelectorFormer`); whenever the GPU
//! is idle and `min_batch_trigger` requests wait (or a tick of the `scheduling_interval` grid
//! finds any), the `serving::Replica`, configured for static batches (`replica_config`), takes
//! the batch the former picks (the oldest request plus the selector's choice from the
//! `window_size` oldest) and runs it as one step priced through the `serving::StepCost` seam.
//! Every request of a batch completes when the batch does.

use super::former::CapsDryRun;
use super::workload::{RequestModel, RequestStreams};
use crate::arrivals::{Arrival, ArrivalProcess};
use crate::caps::metrics::RunMetrics;
use crate::engine::Model;
use crate::event_queue::EventQueue;
use crate::metrics::DepthTracker;
use crate::policies::batch::BatchSelector;
use crate::recorder::expert_load::{coefficient_of_variation, imbalance};
use crate::records::{Extra, RecordSink, RequestRecord};
use crate::rng::SimRng;
use crate::serving::topic_affinity::batch_routing;
use crate::serving::{
    Admission, Batching, ExpectedRouting, KvConfig, Replica, ReplicaConfig, Seq, StepCost, StepWork,
};
use crate::serving_family::selector_former::SelectorFormer;
use crate::time::{SimDuration, SimTime};

/// The scheduler loop's parameters (caps.txt, `scheduler` config; defaults 8 / 32 / 16 / 100 ms).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerParams {
    pub max_batch_size: usize,
    pub window_size: usize,
    pub min_batch_trigger: usize,
    pub scheduling_interval: SimDuration,
    /// Anti-starvation: every batch contains the oldest waiting request.
    pub seed_with_oldest: bool,
}

/// The replica configuration of a CAPS server: static batches of at most `max_batch_size`
/// requests, no token budget, and no KV limit (CAPS models none; a cache counted in tokens,
/// unbounded, so `kv().peak()` is the most KV tokens a batch held).
pub fn replica_config(params: &SchedulerParams) -> ReplicaConfig {
    ReplicaConfig {
        max_num_seqs: params.max_batch_size,
        max_num_batched_tokens: None,
        chunked_prefill: false,
        kv: KvConfig {
            block_size: 1,
            blocks: u64::MAX,
            watermark_blocks: 0,
        },
        admission: Admission::PromptOnly,
        batching: Batching::Static,
    }
}

/// What happens to the CAPS server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The pending arrival reaches the queue.
    RequestArrival,
    /// The scheduler wakes up on its `scheduling_interval` grid.
    SchedulerTick,
    /// The batch in execution finishes.
    BatchComplete,
}

/// The CAPS batch server as an event-driven `Model`.
pub struct CapsServer<'a> {
    params: SchedulerParams,
    n_layers: usize,
    n_experts: usize,
    arrivals: Box<dyn ArrivalProcess + 'a>,
    request_model: &'a RequestModel,
    streams: RequestStreams,
    former: SelectorFormer<'a, CapsDryRun<'a>>,
    replica: Replica,
    step_cost: &'a mut dyn StepCost,
    sink: &'a mut dyn RecordSink,

    pending_arrival: Option<Arrival>,
    next_request_id: u64,
    batch_start: SimTime,
    tick_pending: bool,

    // Buffers reused by every batch.
    batch_load: Vec<f32>,
    batch_decode_load: Vec<f32>,
    finished: Vec<Seq>,

    // Metrics.
    depth: DepthTracker,
    last_completion: SimTime,
    imbalance_sum: f64,
    /// The sensitivity of the reported imbalance factor (`RunMetrics::imbalance_factor`).
    factor_sensitivity: f64,
    cv_sum: f64,
}

impl<'a> CapsServer<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        params: SchedulerParams,
        n_experts: usize,
        arrivals: Box<dyn ArrivalProcess + 'a>,
        request_model: &'a RequestModel,
        streams: RequestStreams,
        selector: &'a mut dyn BatchSelector,
        selector_rng: SimRng,
        prediction_rng: SimRng,
        step_cost: &'a mut dyn StepCost,
        sink: &'a mut dyn RecordSink,
        queue_sample_interval: SimDuration,
    ) -> Self {
        assert!(params.max_batch_size > 0 && params.window_size >= params.max_batch_size);
        assert!(params.min_batch_trigger > 0 && params.scheduling_interval.0 > 0);
        let dims = request_model.affinities.dims();
        assert_eq!(dims % n_experts, 0, "load dims must be layers x experts");
        CapsServer {
            replica: Replica::new(replica_config(&params)),
            former: SelectorFormer::new(
                params.window_size,
                params.seed_with_oldest,
                selector,
                selector_rng,
                CapsDryRun {
                    request_model,
                    prediction: prediction_rng,
                },
            ),
            params,
            n_layers: dims / n_experts,
            n_experts,
            arrivals,
            request_model,
            streams,
            step_cost,
            sink,
            pending_arrival: None,
            next_request_id: 0,
            batch_start: SimTime::ZERO,
            tick_pending: false,
            batch_load: vec![0.0; dims],
            batch_decode_load: vec![0.0; dims],
            finished: Vec::new(),
            depth: DepthTracker::new(queue_sample_interval.0),
            last_completion: SimTime::ZERO,
            imbalance_sum: 0.0,
            factor_sensitivity: 1.0,
            cv_sum: 0.0,
        }
    }

    fn schedule_next_arrival(&mut self, events: &mut EventQueue<Event>) {
        self.pending_arrival = self.arrivals.next_arrival();
        if let Some(arrival) = &self.pending_arrival {
            events.schedule(arrival.time.max(events.now()), Event::RequestArrival);
        }
    }

    fn busy(&self) -> bool {
        !self.replica.running().is_empty()
    }

    fn try_dispatch(&mut self, now: SimTime, events: &mut EventQueue<Event>, tick: bool) {
        if self.busy() || self.former.waiting() == 0 {
            return;
        }
        if tick || self.former.waiting() >= self.params.min_batch_trigger {
            self.dispatch(now, events);
        } else if !self.tick_pending {
            let interval = self.params.scheduling_interval.0;
            events.schedule(
                SimTime((now.0 / interval + 1) * interval),
                Event::SchedulerTick,
            );
            self.tick_pending = true;
        }
    }

    /// The replica takes the former's batch; its loads become the step's expected routing.
    fn dispatch(&mut self, now: SimTime, events: &mut EventQueue<Event>) {
        let work = self
            .replica
            .schedule_static_batch(now, &mut self.former)
            .expect("a request waits, so the former forms a batch");
        // A batch without decode passes (one-token outputs) has no decode routing to price.
        batch_routing(
            self.former
                .in_flight()
                .iter()
                .map(|r| (r.true_load.as_slice(), r.prompt_tokens)),
            work.decode_iterations > 0,
            &mut self.batch_load,
            &mut self.batch_decode_load,
        );
        let work = StepWork {
            expected_routing: Some(ExpectedRouting {
                layers: self.n_layers,
                prefill: &self.batch_load,
                decode: &self.batch_decode_load,
            }),
            ..work
        };
        let duration = self.step_cost.price(&work).duration;
        self.replica.begin_step(duration);
        self.depth.set(now, self.former.waiting() as u64);
        self.imbalance_sum += imbalance(&self.batch_load, self.n_experts);
        self.cv_sum += coefficient_of_variation(&self.batch_load);
        self.batch_start = now;
        events.schedule(now + duration, Event::BatchComplete);
    }

    fn complete_batch(&mut self, now: SimTime) {
        self.replica.complete_step(now, &mut self.finished);
        assert_eq!(
            self.finished.len(),
            self.former.in_flight().len(),
            "a static batch finishes whole"
        );
        self.finished.clear();
        let batch = self.replica.stats().steps - 1;
        let start = self.batch_start;
        let sink = &mut *self.sink;
        // A static batch finishes all its requests at once: no first-token time is modelled.
        self.former.finish_batch(|request| {
            sink.record(&RequestRecord {
                id: request.id,
                arrival: request.arrival,
                first_token: None,
                finish: now,
                prompt_tokens: u64::from(request.prompt_tokens),
                output_tokens: u64::from(request.output_tokens),
                extra: &[
                    Extra::Count(u64::from(request.topic)),
                    Extra::Count(batch),
                    Extra::Time(start),
                    Extra::Millis(start.since(request.arrival).as_millis_f64()),
                ],
            });
        });
        self.last_completion = now;
    }

    /// Sets the sensitivity of the reported imbalance factor `1 + CV x sensitivity` (1 unless
    /// set: the `cv` execution model's, so the factor is the one its batch times use).
    pub fn with_factor_sensitivity(mut self, sensitivity: f64) -> Self {
        self.factor_sensitivity = sensitivity;
        self
    }

    /// The metrics of the finished run.
    pub fn finish(self) -> RunMetrics {
        assert!(
            self.former.waiting() == 0 && !self.busy(),
            "run ended with requests still queued"
        );
        let stats = self.replica.stats();
        let requests = stats.latencies.summary();
        let (queue_depth_mean, queue_depth_max, queue_depth_series) =
            self.depth.finish(self.last_completion);
        let batches = stats.steps.max(1) as f64;
        RunMetrics {
            n_requests: requests.completed,
            n_batches: stats.steps,
            latency: requests.e2e,
            queue_wait: requests.queueing,
            throughput_rps: requests.throughput_rps,
            makespan_s: self.last_completion.as_secs_f64(),
            mean_batch_size: stats.batch_sum as f64 / batches,
            imbalance: self.imbalance_sum / batches,
            load_cv: self.cv_sum / batches,
            imbalance_factor: 1.0 + self.cv_sum / batches * self.factor_sensitivity,
            mean_batch_time_ms: stats.busy_ns as f64 * 1e-6 / batches,
            utilization: if self.last_completion.0 > 0 {
                stats.busy_ns as f64 / self.last_completion.0 as f64
            } else {
                0.0
            },
            queue_depth_mean,
            queue_depth_max,
            queue_depth_series,
        }
    }
}

impl Model for CapsServer<'_> {
    type Event = Event;
    fn start(&mut self, events: &mut EventQueue<Event>) {
        self.schedule_next_arrival(events);
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        match event {
            Event::RequestArrival => {
                let arrival = self
                    .pending_arrival
                    .take()
                    .expect("an arrival event has a pending arrival");
                let id = self.next_request_id;
                self.next_request_id += 1;
                let request = self.request_model.make_request(
                    id,
                    &Arrival {
                        time: now,
                        ..arrival
                    },
                    &mut self.streams,
                );
                self.former.push(request);
                self.replica.submitted(now);
                self.depth.set(now, self.former.waiting() as u64);
                self.schedule_next_arrival(events);
                self.try_dispatch(now, events, false);
            }
            Event::SchedulerTick => {
                self.tick_pending = false;
                self.try_dispatch(now, events, true);
            }
            Event::BatchComplete => {
                self.complete_batch(now);
                self.try_dispatch(now, events, false);
            }
        }
    }
}
