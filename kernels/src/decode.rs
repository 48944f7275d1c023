//! One decode step of a dense model layer: the weight-streaming GEMM `y = x W^T` over the
//! batch (a GEMV at batch 1; bf16 in and out, f32 accumulation: cuBLAS on CUDA; the CPU
//! reference processes rows in tiles, weights read once per tile) and attention of each
//! sequence's new query over its KV cache of `context` tokens (grouped-query heads allowed;
//! f32 output, `source::DECODE` on CUDA).

use crate::KernelInputError;
use crate::moe::check_tile_tokens;
use crate::numeric::{Weights, dot, narrow, random_bf16, widen};
use half::bf16;

/// The dimensions of the dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    /// Input width of the GEMM (the model's hidden size).
    pub hidden: usize,
    /// Output width of the GEMM (all the layer's projections side by side).
    pub out_features: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl DecodeShape {
    /// The step's GEMM over `batch` rows: `hidden -> out_features` (what cuBLAS runs).
    pub fn gemm(&self, batch: usize) -> crate::blas::RowMajorGemm {
        crate::blas::RowMajorGemm {
            rows: batch,
            k: self.hidden,
            n: self.out_features,
        }
    }

    /// One GPU's shard of this layer under tensor parallelism over `g` GPUs, as a serving
    /// stack splits it: `1/g` of the GEMM's outputs (rounded up) and of the attention heads
    /// (at least one KV head, the query heads a multiple of the KV heads), the head size kept.
    pub fn shard(&self, g: usize) -> DecodeShape {
        let g = g.max(1);
        let n_kv_heads = (self.n_kv_heads / g).max(1);
        let n_heads = ((self.n_heads / g) / n_kv_heads).max(1) * n_kv_heads;
        DecodeShape {
            hidden: self.hidden,
            out_features: self.out_features.div_ceil(g),
            n_heads,
            n_kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// The decode-step shapes of a dense model given its dimensions: one transformer block (its
    /// matmuls as one GEMM of `block_out_features` outputs over `dims.hidden`, with attention)
    /// and the output head (`dims.vocab` outputs, no attention).
    pub fn of_dense(dims: DenseDims) -> (Self, Self) {
        let block = DecodeShape {
            hidden: dims.hidden,
            out_features: dims.block_out_features,
            n_heads: dims.n_heads,
            n_kv_heads: dims.n_kv_heads,
            head_dim: dims.head_dim,
        };
        let head = DecodeShape {
            out_features: dims.vocab,
            ..block
        };
        (block, head)
    }
}

/// What the kernels need of a dense model to run its decode step (the model catalogue and its
/// scaling live in `expertsim-scenario`; the kernels know no model family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseDims {
    pub hidden: usize,
    /// Output width of one block's matmuls side by side (block parameters / hidden).
    pub block_out_features: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
}

/// Inputs of one decode step.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeProblem {
    pub shape: DecodeShape,
    pub tile_tokens: usize,
    pub batch: usize,
    /// KV-cache tokens per sequence (0: no attention, its output is zero).
    pub context: usize,
    /// `[batch][hidden]`.
    pub x: Vec<bf16>,
    /// `[out_features][hidden]`.
    pub w: Weights,
    /// `[batch][n_heads][head_dim]`.
    pub q: Vec<bf16>,
    /// `[batch][context][n_kv_heads][head_dim]`.
    pub k_cache: Vec<bf16>,
    /// Same layout as `k_cache`.
    pub v_cache: Vec<bf16>,
}

/// Results of one decode step.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeOutput {
    /// `[batch][out_features]`, bf16 as a bf16 GEMM writes it.
    pub y: Vec<bf16>,
    /// `[batch][n_heads][head_dim]`.
    pub attention: Vec<f32>,
}

impl DecodeProblem {
    /// Checks sizes so no kernel reads out of bounds.
    pub fn validate(&self) -> Result<(), KernelInputError> {
        let s = self.shape;
        let bad = |problem: String| Err(KernelInputError::new("decode", problem));
        check_tile_tokens(self.tile_tokens)?;
        if s.hidden == 0 || s.out_features == 0 || s.n_heads == 0 || s.n_kv_heads == 0 {
            return bad(format!("every dimension must be positive: {s:?}"));
        }
        if s.head_dim == 0 || s.head_dim > 1024 || s.n_heads % s.n_kv_heads != 0 {
            return bad(format!(
                "head_dim must be in 1..=1024 and n_kv_heads must divide n_heads: {s:?}"
            ));
        }
        if self.batch == 0 {
            return bad("batch must be at least 1".into());
        }
        let kv = self.batch * self.context * s.n_kv_heads * s.head_dim;
        for (name, len, want) in [
            ("x", self.x.len(), self.batch * s.hidden),
            ("w", self.w.len(), s.out_features * s.hidden),
            ("q", self.q.len(), self.batch * s.n_heads * s.head_dim),
            ("k_cache", self.k_cache.len(), kv),
            ("v_cache", self.v_cache.len(), kv),
        ] {
            if len != want {
                return bad(format!("{name} has {len} values, expected {want}"));
            }
        }
        Ok(())
    }

    /// A random problem (never zero inputs); with `synthetic_weights` the weight matrix is a
    /// repeated random table (cheap for output-head-sized matrices; timing is unaffected).
    pub fn random(
        shape: DecodeShape,
        tile_tokens: usize,
        batch: usize,
        context: usize,
        seed: u64,
        synthetic_weights: bool,
    ) -> DecodeProblem {
        let kv = batch * context * shape.n_kv_heads * shape.head_dim;
        let w_len = shape.out_features * shape.hidden;
        let w_scale = 1.0 / (shape.hidden as f32).sqrt();
        let w: Weights = if synthetic_weights {
            crate::numeric::synthetic_bf16(w_len, w_scale, seed, "decode.w").into()
        } else {
            random_bf16(w_len, w_scale, seed, "decode.w").into()
        };
        DecodeProblem {
            shape,
            tile_tokens,
            batch,
            context,
            x: random_bf16(batch * shape.hidden, 1.0, seed, "decode.x"),
            w,
            q: random_bf16(
                batch * shape.n_heads * shape.head_dim,
                1.0,
                seed,
                "decode.q",
            ),
            k_cache: random_bf16(kv, 1.0, seed, "decode.k"),
            v_cache: random_bf16(kv, 1.0, seed, "decode.v"),
        }
    }
}

impl DecodeProblem {
    /// This problem's weights with fresh inputs for `batch` rows and `context` cached tokens
    /// per row, from a repeated random table ([`crate::numeric::synthetic_bf16`]: never zero,
    /// cheap for the gigabytes of a long KV cache; timing does not depend on the values).
    pub fn with_synthetic_inputs(mut self, batch: usize, context: usize, seed: u64) -> Self {
        let s = self.shape;
        let input = |len, name| crate::numeric::synthetic_bf16(len, 1.0, seed, name);
        let kv = batch * context * s.n_kv_heads * s.head_dim;
        self.batch = batch;
        self.context = context;
        self.x = input(batch * s.hidden, "bench.x");
        self.q = input(batch * s.n_heads * s.head_dim, "bench.q");
        self.k_cache = input(kv, "bench.k");
        self.v_cache = input(kv, "bench.v");
        self
    }
}

/// The CPU reference of the decode step.
pub fn decode_step_cpu(p: &DecodeProblem) -> Result<DecodeOutput, KernelInputError> {
    p.validate()?;
    let s = p.shape;
    let tile = p.tile_tokens;
    let mut y = vec![bf16::ZERO; p.batch * s.out_features];
    let mut rows = vec![0.0f32; tile * s.hidden];
    let mut weight_row = vec![0.0f32; s.hidden];
    let mut row0 = 0;
    while row0 < p.batch {
        let valid = (p.batch - row0).min(tile);
        rows.fill(0.0);
        widen(
            &p.x[row0 * s.hidden..(row0 + valid) * s.hidden],
            &mut rows[..valid * s.hidden],
        );
        for n in 0..s.out_features {
            widen(&p.w[n * s.hidden..(n + 1) * s.hidden], &mut weight_row);
            // The whole tile is computed, as a GPU block does; padding rows are dropped.
            for r in 0..tile {
                let v = dot(&rows[r * s.hidden..(r + 1) * s.hidden], &weight_row);
                if r < valid {
                    y[(row0 + r) * s.out_features + n] = narrow(v);
                }
            }
        }
        row0 += tile;
    }
    let d = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    let mut attention = vec![0.0f32; p.batch * s.n_heads * d];
    let mut q = vec![0.0f32; d];
    let mut k = vec![0.0f32; d];
    let mut scores = vec![0.0f32; p.context];
    for b in 0..p.batch {
        for h in 0..s.n_heads {
            if p.context == 0 {
                continue;
            }
            let kvh = h / group;
            let q_at = (b * s.n_heads + h) * d;
            widen(&p.q[q_at..q_at + d], &mut q);
            let kv_at = |t: usize| ((b * p.context + t) * s.n_kv_heads + kvh) * d;
            let mut max = f32::NEG_INFINITY;
            for (t, score) in scores.iter_mut().enumerate() {
                widen(&p.k_cache[kv_at(t)..kv_at(t) + d], &mut k);
                *score = dot(&q, &k) * scale;
                max = max.max(*score);
            }
            let mut total = 0.0f32;
            for score in scores.iter_mut() {
                *score = (*score - max).exp();
                total += *score;
            }
            let out = &mut attention[q_at..q_at + d];
            for (t, &weight) in scores.iter().enumerate() {
                for (o, v) in out.iter_mut().zip(&p.v_cache[kv_at(t)..kv_at(t) + d]) {
                    *o += weight * v.to_f32();
                }
            }
            for o in out.iter_mut() {
                *o /= total;
            }
        }
    }
    Ok(DecodeOutput { y, attention })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_parallel_shard_divides_outputs_and_heads() {
        // Mixtral-8x7B's attention and router over 4 GPUs: 10,248 outputs, 32 query and 8 KV
        // heads -> 2,562 outputs, 8 and 2 heads.
        let layer = DecodeShape {
            hidden: 4096,
            out_features: 10_248,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
        };
        let shard = layer.shard(4);
        assert_eq!(
            (
                shard.out_features,
                shard.n_heads,
                shard.n_kv_heads,
                shard.head_dim
            ),
            (2_562, 8, 2, 128)
        );
        assert_eq!(layer.shard(1), layer);
        // More GPUs than KV heads: one KV head each, query heads a multiple of it.
        let tiny = DecodeShape {
            hidden: 64,
            out_features: 7,
            n_heads: 4,
            n_kv_heads: 4,
            head_dim: 16,
        };
        let s = tiny.shard(8);
        assert_eq!((s.out_features, s.n_heads, s.n_kv_heads), (1, 1, 1));
    }
    use crate::moe::tests::relative_error;

    /// Plain f64: the GEMM as nested sums, softmax attention straight from its definition.
    fn decode_step_f64(p: &DecodeProblem) -> (Vec<f64>, Vec<f64>) {
        let s = p.shape;
        let f = |v: bf16| f64::from(v.to_f32());
        let mut y = vec![0.0; p.batch * s.out_features];
        for b in 0..p.batch {
            for n in 0..s.out_features {
                y[b * s.out_features + n] = (0..s.hidden)
                    .map(|k| f(p.x[b * s.hidden + k]) * f(p.w[n * s.hidden + k]))
                    .sum();
            }
        }
        let d = s.head_dim;
        let mut att = vec![0.0; p.batch * s.n_heads * d];
        for b in 0..p.batch {
            for h in 0..s.n_heads {
                let kvh = h / (s.n_heads / s.n_kv_heads);
                let at = |t: usize| ((b * p.context + t) * s.n_kv_heads + kvh) * d;
                let scores: Vec<f64> = (0..p.context)
                    .map(|t| {
                        (0..d)
                            .map(|i| f(p.q[(b * s.n_heads + h) * d + i]) * f(p.k_cache[at(t) + i]))
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                for i in 0..d {
                    att[(b * s.n_heads + h) * d + i] = (0..p.context)
                        .map(|t| (scores[t] - max).exp() / total * f(p.v_cache[at(t) + i]))
                        .sum();
                }
            }
        }
        (y, att)
    }

    /// f32 accumulation over a few hundred terms of bf16 inputs (exact in f32): the error is
    /// a few f32 ulps of the running sums, far below 1e-4 of the output scale (attention, an
    /// f32 output).
    const F32_BOUND: f64 = 1e-4;

    #[test]
    fn cpu_reference_matches_f64() {
        let shape = DecodeShape {
            hidden: 96,
            out_features: 70,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
        };
        for (tile, batch, context, seed) in [(4, 1, 1, 1), (8, 13, 33, 2), (64, 5, 200, 3)] {
            let p = DecodeProblem::random(shape, tile, batch, context, seed, false);
            let got = decode_step_cpu(&p).unwrap();
            let (y, att) = decode_step_f64(&p);
            // y is rounded once to bf16: within 2^-9 of each value, so 2^-8 of the scale.
            let ey = relative_error(got.y.iter().map(|v| f64::from(v.to_f32())), &y);
            let ea = relative_error(got.attention.iter().map(|v| f64::from(*v)), &att);
            assert!(
                ey < 1.0 / 256.0 && ea < F32_BOUND,
                "batch {batch}: {ey} {ea}"
            );
        }
    }

    #[test]
    fn empty_context_means_no_attention_and_bad_sizes_are_errors() {
        let shape = DecodeShape {
            hidden: 8,
            out_features: 8,
            n_heads: 2,
            n_kv_heads: 2,
            head_dim: 4,
        };
        let p = DecodeProblem::random(shape, 4, 3, 0, 1, true);
        let out = decode_step_cpu(&p).unwrap();
        assert!(out.attention.iter().all(|v| *v == 0.0));
        let mut bad = p.clone();
        bad.q.pop();
        assert!(
            decode_step_cpu(&bad)
                .unwrap_err()
                .to_string()
                .contains("q has")
        );
        let mut bad = p;
        bad.shape.n_kv_heads = 3;
        assert!(decode_step_cpu(&bad).is_err());
    }
}
