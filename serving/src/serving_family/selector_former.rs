//! CAPS's scheduler loop as the serving replica's batch former (`SelectorFormer`): the
//! requests waiting at a `static` replica, oldest first; the `window_size` oldest are the
//! candidates, each with its router-predicted load (the dry-run, a `DryRun`, runs as a request
//! enters the window, in arrival order); a batch is seeded with the oldest request
//! (anti-starvation, caps.txt) and filled by the scenario's `BatchSelector`. The chosen requests
//! stay here, in queue order, while their batch runs; their load vectors are then reused for the
//! next requests routed. The dry-runs are in `super::batch_former`.

use super::batch_former::ServingCandidate;
use crate::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use crate::rng::SimRng;
use crate::serving::{AdmitHook, BatchFormer, QueuedRequest};
use crate::time::SimTime;
use std::collections::VecDeque;

/// The router dry-run: a waiting request's predicted load vector.
pub trait DryRun {
    /// Entries of a load vector.
    fn dims(&self) -> usize;
    /// Predicts `request`'s load vector, written into `buffer` (a served request's vector).
    fn route(&mut self, request: &mut ServingCandidate, buffer: Vec<f32>);
}

/// The waiting requests and the batch in execution of one static replica.
pub struct SelectorFormer<'a> {
    dims: usize,
    window_size: usize,
    seed_with_oldest: bool,
    selector: &'a mut dyn BatchSelector,
    rng: SimRng,
    dry_run: Box<dyn DryRun + 'a>,
    waiting: VecDeque<ServingCandidate>,
    /// The waiting requests whose dry-run has run: always the oldest ones.
    routed: usize,
    in_flight: Vec<ServingCandidate>,
    /// Load vectors of served requests, for the next ones routed.
    spare_loads: Vec<Vec<f32>>,
}

impl<'a> SelectorFormer<'a> {
    /// A former choosing from the `window_size` oldest requests with `selector` (drawing from
    /// `rng`), predicting their loads with `dry_run`.
    pub fn new(
        window_size: usize,
        seed_with_oldest: bool,
        selector: &'a mut dyn BatchSelector,
        rng: SimRng,
        dry_run: Box<dyn DryRun + 'a>,
    ) -> Self {
        SelectorFormer {
            dims: dry_run.dims(),
            window_size,
            seed_with_oldest,
            selector,
            rng,
            dry_run,
            waiting: VecDeque::new(),
            routed: 0,
            in_flight: Vec::new(),
            spare_loads: Vec::new(),
        }
    }

    /// Queues an arrived request behind the others.
    pub fn push(&mut self, request: ServingCandidate) {
        self.waiting.push_back(request);
    }

    /// Requests waiting for a batch.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The batch in execution, in queue order.
    pub fn in_flight(&self) -> &[ServingCandidate] {
        &self.in_flight
    }

    /// The batch has finished: `served` sees each of its requests, in queue order, and their
    /// load vectors are kept for reuse.
    pub fn finish_batch(&mut self, mut served: impl FnMut(&ServingCandidate)) {
        for request in self.in_flight.drain(..) {
            served(&request);
            self.spare_loads.push(request.load);
        }
    }

    fn request(&self, id: u64) -> &ServingCandidate {
        self.in_flight
            .iter()
            .find(|r| r.id == id)
            .expect("the replica admits only the batch the former formed")
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
            self.dry_run.route(request, buffer);
        }
        self.routed = self.routed.max(window_len);
        let mut chosen: Vec<usize> = {
            let rows = self
                .waiting
                .iter()
                .take(window_len)
                .map(ServingCandidate::predicted)
                .collect();
            let window = CandidateWindow::from_rows(self.dims, rows);
            let mut selection = if self.seed_with_oldest {
                BatchSelection::seeded(&window, capacity, 0)
            } else {
                BatchSelection::new(&window, capacity)
            };
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
        batch.extend(self.in_flight.iter().map(ServingCandidate::queued));
    }

    fn put_back(&mut self, requests: Vec<QueuedRequest>) {
        for request in requests.iter().rev() {
            let at = self
                .in_flight
                .iter()
                .position(|r| r.id == request.id)
                .expect("the replica puts back only the batch the former formed");
            // Routed already: it rejoins the routed oldest requests at the front.
            self.waiting.push_front(self.in_flight.remove(at));
            self.routed += 1;
        }
    }
}
