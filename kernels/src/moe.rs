//! The MoE layer: group tokens by expert (histogram, exclusive prefix sum, scatter), gather
//! each expert's rows, run its SwiGLU FFN as two GEMMs (gate and up fused as one `hidden ->
//! 2 x expert_ffn` GEMM, the activation, then `expert_ffn -> hidden`) with bf16 storage and f32
//! accumulation, then un-permute and combine with the router weights. The CPU reference here
//! has the semantics of the CUDA path (`cuda`: the grouping, gather, activation and combine are
//! `source::MOE`'s kernels, the GEMMs cuBLAS's, one per expert with tokens): every GEMM output
//! is rounded to bf16, as a bf16 GEMM writes it.
//!
//! Tiling shapes the CPU reference's cost, not its values: each expert's rows are computed
//! `tile_tokens` at a time and a partial tile in full (zero rows whose results are dropped),
//! each tile re-reading the expert's weights, so its latency steps at tile boundaries as a
//! GPU GEMM's does at its own M tile. cuBLAS picks its own tiles on the GPU.

use crate::KernelInputError;
use crate::numeric::{Weights, dot, narrow, random_bf16, random_weights, silu, widen};
use half::bf16;
use rand::RngExt;

/// The largest tile the CPU reference accepts.
pub const MAX_TILE_TOKENS: usize = 256;
/// Tiles are multiples of 4 rows (GPU GEMM M tiles are 64, 128 or 256; 4 keeps small CPU
/// smoke runs possible).
pub const TILE_ROW_GROUPS: usize = 4;
/// The most experts a layer may have: the CUDA grouping kernel keeps one counter per expert
/// in one block of 1024 threads.
pub const MAX_EXPERTS: usize = 1024;

/// Checks a tile size: a multiple of 4 between 4 and [`MAX_TILE_TOKENS`].
pub fn check_tile_tokens(tile_tokens: usize) -> Result<(), KernelInputError> {
    if tile_tokens == 0 || tile_tokens > MAX_TILE_TOKENS || tile_tokens % TILE_ROW_GROUPS != 0 {
        return Err(KernelInputError::new(
            "moe",
            format!(
                "tile_tokens = {tile_tokens}: must be a multiple of {TILE_ROW_GROUPS} between {TILE_ROW_GROUPS} and {MAX_TILE_TOKENS}"
            ),
        ));
    }
    Ok(())
}

/// The dimensions of one MoE layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub hidden: usize,
    pub expert_ffn: usize,
    pub n_experts: usize,
    pub top_k: usize,
}

impl MoeShape {
    /// One expert's two GEMMs over its `rows` grouped rows: gate and up fused (`hidden -> 2 x
    /// expert_ffn`), then down (`expert_ffn -> hidden`).
    pub fn expert_gemms(&self, rows: usize) -> [crate::blas::RowMajorGemm; 2] {
        [
            crate::blas::RowMajorGemm {
                rows,
                k: self.hidden,
                n: 2 * self.expert_ffn,
            },
            crate::blas::RowMajorGemm {
                rows,
                k: self.expert_ffn,
                n: self.hidden,
            },
        ]
    }
}

/// Inputs of one MoE layer. Weight layouts are PyTorch `Linear` (output-major), the gate and
/// up projections fused as serving stacks store them: `w13`: `[n_experts][2 x expert_ffn]
/// [hidden]` (each expert's gate rows, then its up rows); `w2`: `[n_experts][hidden]
/// [expert_ffn]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeProblem {
    pub shape: MoeShape,
    /// Rows per tile of the CPU reference (see the module comment).
    pub tile_tokens: usize,
    /// `[tokens][hidden]`.
    pub x: Vec<bf16>,
    /// `[tokens][top_k]`: the router's chosen experts.
    pub topk_ids: Vec<i32>,
    /// `[tokens][top_k]`: the router's combine weights.
    pub topk_weights: Vec<f32>,
    pub w13: Weights,
    pub w2: Weights,
}

/// Tokens grouped by expert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    /// Assignments (token x slot) per expert.
    pub counts: Vec<u32>,
    /// Exclusive prefix sum of `counts`, with the total appended (`n_experts + 1` entries).
    pub offsets: Vec<u32>,
    /// Assignment indices (`token * top_k + slot`) sorted by expert.
    pub sorted_assignments: Vec<u32>,
    /// Inverse of `sorted_assignments`: where each assignment's row went.
    pub position_of: Vec<u32>,
}

/// One expert's GEMMs: its `rows` grouped rows start at row `row0` of the grouped buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertRows {
    pub expert: usize,
    pub row0: usize,
    pub rows: usize,
}

/// The experts that received tokens, in expert order, from a grouping's offsets: one pair of
/// GEMMs each (an expert without tokens is not read).
pub fn active_experts(offsets: &[u32]) -> Vec<ExpertRows> {
    offsets
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1] > w[0])
        .map(|(expert, w)| ExpertRows {
            expert,
            row0: w[0] as usize,
            rows: (w[1] - w[0]) as usize,
        })
        .collect()
}

/// The MoE layer's results.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeOutput {
    pub grouping: Grouping,
    /// `[tokens][hidden]`, bf16.
    pub out: Vec<bf16>,
}

impl MoeProblem {
    /// Tokens in the batch.
    pub fn tokens(&self) -> usize {
        self.x.len() / self.shape.hidden.max(1)
    }

    /// Checks sizes, tile and expert ids; a problem that passes cannot make a kernel read out
    /// of bounds.
    pub fn validate(&self) -> Result<(), KernelInputError> {
        let s = self.shape;
        let bad = |problem: String| Err(KernelInputError::new("moe", problem));
        check_tile_tokens(self.tile_tokens)?;
        if s.hidden == 0 || s.expert_ffn == 0 || s.n_experts == 0 || s.top_k == 0 {
            return bad(format!("every dimension must be positive: {s:?}"));
        }
        if s.n_experts > MAX_EXPERTS {
            return bad(format!(
                "n_experts {} exceeds {MAX_EXPERTS}, the most one grouping block counts",
                s.n_experts
            ));
        }
        if s.top_k > s.n_experts {
            return bad(format!(
                "top_k {} exceeds n_experts {}",
                s.top_k, s.n_experts
            ));
        }
        if self.x.is_empty() || self.x.len() % s.hidden != 0 {
            return bad(format!(
                "x has {} values, not a positive multiple of hidden {}",
                self.x.len(),
                s.hidden
            ));
        }
        let assignments = self.tokens() * s.top_k;
        // The GEMMs' dimensions are i32 for cuBLAS: rows x widths must stay addressable.
        let widest = 2 * s.expert_ffn.max(s.hidden);
        if assignments > u32::MAX as usize / 2 || assignments > i32::MAX as usize / widest {
            return bad(format!(
                "{assignments} assignments exceed the GEMMs' index range"
            ));
        }
        let per_expert = s.expert_ffn * s.hidden;
        for (name, len, want) in [
            ("topk_ids", self.topk_ids.len(), assignments),
            ("topk_weights", self.topk_weights.len(), assignments),
            ("w13", self.w13.len(), s.n_experts * 2 * per_expert),
            ("w2", self.w2.len(), s.n_experts * per_expert),
        ] {
            if len != want {
                return bad(format!("{name} has {len} values, expected {want}"));
            }
        }
        if let Some((i, id)) = self
            .topk_ids
            .iter()
            .enumerate()
            .find(|(_, id)| **id < 0 || **id as usize >= s.n_experts)
        {
            return bad(format!(
                "topk_ids[{i}] = {id} is not an expert of 0..{}",
                s.n_experts
            ));
        }
        if let Some(i) = self.topk_weights.iter().position(|w| !w.is_finite()) {
            return bad(format!("topk_weights[{i}] is not finite"));
        }
        Ok(())
    }

    /// A random problem (never zero inputs): `tokens` tokens routed to distinct random
    /// experts, activations in [0.1, 1] with random signs, weights scaled by 1/sqrt(fan-in).
    pub fn random(shape: MoeShape, tile_tokens: usize, tokens: usize, seed: u64) -> MoeProblem {
        let mut rng = expertsim_scenario::rng::stream(seed, "moe.topk");
        let mut topk_ids = Vec::with_capacity(tokens * shape.top_k);
        for _ in 0..tokens {
            let start = topk_ids.len();
            while topk_ids.len() - start < shape.top_k {
                let e = rng.random_range(0..shape.n_experts) as i32;
                if !topk_ids[start..].contains(&e) {
                    topk_ids.push(e);
                }
            }
        }
        let weights = |len, fan_in: usize, name| -> Weights {
            random_bf16(len, 1.0 / (fan_in as f32).sqrt(), seed, name).into()
        };
        let per_expert = shape.expert_ffn * shape.hidden;
        MoeProblem {
            shape,
            tile_tokens,
            x: random_bf16(tokens * shape.hidden, 1.0, seed, "moe.x"),
            topk_weights: random_weights(tokens * shape.top_k, seed, "moe.weights"),
            topk_ids,
            w13: weights(shape.n_experts * 2 * per_expert, shape.hidden, "moe.w13"),
            w2: weights(shape.n_experts * per_expert, shape.expert_ffn, "moe.w2"),
        }
    }
}

impl MoeProblem {
    /// [`MoeProblem::random`] of one token with weights from a repeated random table
    /// (`numeric::synthetic_bf16`: never zero, cheap for the gigabytes of a real model's
    /// experts; timing does not depend on the values): for timing, the inputs set per point.
    pub fn synthetic(shape: MoeShape, tile_tokens: usize, seed: u64) -> MoeProblem {
        let per_expert = shape.expert_ffn * shape.hidden;
        let weights = |len, fan_in: usize, name| -> Weights {
            crate::numeric::synthetic_bf16(len, 1.0 / (fan_in as f32).sqrt(), seed, name).into()
        };
        // The token, its experts and combine weights as `random` draws them (its weights of
        // one-wide experts are dropped).
        let mut problem = MoeProblem::random(
            MoeShape {
                expert_ffn: 1,
                ..shape
            },
            tile_tokens,
            1,
            seed,
        );
        problem.shape = shape;
        problem.w13 = weights(shape.n_experts * 2 * per_expert, shape.hidden, "moe.w13");
        problem.w2 = weights(shape.n_experts * per_expert, shape.expert_ffn, "moe.w2");
        problem
    }
}

/// Histogram, exclusive prefix sum and a stable scatter of the assignments by expert. Ids
/// must be valid (see [`MoeProblem::validate`]).
pub fn group_tokens(topk_ids: &[i32], n_experts: usize) -> Grouping {
    let mut counts = vec![0u32; n_experts];
    for &e in topk_ids {
        counts[e as usize] += 1;
    }
    let mut offsets = Vec::with_capacity(n_experts + 1);
    let mut rows = 0u32;
    for &c in &counts {
        offsets.push(rows);
        rows += c;
    }
    offsets.push(rows);
    let mut cursor = offsets[..n_experts].to_vec();
    let mut sorted_assignments = vec![0u32; topk_ids.len()];
    let mut position_of = vec![0u32; topk_ids.len()];
    for (a, &e) in topk_ids.iter().enumerate() {
        let pos = cursor[e as usize];
        cursor[e as usize] += 1;
        sorted_assignments[pos as usize] = a as u32;
        position_of[a] = pos;
    }
    Grouping {
        counts,
        offsets,
        sorted_assignments,
        position_of,
    }
}

/// One tiled GEMM over an expert's rows: `out[row][n] = sum_k in[row][k] * w[n][k]` for the
/// rows of a `tile` (padded with zero rows to `tile_tokens`), weights read once per tile.
struct TileGemm<'a> {
    k: usize,
    n: usize,
    tile_tokens: usize,
    /// f32 copies of the tile's input rows (zero rows for padding), `tile_tokens x k`.
    rows: &'a [f32],
}

impl TileGemm<'_> {
    /// Calls `emit(row, n, value)` for every row of the tile (padding included: the caller
    /// drops those) and every output column, reading each weight row once.
    fn run(
        &self,
        weights: &[bf16],
        weight_row: &mut [f32],
        mut emit: impl FnMut(usize, usize, f32),
    ) {
        for n in 0..self.n {
            widen(&weights[n * self.k..(n + 1) * self.k], weight_row);
            for r in 0..self.tile_tokens {
                emit(
                    r,
                    n,
                    dot(&self.rows[r * self.k..(r + 1) * self.k], weight_row),
                );
            }
        }
    }
}

/// The CPU reference of the whole MoE layer.
pub fn moe_layer_cpu(p: &MoeProblem) -> Result<MoeOutput, KernelInputError> {
    p.validate()?;
    let s = p.shape;
    let (hidden, ffn, tile) = (s.hidden, s.expert_ffn, p.tile_tokens);
    let grouping = group_tokens(&p.topk_ids, s.n_experts);
    let rows_total = p.topk_ids.len();
    let mut h = vec![bf16::ZERO; rows_total * ffn];
    let mut y = vec![bf16::ZERO; rows_total * hidden];
    let mut x_rows = vec![0.0f32; tile * hidden];
    let mut h_rows = vec![0.0f32; tile * ffn];
    let mut gate = vec![0.0f32; tile * ffn];
    let mut weight_row = vec![0.0f32; hidden.max(ffn)];
    for group in active_experts(&grouping.offsets) {
        let e = group.expert;
        let per_expert = ffn * hidden;
        let w13 = &p.w13[e * 2 * per_expert..(e + 1) * 2 * per_expert];
        let (wg, wu) = w13.split_at(per_expert);
        let wd = &p.w2[e * per_expert..(e + 1) * per_expert];
        let end = group.row0 + group.rows;
        let mut row0 = group.row0;
        while row0 < end {
            let valid = (end - row0).min(tile);
            // Gather the tile's token rows; padding rows are zero.
            x_rows.fill(0.0);
            for r in 0..valid {
                let token = grouping.sorted_assignments[row0 + r] as usize / s.top_k;
                widen(
                    &p.x[token * hidden..(token + 1) * hidden],
                    &mut x_rows[r * hidden..(r + 1) * hidden],
                );
            }
            let gemm = TileGemm {
                k: hidden,
                n: ffn,
                tile_tokens: tile,
                rows: &x_rows,
            };
            // The gate/up GEMM writes bf16, which the activation reads back.
            let rounded = |v: f32| narrow(v).to_f32();
            gemm.run(wg, &mut weight_row[..hidden], |r, n, v| {
                gate[r * ffn + n] = rounded(v)
            });
            gemm.run(wu, &mut weight_row[..hidden], |r, n, up| {
                if r < valid {
                    h[(row0 + r) * ffn + n] = narrow(silu(gate[r * ffn + n]) * rounded(up));
                }
            });
            h_rows.fill(0.0);
            widen(
                &h[row0 * ffn..(row0 + valid) * ffn],
                &mut h_rows[..valid * ffn],
            );
            let down = TileGemm {
                k: ffn,
                n: hidden,
                tile_tokens: tile,
                rows: &h_rows,
            };
            down.run(wd, &mut weight_row[..ffn], |r, n, v| {
                if r < valid {
                    y[(row0 + r) * hidden + n] = narrow(v);
                }
            });
            row0 += tile;
        }
    }
    let tokens = p.tokens();
    let mut out = vec![bf16::ZERO; tokens * hidden];
    for t in 0..tokens {
        for c in 0..hidden {
            let mut acc = 0.0f32;
            for j in 0..s.top_k {
                let a = t * s.top_k + j;
                let row = grouping.position_of[a] as usize;
                acc += p.topk_weights[a] * y[row * hidden + c].to_f32();
            }
            out[t * hidden + c] = narrow(acc);
        }
    }
    Ok(MoeOutput { grouping, out })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_synthetic_problem_has_the_shape_and_never_zero_weights() {
        let shape = MoeShape {
            hidden: 48,
            expert_ffn: 40,
            n_experts: 6,
            top_k: 2,
        };
        let p = MoeProblem::synthetic(shape, 16, 3);
        p.validate().unwrap();
        assert_eq!((p.shape, p.tokens()), (shape, 1));
        assert_eq!(p.w13.len(), 6 * 2 * 40 * 48);
        assert_eq!(p.w2.len(), 6 * 40 * 48);
        assert!(p.w13.iter().chain(p.w2.iter()).all(|v| v.to_f32() != 0.0));
        assert!(moe_layer_cpu(&p).is_ok());
    }

    /// The plain f64 MoE layer: no tiles, no grouping, no intermediate rounding.
    #[allow(clippy::needless_range_loop)]
    pub(crate) fn moe_layer_f64(p: &MoeProblem) -> Vec<f64> {
        let s = p.shape;
        let f = |v: bf16| f64::from(v.to_f32());
        let tokens = p.tokens();
        let mut out = vec![0.0; tokens * s.hidden];
        for t in 0..tokens {
            for j in 0..s.top_k {
                let e = p.topk_ids[t * s.top_k + j] as usize;
                let per_expert = s.expert_ffn * s.hidden;
                let x = &p.x[t * s.hidden..(t + 1) * s.hidden];
                let h: Vec<f64> = (0..s.expert_ffn)
                    .map(|n| {
                        let gate_row = e * 2 * per_expert + n * s.hidden;
                        let up_row = gate_row + per_expert;
                        let (mut g, mut u) = (0.0, 0.0);
                        for k in 0..s.hidden {
                            g += f(x[k]) * f(p.w13[gate_row + k]);
                            u += f(x[k]) * f(p.w13[up_row + k]);
                        }
                        g / (1.0 + (-g).exp()) * u
                    })
                    .collect();
                for c in 0..s.hidden {
                    let row = e * per_expert + c * s.expert_ffn;
                    let y: f64 = (0..s.expert_ffn).map(|n| h[n] * f(p.w2[row + n])).sum();
                    out[t * s.hidden + c] += f64::from(p.topk_weights[t * s.top_k + j]) * y;
                }
            }
        }
        out
    }

    /// max |got - want| / max |want|: the error relative to the output's scale.
    pub(crate) fn relative_error(got: impl Iterator<Item = f64>, want: &[f64]) -> f64 {
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = got.zip(want).fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
        worst / scale
    }

    /// bf16 keeps 8 significant bits: the roundings of the gate/up outputs, the activation,
    /// the down output and the combined output are each within 2^-9 relative; f32
    /// accumulation adds far less. 2^-6 leaves room for cancellation in the sums while still
    /// failing on any real bug.
    pub(crate) const BF16_BOUND: f64 = 1.0 / 64.0;

    #[test]
    fn cpu_reference_matches_f64_for_several_tiles() {
        let shape = MoeShape {
            hidden: 48,
            expert_ffn: 40,
            n_experts: 6,
            top_k: 2,
        };
        for (tile, tokens, seed) in [(4, 37, 1), (8, 50, 2), (16, 3, 3), (64, 90, 4)] {
            let p = MoeProblem::random(shape, tile, tokens, seed);
            let got = moe_layer_cpu(&p).unwrap();
            let want = moe_layer_f64(&p);
            assert!(want.iter().all(|v| *v != 0.0));
            let got: Vec<f64> = got.out.iter().map(|v| f64::from(v.to_f32())).collect();
            let err = relative_error(got.iter().copied(), &want);
            assert!(
                err < BF16_BOUND,
                "tile {tile}, tokens {tokens}: error {err}"
            );
            // The GPU tests' measure, on the same reference: bf16 roundings, 1e-2 at most.
            let frobenius = crate::numeric::relative_frobenius(&got, &want);
            assert!(frobenius < 1e-2, "tile {tile}: {frobenius}");
        }
    }

    #[test]
    fn grouping_is_a_stable_permutation_by_expert() {
        let ids = [2, 0, 1, 2, 2, 0];
        let g = group_tokens(&ids, 4);
        assert_eq!(g.counts, vec![2, 1, 3, 0]);
        assert_eq!(g.offsets, vec![0, 2, 3, 6, 6]);
        assert_eq!(g.sorted_assignments, vec![1, 5, 2, 0, 3, 4]);
        for (a, &pos) in g.position_of.iter().enumerate() {
            assert_eq!(g.sorted_assignments[pos as usize] as usize, a);
        }
        // One pair of GEMMs per expert with rows; expert 3 has none and is not read.
        let active: Vec<(usize, usize, usize)> = active_experts(&g.offsets)
            .iter()
            .map(|r| (r.expert, r.row0, r.rows))
            .collect();
        assert_eq!(active, vec![(0, 0, 2), (1, 2, 1), (2, 3, 3)]);
    }

    #[test]
    fn invalid_problems_are_typed_errors() {
        let shape = MoeShape {
            hidden: 8,
            expert_ffn: 8,
            n_experts: 4,
            top_k: 2,
        };
        let mut p = MoeProblem::random(shape, 4, 5, 1);
        p.topk_ids[3] = 9;
        let message = moe_layer_cpu(&p).unwrap_err().to_string();
        assert!(message.contains("topk_ids[3] = 9"), "{message}");
        let mut p = MoeProblem::random(shape, 4, 5, 1);
        p.tile_tokens = 6;
        assert!(
            moe_layer_cpu(&p)
                .unwrap_err()
                .to_string()
                .contains("tile_tokens = 6")
        );
        let mut p = MoeProblem::random(shape, 4, 5, 1);
        p.w2 = p.w2[1..].into();
        assert!(
            moe_layer_cpu(&p)
                .unwrap_err()
                .to_string()
                .contains("w2 has")
        );
        let p = MoeProblem::random(
            MoeShape {
                n_experts: MAX_EXPERTS + 1,
                ..shape
            },
            4,
            1,
            1,
        );
        assert!(
            moe_layer_cpu(&p)
                .unwrap_err()
                .to_string()
                .contains("exceeds 1024")
        );
    }
}
