//! The CAPS serving model: requests queue with their router-predicted expert loads; whenever the
//! GPU is idle and the queue holds `min_batch_trigger` requests (or a periodic scheduler tick finds
//! it non-empty), the scheduler seeds a batch with the oldest request, lets the `BatchSelector`
//! fill it from the `window_size` oldest requests, and executes it on the `StepExecutor`. Every
//! request of a batch completes when the batch does.

use super::workload::{MoeRequest, RequestModel, RequestStreams};
use crate::arrivals::{Arrival, ArrivalProcess};
use crate::caps::batch::{BatchSelection, BatchSelector, CandidateWindow};
use crate::caps::execution::{BatchWork, coefficient_of_variation, imbalance};
use crate::caps::metrics::RunMetrics;
use crate::engine::Model;
use crate::event_queue::EventQueue;
use crate::metrics::{DepthTracker, LatencyRecorder};
use crate::rng::SimRng;
use crate::time::{SimDuration, SimTime};
use std::collections::VecDeque;

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

/// Whoever answers "how long does this batch take": the cost model in simulation, the kernels
/// in live mode. Scheduling code cannot tell which one it talks to.
pub trait StepExecutor {
    fn batch_time(&mut self, work: &BatchWork<'_>) -> SimDuration;
}

/// One served request, as streamed to the per-request CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub id: u64,
    pub topic: u32,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub batch: u64,
    pub arrival: SimTime,
    pub start: SimTime,
    pub done: SimTime,
}

/// Receives each request as it completes (so records never accumulate in memory).
pub trait RecordSink {
    fn record(&mut self, record: &RequestRecord);
}

/// A sink that drops every record.
pub struct DiscardRecords;
impl RecordSink for DiscardRecords {
    fn record(&mut self, _: &RequestRecord) {}
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
    dims: usize,
    n_experts: usize,
    arrivals: Box<dyn ArrivalProcess + 'a>,
    request_model: &'a RequestModel,
    streams: RequestStreams,
    selector: &'a mut dyn BatchSelector,
    selector_rng: SimRng,
    executor: &'a mut dyn StepExecutor,
    sink: &'a mut dyn RecordSink,

    pending_arrival: Option<Arrival>,
    next_request_id: u64,
    queue: VecDeque<MoeRequest>,
    in_flight: Vec<MoeRequest>,
    in_flight_start: SimTime,
    tick_pending: bool,

    // Buffers reused by every batch, and load vectors of served requests kept for reuse.
    batch_load: Vec<f32>,
    spare_loads: Vec<Vec<f32>>,
    batch_decode_load: Vec<f32>,

    // Metrics.
    latency: LatencyRecorder,
    queue_wait: LatencyRecorder,
    depth: DepthTracker,
    first_arrival: Option<SimTime>,
    last_completion: SimTime,
    n_batches: u64,
    busy_ns: u64,
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
        executor: &'a mut dyn StepExecutor,
        sink: &'a mut dyn RecordSink,
        queue_sample_interval: SimDuration,
    ) -> Self {
        assert!(params.max_batch_size > 0 && params.window_size >= params.max_batch_size);
        assert!(params.min_batch_trigger > 0 && params.scheduling_interval.0 > 0);
        let dims = request_model.affinities.dims();
        assert_eq!(dims % n_experts, 0, "load dims must be layers x experts");
        CapsServer {
            params,
            dims,
            n_experts,
            arrivals,
            request_model,
            streams,
            selector,
            selector_rng,
            executor,
            sink,
            pending_arrival: None,
            next_request_id: 0,
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            in_flight_start: SimTime::ZERO,
            tick_pending: false,
            batch_load: vec![0.0; dims],
            spare_loads: Vec::new(),
            batch_decode_load: vec![0.0; dims],
            latency: LatencyRecorder::default(),
            queue_wait: LatencyRecorder::default(),
            depth: DepthTracker::new(queue_sample_interval.0),
            first_arrival: None,
            last_completion: SimTime::ZERO,
            n_batches: 0,
            busy_ns: 0,
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
        !self.in_flight.is_empty()
    }

    fn try_dispatch(&mut self, now: SimTime, events: &mut EventQueue<Event>, tick: bool) {
        if self.busy() || self.queue.is_empty() {
            return;
        }
        if tick || self.queue.len() >= self.params.min_batch_trigger {
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

    fn dispatch(&mut self, now: SimTime, events: &mut EventQueue<Event>) {
        let window_len = self.params.window_size.min(self.queue.len());
        let mut chosen: Vec<usize> = {
            let rows = self
                .queue
                .iter()
                .take(window_len)
                .map(MoeRequest::predicted)
                .collect();
            let window = CandidateWindow::from_rows(self.dims, rows);
            let mut selection = BatchSelection::new(&window, self.params.max_batch_size);
            if self.params.seed_with_oldest {
                selection.add(&window, 0);
            }
            self.selector
                .select(&window, &mut selection, &mut self.selector_rng);
            assert!(
                selection.is_full(),
                "batch selector left {} of {} slots empty",
                selection.capacity() - selection.len(),
                selection.capacity()
            );
            selection.chosen().to_vec()
        };
        chosen.sort_unstable();
        assert!(
            chosen.windows(2).all(|w| w[0] < w[1])
                && chosen.last().is_some_and(|&i| i < window_len),
            "batch selector returned an invalid selection {chosen:?}"
        );
        for &idx in chosen.iter().rev() {
            let request = self
                .queue
                .remove(idx)
                .expect("chosen index is inside the window");
            self.in_flight.push(request);
        }
        self.in_flight.reverse();
        self.depth.set(now, self.queue.len() as u64);

        self.batch_load.fill(0.0);
        self.batch_decode_load.fill(0.0);
        let mut prompt_tokens = 0u64;
        let mut decode_steps = 0u32;
        for request in &self.in_flight {
            let per_token = 1.0 / request.prompt_tokens as f32;
            for ((load, decode), value) in self
                .batch_load
                .iter_mut()
                .zip(self.batch_decode_load.iter_mut())
                .zip(&request.true_load)
            {
                *load += *value;
                *decode += *value * per_token;
            }
            prompt_tokens += u64::from(request.prompt_tokens);
            decode_steps = decode_steps.max(request.output_tokens);
        }
        let work = BatchWork {
            n_requests: self.in_flight.len(),
            load: &self.batch_load,
            decode_load: &self.batch_decode_load,
            prompt_tokens,
            decode_steps,
        };
        let duration = self.executor.batch_time(&work);
        self.imbalance_sum += imbalance(&self.batch_load, self.n_experts);
        self.cv_sum += coefficient_of_variation(&self.batch_load);
        self.busy_ns += duration.0;
        self.n_batches += 1;
        self.in_flight_start = now;
        events.schedule(now + duration, Event::BatchComplete);
    }

    fn complete_batch(&mut self, now: SimTime) {
        for mut request in self.in_flight.drain(..) {
            self.latency.record((now - request.arrival).0);
            self.queue_wait
                .record((self.in_flight_start - request.arrival).0);
            self.sink.record(&RequestRecord {
                id: request.id,
                topic: request.topic,
                prompt_tokens: request.prompt_tokens,
                output_tokens: request.output_tokens,
                batch: self.n_batches - 1,
                arrival: request.arrival,
                start: self.in_flight_start,
                done: now,
            });
            self.spare_loads
                .push(std::mem::take(&mut request.true_load));
        }
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
            self.queue.is_empty() && self.in_flight.is_empty(),
            "run ended with requests still queued"
        );
        let n_requests = self.latency.count();
        let start = self.first_arrival.unwrap_or(SimTime::ZERO);
        let span = self.last_completion.0.saturating_sub(start.0) as f64 * 1e-9;
        let (queue_depth_mean, queue_depth_max, queue_depth_series) =
            self.depth.finish(self.last_completion);
        let batches = self.n_batches.max(1) as f64;
        RunMetrics {
            n_requests,
            n_batches: self.n_batches,
            latency: self.latency.summary(),
            queue_wait: self.queue_wait.summary(),
            throughput_rps: if span > 0.0 {
                n_requests as f64 / span
            } else {
                0.0
            },
            makespan_s: self.last_completion.as_secs_f64(),
            mean_batch_size: n_requests as f64 / batches,
            imbalance: self.imbalance_sum / batches,
            load_cv: self.cv_sum / batches,
            imbalance_factor: 1.0 + self.cv_sum / batches * self.factor_sensitivity,
            mean_batch_time_ms: self.busy_ns as f64 * 1e-6 / batches,
            utilization: if self.last_completion.0 > 0 {
                self.busy_ns as f64 / self.last_completion.0 as f64
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
                self.first_arrival.get_or_insert(now);
                let id = self.next_request_id;
                self.next_request_id += 1;
                let buffer = self.spare_loads.pop().unwrap_or_default();
                let request = self.request_model.make_request_in(
                    id,
                    &Arrival {
                        time: now,
                        ..arrival
                    },
                    &mut self.streams,
                    buffer,
                );
                self.queue.push_back(request);
                self.depth.set(now, self.queue.len() as u64);
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
