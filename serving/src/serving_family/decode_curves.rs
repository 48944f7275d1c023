//! `details.decode_curves` (`[output] decode_curves = true`, the `decode_curve` figure,
//! MOSAIC's Figure 3b): per replica group, its decode step against the batch, priced by the
//! group's own step cost (`ReplicaStepCost::decode_profile`: what `price` makes of a decode
//! step of that many sequences, the price every engine step of the run pays, host time
//! included), never a formula of its own. The batch runs 1, 2, 4, ... up to the group's cap:
//! `max_num_seqs`, or the sequences of `PROFILE_CONTEXT_TOKENS` cached tokens each its KV cache
//! holds, whichever is smaller (the batch the server's activity monitor profiles); each point
//! gives the step's latency and the tokens per second a step of that batch emits (one token per
//! sequence), the decode throughput that saturates once the step stops being the weights' read.

use super::config::ServingScenario;
use super::deployment::Deployment;
use super::mapping::ExpertLayout;
use super::step_cost::ReplicaStepCost;
use crate::serving::router::PROFILE_CONTEXT_TOKENS;
use serde_json::{Value, json};
use std::rc::Rc;

/// The batches a curve prices: the powers of two below `cap`, then `cap`.
pub fn batches(cap: u64) -> Vec<u64> {
    let cap = cap.max(1);
    let mut out: Vec<u64> = std::iter::successors(Some(1u64), |b| b.checked_mul(2))
        .take_while(|&b| b < cap)
        .collect();
    out.push(cap);
    out
}

/// `details.decode_curves`: per group (`deployments[g]`, the layout of its first replica
/// `layouts[g]` for an MoE model) its model, GPU, context and `points` (`batch`, `step_ms`,
/// `tokens_per_s`).
pub fn detail(
    scenario: &ServingScenario,
    deployments: &[Deployment],
    layouts: &[Option<Rc<ExpertLayout>>],
) -> Value {
    let context = PROFILE_CONTEXT_TOKENS as u64;
    let groups: Vec<Value> = deployments
        .iter()
        .zip(layouts)
        .enumerate()
        .map(|(g, (deployment, layout))| {
            let group = scenario.group(g);
            let mut cost = ReplicaStepCost::new(&group, deployment, layout.clone(), None);
            let cap = deployment.profile_batch(group.replica.max_num_seqs);
            let points: Vec<Value> = batches(cap)
                .into_iter()
                .map(|batch| {
                    let step = cost.decode_profile(batch, context);
                    let seconds = step.duration.as_secs_f64();
                    json!({
                        "batch": batch,
                        "step_ms": seconds * 1e3,
                        "tokens_per_s": batch as f64 / seconds,
                    })
                })
                .collect();
            json!({
                "model": group.model.name(),
                "gpu": group.replica.gpu.name,
                "context_tokens": context,
                "source": cost.decode_profile(1, context).source,
                "points": points,
            })
        })
        .collect();
    Value::Array(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::step::StepCost;

    #[test]
    fn the_batches_double_up_to_the_cap() {
        assert_eq!(batches(1), vec![1]);
        assert_eq!(batches(8), vec![1, 2, 4, 8]);
        assert_eq!(batches(12), vec![1, 2, 4, 8, 12]);
        assert_eq!(batches(0), vec![1]);
    }

    /// Two dense groups on an A100 with MOSAIC's 4 ms host time: every point is the group's own
    /// step cost of that decode step, run by run; the step grows with the batch and the tokens
    /// per second with it, less than in proportion (the weights' read is shared); the cap is
    /// the KV cache's or `max_num_seqs`; without the key the details have no curves.
    #[test]
    fn each_groups_curve_is_its_own_step_price_of_a_decode_step() {
        let text = "[[replica]]\nmodel = \"qwen2.5-7b-instruct\"\ngpu = \"A100-80GB\"\n\
                    step_overhead_ms = 4.0\n\
                    [[replica]]\nmodel = \"llama-3.1-8b-instruct\"\ngpu = \"A100-80GB\"\n\
                    max_num_seqs = 48\n\
                    [workload]\nn_requests = 4\nprompt_tokens = { kind = \"fixed\", value = 8 }\n\
                    output_tokens = { kind = \"fixed\", value = 4 }\n\
                    [arrival]\npattern = \"offline\"\n[output]\ndecode_curves = true\n";
        let s = super::super::tests::scenario(text).unwrap();
        let out = super::super::tests::run(&s, 0);
        let curves = out.details["decode_curves"].as_array().unwrap();
        assert_eq!(curves.len(), 2);
        for (g, curve) in curves.iter().enumerate() {
            let group = s.group(g);
            let deployment = Deployment::new(&group, None).unwrap();
            let mut cost = ReplicaStepCost::new(&group, &deployment, None, None);
            assert_eq!(curve["model"], group.model.name());
            let points = curve["points"].as_array().unwrap();
            let cap = (group.replica.max_num_seqs as u64)
                .min(deployment.kv_tokens / 1024)
                .max(1);
            assert_eq!(points.last().unwrap()["batch"], cap);
            let mut last = (0, 0.0, 0.0);
            for p in points {
                let batch = p["batch"].as_u64().unwrap();
                let step = cost.decode_profile(batch, 1024);
                let ms = p["step_ms"].as_f64().unwrap();
                assert_eq!(ms, step.duration.as_secs_f64() * 1e3);
                let tps = p["tokens_per_s"].as_f64().unwrap();
                assert_eq!(tps, batch as f64 / step.duration.as_secs_f64());
                assert!(ms >= last.1 && tps > last.2, "{curve}");
                if last.0 > 0 {
                    // Sub-linear: b sequences emit fewer than b / b' times the tokens per
                    // second of b' < b (the step's weight read and host time are shared).
                    assert!(tps < last.2 * batch as f64 / last.0 as f64, "{curve}");
                }
                last = (batch, ms, tps);
            }
            // What the run's own step cost makes of the same step, through `price`.
            let batch: Vec<crate::serving::Seq> = Vec::new();
            let work = crate::serving::StepWork {
                requests: 4,
                prefill_tokens: 0,
                decode_tokens: 4,
                decode_iterations: 0,
                context_tokens: 4 * 1024,
                emitting: 4,
                prefill_square: 0.0,
                batch: &batch,
                routed: None,
                expected_routing: None,
                adapters: &[],
                swapped_out_tokens: 0,
                swapped_in_tokens: 0,
            };
            assert_eq!(
                cost.price(&work).duration,
                cost.decode_profile(4, 1024).duration
            );
        }
        assert_eq!(curves[1]["points"].as_array().unwrap().last().unwrap()["batch"], 48);
        let plain = super::super::tests::run(
            &super::super::tests::scenario(&text.replace("decode_curves = true", "")).unwrap(),
            0,
        );
        assert!(plain.details.get("decode_curves").is_none());
    }
}
