//! The CAPS batch selectors as the serving replica's batch former: the requests waiting for a
//! batch, oldest first; the `window_size` oldest are the candidates, each with its
//! router-predicted load (the dry-run runs as a request enters the window, in arrival order); a
//! batch is seeded with the oldest request (anti-starvation, caps.txt) and filled by the
//! scenario's `BatchSelector`. The chosen requests stay here, in queue order, while their batch
//! runs; their load vectors are then reused for the next requests routed.

use super::batch::{BatchSelection, BatchSelector, CandidateWindow};
use super::workload::{MoeRequest, RequestModel};
use crate::rng::SimRng;
use crate::serving::{AdmitHook, BatchFormer, QueuedRequest};
use crate::time::SimTime;
use std::collections::VecDeque;

/// The waiting requests and the batch in execution of one CAPS server.
pub struct SelectorFormer<'a> {
    dims: usize,
    window_size: usize,
    seed_with_oldest: bool,
    selector: &'a mut dyn BatchSelector,
    rng: SimRng,
    request_model: &'a RequestModel,
    /// The router dry-run's noise stream (`"prediction"`).
    prediction: SimRng,
    waiting: VecDeque<MoeRequest>,
    /// The waiting requests whose dry-run has run: always the oldest ones.
    routed: usize,
    in_flight: Vec<MoeRequest>,
    /// Load vectors of served requests, for the next ones routed.
    spare_loads: Vec<Vec<f32>>,
}

impl<'a> SelectorFormer<'a> {
    /// A former choosing from the `window_size` oldest requests with `selector` (drawing from
    /// `rng`), routing them through `request_model` (noise from `prediction`).
    pub fn new(
        window_size: usize,
        seed_with_oldest: bool,
        selector: &'a mut dyn BatchSelector,
        rng: SimRng,
        request_model: &'a RequestModel,
        prediction: SimRng,
    ) -> Self {
        SelectorFormer {
            dims: request_model.affinities.dims(),
            window_size,
            seed_with_oldest,
            selector,
            rng,
            request_model,
            prediction,
            waiting: VecDeque::new(),
            routed: 0,
            in_flight: Vec::new(),
            spare_loads: Vec::new(),
        }
    }

    /// Queues an arrived request behind the others.
    pub fn push(&mut self, request: MoeRequest) {
        self.waiting.push_back(request);
    }

    /// Requests waiting for a batch.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The batch in execution, in queue order.
    pub fn in_flight(&self) -> &[MoeRequest] {
        &self.in_flight
    }

    /// The batch has finished: `served` sees each of its requests, in queue order, and their
    /// load vectors are kept for reuse.
    pub fn finish_batch(&mut self, mut served: impl FnMut(&MoeRequest)) {
        for mut request in self.in_flight.drain(..) {
            served(&request);
            self.spare_loads
                .push(std::mem::take(&mut request.true_load));
        }
    }

    fn request(&self, id: u64) -> &MoeRequest {
        self.in_flight
            .iter()
            .find(|r| r.id == id)
            .expect("the replica admits only the batch the former formed")
    }
}

/// A CAPS request as the serving layer sees it: submitted at its arrival.
fn queued(request: &MoeRequest) -> QueuedRequest {
    QueuedRequest {
        id: request.id,
        workflow: request.id,
        stage: 0,
        submitted: request.arrival,
        workflow_arrival: request.arrival,
        enqueued_iteration: 0,
        prompt_tokens: request.prompt_tokens,
        predicted_stage_tokens: 0.0,
        predicted_total_tokens: 0.0,
        attained_service: 0,
        rank_noise: 0.0,
    }
}

impl AdmitHook for SelectorFormer<'_> {
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32 {
        self.request(request.id).output_tokens
    }
    fn admitted(&mut self, _: SimTime, _: &QueuedRequest, _: u32) {}
}

impl BatchFormer for SelectorFormer<'_> {
    fn form(&mut self, capacity: usize, batch: &mut Vec<QueuedRequest>) {
        assert!(self.in_flight.is_empty(), "a CAPS batch is still running");
        let window_len = self.window_size.min(self.waiting.len());
        if window_len == 0 {
            return;
        }
        for request in self.waiting.range_mut(self.routed..window_len) {
            let buffer = self.spare_loads.pop().unwrap_or_default();
            self.request_model
                .route(request, &mut self.prediction, buffer);
        }
        self.routed = self.routed.max(window_len);
        let mut chosen: Vec<usize> = {
            let rows = self
                .waiting
                .iter()
                .take(window_len)
                .map(MoeRequest::predicted)
                .collect();
            let window = CandidateWindow::from_rows(self.dims, rows);
            let mut selection = BatchSelection::new(&window, capacity);
            if self.seed_with_oldest {
                selection.add(&window, 0);
            }
            self.selector.select(&window, &mut selection, &mut self.rng);
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
                .waiting
                .remove(idx)
                .expect("chosen index is inside the window");
            self.in_flight.push(request);
        }
        self.routed -= chosen.len();
        self.in_flight.reverse();
        batch.extend(self.in_flight.iter().map(queued));
    }
}
