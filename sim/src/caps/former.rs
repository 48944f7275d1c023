//! The caps family's side of the shared batch former
//! (`serving_family::selector_former::SelectorFormer`): its dry-run is its request model
//! (`CapsDryRun`), and its requests are the former's candidates.

use super::workload::{MoeRequest, RequestModel};
use crate::rng::SimRng;
use crate::serving::QueuedRequest;
use crate::serving_family::selector_former::{Candidate, DryRun};

/// The caps family's dry-run: its request model (`RequestModel::route`), the noise from the
/// `"prediction"` stream.
pub struct CapsDryRun<'a> {
    pub request_model: &'a RequestModel,
    pub prediction: SimRng,
}

impl DryRun for CapsDryRun<'_> {
    type Request = MoeRequest;
    fn dims(&self) -> usize {
        self.request_model.affinities.dims()
    }
    fn route(&mut self, request: &mut MoeRequest, buffer: Vec<f32>) {
        self.request_model
            .route(request, &mut self.prediction, buffer);
    }
}

impl Candidate for MoeRequest {
    fn queued(&self) -> QueuedRequest {
        queued(self)
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn output_tokens(&self) -> u32 {
        self.output_tokens
    }
    fn predicted(&self) -> &[f32] {
        MoeRequest::predicted(self)
    }
    fn take_load(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.true_load)
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
        topic: 0,
    }
}
