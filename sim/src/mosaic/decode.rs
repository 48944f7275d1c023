//! The decode-cost model of one vLLM session (a dense model on one GPU, or tensor-parallel
//! across several), priced by the cost model's one roofline (`cost::roofline::StepRoofline`),
//! and the continuous-batching session simulator built on it: a session's prompts are admitted
//! while sequence slots and KV-cache memory allow, every step generates one token for each
//! sequence in flight, and finished sequences free their slots.
//!
//! Small batches are memory-bound (the weights are streamed once per step whatever the batch
//! is: throughput grows with it); long-context reasoning sequences make the KV reads dominate
//! and saturate early.

use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::cost::roofline::{Roofline, StepRoofline, StepTokens, TensorParallel};
use crate::cost::shape::DenseModelShape;
use crate::time::SimDuration;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// The serving engine's knobs; every default is documented in docs/mosaic.md.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingParams {
    pub gpu: GpuSpec,
    /// Fraction of the datasheet bandwidth reached ([`crate::cost::gpu::DEFAULT_MEMORY_EFFICIENCY`]).
    pub memory_efficiency: f64,
    /// Fraction of the datasheet dense bf16 rate reached ([`crate::cost::gpu::DEFAULT_COMPUTE_EFFICIENCY`]).
    pub compute_efficiency: f64,
    /// Host-side time per engine step (scheduling, sampling, detokenization), seconds.
    pub step_overhead_s: f64,
    /// vLLM `gpu_memory_utilization`: share of GPU memory for weights + KV cache.
    pub gpu_memory_utilization: f64,
    /// vLLM `max_num_seqs`: sequences in flight at most.
    pub max_num_seqs: u32,
    /// The link between tensor-parallel ranks (all-reduce latency and per-direction bandwidth).
    pub interconnect: LinkSpec,
}

/// Why a model cannot be served as configured.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ServingError {
    #[error("the weights ({weights_gb:.1} GB per GPU) leave no KV cache within {usable_gb:.1} GB")]
    NoKvCache { weights_gb: f64, usable_gb: f64 },
}

/// One model served on `tensor_parallel` GPUs: its step roofline and its KV capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepCost {
    /// What a step streams and computes per GPU (`cost::roofline`).
    pub roofline: StepRoofline,
    /// Tokens the KV cache holds (all GPUs of the group together).
    pub kv_capacity_tokens: u64,
    pub max_num_seqs: u32,
}

impl StepCost {
    pub fn new(
        shape: &DenseModelShape,
        params: &ServingParams,
        tensor_parallel: u32,
    ) -> Result<StepCost, ServingError> {
        let tp = f64::from(tensor_parallel.max(1));
        let weight_bytes = shape.weight_bytes() / tp;
        let kv_bytes_per_token = shape.kv_bytes_per_token() / tp;
        let kv_capacity_tokens = params
            .gpu
            .kv_capacity_tokens(
                params.gpu_memory_utilization,
                weight_bytes,
                kv_bytes_per_token,
            )
            .ok_or(ServingError::NoKvCache {
                weights_gb: weight_bytes / 1e9,
                usable_gb: params.gpu.memory_gb * params.gpu_memory_utilization,
            })?;
        let roofline = StepRoofline::dense(
            shape,
            Roofline::new(
                &params.gpu,
                params.memory_efficiency,
                params.compute_efficiency,
            ),
            TensorParallel {
                degree: tensor_parallel.max(1),
                link: params.interconnect,
            },
            params.step_overhead_s * 1e9,
        );
        Ok(StepCost {
            roofline,
            kv_capacity_tokens,
            max_num_seqs: params.max_num_seqs.max(1),
        })
    }

    /// Steady-state decode throughput (tokens/s) of `batch` sequences of `context` tokens each.
    pub fn decode_tokens_per_s(&self, batch: u64, context: u64) -> f64 {
        let step = DecodeStep {
            batch,
            context_tokens: batch * context,
            prefill_tokens: 0,
            prefill_square: 0,
        };
        batch as f64 / step.seconds(self)
    }
}

/// One generation request: its prompt length and the number of tokens it will generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GenerationRequest {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// What one session's generation did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SessionStats {
    pub duration: SimDuration,
    pub prompts: u64,
    pub steps: u64,
    pub output_tokens: u64,
    /// Mean sequences in flight per step.
    pub mean_batch: f64,
    pub max_batch: u64,
    /// Sequences evicted (and recomputed) because the KV cache ran full.
    pub preemptions: u64,
}

impl SessionStats {
    pub fn tokens_per_s(&self) -> f64 {
        let seconds = self.duration.as_secs_f64();
        if seconds > 0.0 {
            self.output_tokens as f64 / seconds
        } else {
            0.0
        }
    }
}

/// Generates `requests` (in order) with continuous batching: before each step, waiting requests
/// are admitted first-come first-served while fewer than `max_num_seqs` run and the KV cache
/// has room for the prompt; each step emits one token per running sequence (the admission step
/// runs the prefill and emits the first); when the cache overflows, the newest sequence is
/// preempted back to the head of the queue and later recomputed (vLLM's recompute policy).
///
/// A request longer than the whole cache would never fit; callers check
/// `prompt + output <= kv_capacity_tokens` first (the scenario validation does), and such a
/// request is run alone here, unbounded by the cache, rather than looping forever.
pub fn run_session(cost: &StepCost, requests: &[GenerationRequest]) -> SessionStats {
    run_session_with(cost, requests, &mut |step: &DecodeStep| step.seconds(cost))
}

/// One continuous-batching step of a session as the loop of [`run_session_with`] builds it:
/// what a step-cost implementation (the analytic model, or a live executor) prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DecodeStep {
    /// Sequences in flight (each emits one token).
    pub batch: u64,
    /// Tokens cached by those sequences, this step's prompts included.
    pub context_tokens: u64,
    /// New prompt tokens prefilled in this step.
    pub prefill_tokens: u64,
    /// Sum of the squared lengths of those prompts (causal prefill attention).
    pub prefill_square: u64,
}

impl DecodeStep {
    /// The roofline's seconds for this step: every sequence in flight and every prompt token
    /// is a row through the layers (the admission step runs the prefill and emits the first
    /// token), the head scores one row per sequence.
    pub fn seconds(&self, cost: &StepCost) -> f64 {
        let work = StepTokens {
            rows: self.batch + self.prefill_tokens,
            sequences: self.batch,
            context_tokens: self.context_tokens,
            prefill_square: self.prefill_square as f64,
        };
        cost.roofline.price(&work).nanos * 1e-9
    }
}

/// [`run_session`] with each step priced by `step_seconds`: admission, preemption and the
/// KV-cache bookkeeping come from `cost` (capacity, sequence slots), so the steps themselves
/// (their batches, contexts and prefills) do not depend on how they are priced.
pub fn run_session_with(
    cost: &StepCost,
    requests: &[GenerationRequest],
    step_seconds: &mut dyn FnMut(&DecodeStep) -> f64,
) -> SessionStats {
    let capacity = cost.kv_capacity_tokens;
    let mut waiting: VecDeque<usize> = (0..requests.len()).collect();
    // order -> (request index, admission step)
    let mut running: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
    let mut finishing: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let (mut sum_prompt, mut sum_admit) = (0u64, 0u64);
    let mut next_order = 0u64;
    let mut step = 0u64;
    let mut duration_ns = 0u64;
    let (mut batch_sum, mut max_batch, mut preemptions, mut tokens) = (0u64, 0u64, 0u64, 0u64);
    while !waiting.is_empty() || !running.is_empty() {
        let n = running.len() as u64;
        let cached = sum_prompt + n * step - sum_admit;
        let (mut prefill, mut prefill_square) = (0u64, 0u64);
        let mut used = cached + n;
        while (running.len() as u64) < u64::from(cost.max_num_seqs) {
            let Some(&idx) = waiting.front() else { break };
            let prompt = u64::from(requests[idx].prompt_tokens);
            if !running.is_empty() && used + prompt + 1 > capacity {
                break;
            }
            waiting.pop_front();
            let output = u64::from(requests[idx].output_tokens.max(1));
            running.insert(next_order, (idx, step));
            finishing.push(Reverse((step + output - 1, next_order)));
            next_order += 1;
            sum_prompt += prompt;
            sum_admit += step;
            prefill += prompt;
            prefill_square += prompt * prompt;
            used += prompt + 1;
        }
        let batch = running.len() as u64;
        let context = sum_prompt + batch * step - sum_admit;
        let seconds = step_seconds(&DecodeStep {
            batch,
            context_tokens: context,
            prefill_tokens: prefill,
            prefill_square,
        });
        duration_ns += (seconds * 1e9).round() as u64;
        batch_sum += batch;
        max_batch = max_batch.max(batch);
        tokens += batch;
        while let Some(&Reverse((finish, order))) = finishing.peek() {
            if finish > step {
                break;
            }
            finishing.pop();
            if let Some((idx, admitted)) = running.remove(&order) {
                sum_prompt -= u64::from(requests[idx].prompt_tokens);
                sum_admit -= admitted;
            }
        }
        step += 1;
        // The next step needs one more token per sequence; evict the newest until it fits.
        loop {
            let n = running.len() as u64;
            let needed = sum_prompt + n * step - sum_admit + n;
            if n <= 1 || needed <= capacity {
                break;
            }
            let (order, (idx, admitted)) = running.pop_last().expect("n > 1");
            let _ = order;
            sum_prompt -= u64::from(requests[idx].prompt_tokens);
            sum_admit -= admitted;
            // Tokens it generated are recomputed later: they do not count as output.
            tokens -= step - admitted;
            waiting.push_front(idx);
            preemptions += 1;
        }
    }
    SessionStats {
        duration: SimDuration(duration_ns),
        prompts: requests.len() as u64,
        steps: step,
        output_tokens: tokens,
        mean_batch: if step > 0 {
            batch_sum as f64 / step as f64
        } else {
            0.0
        },
        max_batch,
        preemptions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ServingParams {
        ServingParams {
            gpu: GpuSpec::by_name("A100-80GB").unwrap(),
            memory_efficiency: 0.8,
            compute_efficiency: 0.6,
            step_overhead_s: 0.0,
            gpu_memory_utilization: 0.9,
            max_num_seqs: 256,
            interconnect: LinkSpec {
                bandwidth_bytes_per_s: 300e9,
                latency_ns: 10_000.0,
            },
        }
    }

    fn cost(name: &str) -> StepCost {
        StepCost::new(&DenseModelShape::preset(name).unwrap(), &params(), 1).unwrap()
    }

    #[test]
    fn one_request_takes_one_step_per_token_at_the_weight_streaming_floor() {
        let cost = cost("qwen2.5-7b-instruct");
        let stats = run_session(
            &cost,
            &[GenerationRequest {
                prompt_tokens: 1,
                output_tokens: 100,
            }],
        );
        assert_eq!((stats.steps, stats.output_tokens), (100, 100));
        // Every block and the head streamed once per step (the embedding table is a lookup).
        let shape = DenseModelShape::preset("qwen2.5-7b-instruct").unwrap();
        let streamed = 28.0 * shape.block_weight_bytes() + shape.head_weight_bytes();
        let floor = streamed / (2039e9 * 0.8);
        let per_step = stats.duration.as_secs_f64() / 100.0;
        assert!(
            per_step >= floor && per_step < floor * 1.01,
            "{per_step} {floor}"
        );
    }

    #[test]
    fn throughput_grows_with_prompts_in_flight_then_saturates() {
        let cost = cost("deepseek-r1-distill-llama-8b");
        let tps = |b| cost.decode_tokens_per_s(b, 2000);
        assert!(tps(8) > 5.0 * tps(1));
        // Long contexts make the KV reads dominate: going from 128 to 256 gains little.
        assert!(tps(256) < 1.5 * tps(128), "{} {}", tps(128), tps(256));
        let short = self::cost("gemma-2-9b-it");
        assert!(short.decode_tokens_per_s(256, 300) > 1.5 * short.decode_tokens_per_s(64, 300));
    }

    #[test]
    fn every_token_is_generated_once_even_under_preemption() {
        let mut tight = cost("deepseek-r1-distill-llama-8b");
        tight.kv_capacity_tokens = 5_000;
        let requests: Vec<_> = (0..20)
            .map(|i| GenerationRequest {
                prompt_tokens: 100,
                output_tokens: 500 + 37 * i,
            })
            .collect();
        let stats = run_session(&tight, &requests);
        let expected: u64 = requests.iter().map(|r| u64::from(r.output_tokens)).sum();
        assert_eq!(stats.output_tokens, expected);
        assert!(stats.preemptions > 0);
        // Admission only needs room for the prompt and its first token.
        assert!(stats.max_batch <= 5_000 / 101, "{}", stats.max_batch);
    }

    #[test]
    fn batching_beats_serial_generation() {
        let cost = cost("gemma-2-9b-it");
        let requests = vec![
            GenerationRequest {
                prompt_tokens: 200,
                output_tokens: 200
            };
            64
        ];
        let together = run_session(&cost, &requests).duration;
        let one = run_session(&cost, &requests[..1]).duration;
        assert!(together.0 < 64 * one.0 / 10);
        assert!(together.0 > one.0);
    }

    #[test]
    fn weights_larger_than_memory_are_an_error() {
        let mut p = params();
        p.gpu.memory_gb = 10.0;
        let shape = DenseModelShape::preset("glm-4-9b").unwrap();
        assert!(matches!(
            StepCost::new(&shape, &p, 1),
            Err(ServingError::NoKvCache { .. })
        ));
        assert!(StepCost::new(&shape, &p, 4).is_ok());
    }
}
