//! The MoA workload: the test set of `crate::serving::questions` (questions recruited to k = 3
//! experts with per-expert slot totals matching the benchmark exactly, vote-agreement buckets
//! with exact counts, prompt and per-expert output lengths: log-normal, reasoning experts' long
//! tail, longer on disagreement questions) laid out as each expert's prompts; and the
//! calibration subset with the per-model regression of session time that placement uses. Every
//! draw goes through `sim::distributions` (lengths: `TokenCount`; recruitment and buckets of
//! the calibration questions: `Categorical`).

use super::config::{EXPERTS_PER_QUESTION, ExpertFamily, MosaicScenario};
use super::pricing::SimulatedPricing;
use super::server::run_session;
use super::session::GenerationRequest;
use crate::distributions::Categorical;
use crate::rng::{SimRng, stream};
use crate::serving::QueuePolicy;
use crate::serving::questions;
pub use crate::serving::questions::{Question, draw_length};
pub use crate::serving::session_regression::{SessionRegression, SweepPoint, fit_regression};
use rand::RngExt;

/// The synthesized test set.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub questions: Vec<Question>,
    /// Experts in the order they first appear in the question queue.
    pub first_seen: Vec<usize>,
    /// Per expert, its prompts in queue order.
    pub prompts: Vec<Vec<GenerationRequest>>,
}

fn family_scale(scenario: &MosaicScenario, expert: usize) -> f64 {
    match scenario.experts[expert].family {
        ExpertFamily::Reasoning => scenario.dataset.reasoning_output_scale,
        ExpertFamily::Instruction => scenario.dataset.instruction_output_scale,
    }
}

impl Workload {
    /// The scenario's test set (`questions::synthesize` over its dataset's slots and buckets,
    /// each expert's outputs scaled by its family's `*_output_scale`), each expert's prompts in
    /// question order. Streams: "recruit", "votes", "prompts", "outputs".
    pub fn synthesize(scenario: &MosaicScenario, seed: u64) -> Workload {
        let data = &scenario.dataset;
        let outputs: Vec<_> = scenario.experts.iter().map(|e| e.output).collect();
        let questions = questions::synthesize(
            &data.slots,
            &data.buckets,
            &data.prompt,
            &outputs,
            |m| family_scale(scenario, m),
            seed,
        );
        let mut prompts = vec![Vec::new(); scenario.experts.len()];
        for q in &questions {
            for (&m, &output_tokens) in q.experts.iter().zip(&q.output_tokens) {
                prompts[m].push(GenerationRequest {
                    prompt_tokens: q.prompt_tokens,
                    output_tokens,
                });
            }
        }
        Workload {
            first_seen: questions::first_seen(&questions),
            questions,
            prompts,
        }
    }
}

/// The calibration subset (never the test prompts) and each recruited model's regression.
/// Calibration questions recruit three experts with probabilities proportional to the test
/// slot shares (the router's skill mix), with buckets drawn by their shares; every recruited
/// expert gets at least `min_prompts_per_model` prompts. The sweep runs sessions of doubling
/// size, resampling the model's calibration prompts, each a resident session on the serving
/// replica priced by the scenario's GPU model, the roofline or the measured set's operations,
/// never `[serving] profile` (admissions in `queue`'s order, FCFS). Streams:
/// "calibration", "calibration-sweep".
pub fn calibrate(
    scenario: &MosaicScenario,
    seed: u64,
    queue: &mut dyn QueuePolicy,
) -> Vec<Option<SessionRegression>> {
    let data = &scenario.dataset;
    let mut rng = stream(seed, "calibration");
    let experts = Categorical::new(&data.slots.iter().map(|&s| f64::from(s)).collect::<Vec<_>>())
        .expect("validated: slots sum to 3 x questions > 0");
    let buckets = Categorical::new(&data.buckets.each_ref().map(|b| b.share_pct))
        .expect("validated: bucket shares sum to 100");
    let mut outputs: Vec<Vec<GenerationRequest>> = vec![Vec::new(); scenario.experts.len()];
    let draw_for = |m: usize, rng: &mut SimRng, outputs: &mut Vec<Vec<GenerationRequest>>| {
        let bucket = buckets.sample(rng);
        let prompt_tokens = draw_length(&data.prompt, 1.0, rng);
        let scale = family_scale(scenario, m) * data.buckets[bucket].length_factor;
        let output_tokens = draw_length(&scenario.experts[m].output, scale, rng);
        outputs[m].push(GenerationRequest {
            prompt_tokens,
            output_tokens,
        });
    };
    for _ in 0..data.calibration_questions {
        for _ in 0..EXPERTS_PER_QUESTION {
            let m = experts.sample(&mut rng);
            draw_for(m, &mut rng, &mut outputs);
        }
    }
    let min = scenario.calibration.min_prompts_per_model as usize;
    for m in 0..scenario.experts.len() {
        while data.slots[m] > 0 && outputs[m].len() < min {
            draw_for(m, &mut rng, &mut outputs);
        }
    }
    let mut sweep_rng = stream(seed, "calibration-sweep");
    let mut pricing = SimulatedPricing::without_profile(scenario);
    (0..scenario.experts.len())
        .map(|m| {
            if data.slots[m] == 0 {
                return None;
            }
            let cal = &outputs[m];
            let mut sweep = Vec::new();
            let mut size = scenario.calibration.sweep_min_prompts;
            while size <= scenario.calibration.sweep_max_prompts {
                let sample: Vec<GenerationRequest> = (0..size)
                    .map(|_| cal[sweep_rng.random_range(0..cal.len())])
                    .collect();
                let run = run_session(
                    m,
                    &scenario.experts[m].serving,
                    &sample,
                    &mut pricing,
                    &mut *queue,
                );
                let sum: u64 = sample.iter().map(|r| u64::from(r.output_tokens)).sum();
                sweep.push(SweepPoint {
                    prompts: size,
                    mean_output: sum as f64 / f64::from(size),
                    max_output: sample.iter().map(|r| r.output_tokens).max().unwrap_or(0),
                    session_s: run.generate_s(),
                    tokens_per_s: run.tokens_per_s(),
                });
                size = size.saturating_mul(2);
            }
            let sum: u64 = cal.iter().map(|r| u64::from(r.output_tokens)).sum();
            Some(SessionRegression {
                coefficients: fit_regression(&sweep),
                mean_output: sum as f64 / cal.len() as f64,
                max_output: cal.iter().map(|r| r.output_tokens).max().unwrap_or(0),
                calibration_prompts: cal.len() as u32,
                sweep,
            })
        })
        .collect()
}
