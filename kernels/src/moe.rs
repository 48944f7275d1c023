//! The MoE layer: group tokens by expert (histogram, exclusive prefix sum, scatter), run each
//! expert's SwiGLU FFN as a grouped, tiled GEMM (gate/up, SiLU x up, down) with bf16 storage
//! and f32 accumulation, then un-permute and combine with the router weights. The CPU
//! reference here has the semantics of the CUDA kernels in `source::MOE`.
//!
//! Tiling is part of the semantics: each expert's rows are processed `tile_tokens` at a time
//! and a partial tile is computed in full (padded with zero rows whose results are dropped),
//! exactly as a GPU block computes its whole tile. So latency steps at tile boundaries on the
//! CPU too: each tile also re-reads (converts) the expert's weights once.

use crate::KernelInputError;
use crate::numeric::{dot, narrow, random_bf16, random_weights, silu, widen};
use half::bf16;
use rand::RngExt;

/// The largest tile the CUDA kernels accept (its accumulators live in registers).
pub const MAX_TILE_TOKENS: usize = 256;
/// Tiles are split over 4 row groups of threads, so their size is a multiple of 4.
pub const TILE_ROW_GROUPS: usize = 4;

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

/// Inputs of one MoE layer. Weight layouts are PyTorch `Linear` (output-major):
/// `w_gate`, `w_up`: `[n_experts][expert_ffn][hidden]`; `w_down`: `[n_experts][hidden][expert_ffn]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeProblem {
    pub shape: MoeShape,
    pub tile_tokens: usize,
    /// `[tokens][hidden]`.
    pub x: Vec<bf16>,
    /// `[tokens][top_k]`: the router's chosen experts.
    pub topk_ids: Vec<i32>,
    /// `[tokens][top_k]`: the router's combine weights.
    pub topk_weights: Vec<f32>,
    pub w_gate: Vec<bf16>,
    pub w_up: Vec<bf16>,
    pub w_down: Vec<bf16>,
    /// A launch parameter, not an input: at most this many thread blocks run each expert
    /// GEMM on CUDA (a persistent grid looping over the tiles, with results bit-identical to
    /// the default one block per tile). `None`: one block per tile. The CPU reference is
    /// single-threaded and ignores it.
    pub block_cap: Option<u32>,
}

/// Tokens grouped by expert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    /// Assignments (token x slot) per expert.
    pub counts: Vec<u32>,
    /// Exclusive prefix sum of `counts`, with the total appended (`n_experts + 1` entries).
    pub offsets: Vec<u32>,
    /// Exclusive prefix sum of each expert's tile count, with the total appended.
    pub tile_offsets: Vec<u32>,
    /// Assignment indices (`token * top_k + slot`) sorted by expert.
    pub sorted_assignments: Vec<u32>,
    /// Inverse of `sorted_assignments`: where each assignment's row went.
    pub position_of: Vec<u32>,
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
        if self.block_cap == Some(0) {
            return bad("block_cap = 0: a capped launch needs at least one block".into());
        }
        if s.hidden == 0 || s.expert_ffn == 0 || s.n_experts == 0 || s.top_k == 0 {
            return bad(format!("every dimension must be positive: {s:?}"));
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
        if assignments > u32::MAX as usize / 2 {
            return bad(format!(
                "{assignments} assignments exceed the u32 index range"
            ));
        }
        for (name, len, want) in [
            ("topk_ids", self.topk_ids.len(), assignments),
            ("topk_weights", self.topk_weights.len(), assignments),
            (
                "w_gate",
                self.w_gate.len(),
                s.n_experts * s.expert_ffn * s.hidden,
            ),
            (
                "w_up",
                self.w_up.len(),
                s.n_experts * s.expert_ffn * s.hidden,
            ),
            (
                "w_down",
                self.w_down.len(),
                s.n_experts * s.expert_ffn * s.hidden,
            ),
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
        let mut rng = sim::rng::stream(seed, "moe.topk");
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
        let weights =
            |len, fan_in: usize, name| random_bf16(len, 1.0 / (fan_in as f32).sqrt(), seed, name);
        let per_expert = shape.expert_ffn * shape.hidden;
        MoeProblem {
            shape,
            tile_tokens,
            x: random_bf16(tokens * shape.hidden, 1.0, seed, "moe.x"),
            topk_weights: random_weights(tokens * shape.top_k, seed, "moe.weights"),
            topk_ids,
            w_gate: weights(shape.n_experts * per_expert, shape.hidden, "moe.w_gate"),
            w_up: weights(shape.n_experts * per_expert, shape.hidden, "moe.w_up"),
            w_down: weights(shape.n_experts * per_expert, shape.expert_ffn, "moe.w_down"),
            block_cap: None,
        }
    }
}

/// Histogram, exclusive prefix sum (of rows and of tiles) and a stable scatter of the
/// assignments by expert. Ids must be valid (see [`MoeProblem::validate`]).
pub fn group_tokens(topk_ids: &[i32], n_experts: usize, tile_tokens: usize) -> Grouping {
    let mut counts = vec![0u32; n_experts];
    for &e in topk_ids {
        counts[e as usize] += 1;
    }
    let mut offsets = Vec::with_capacity(n_experts + 1);
    let mut tile_offsets = Vec::with_capacity(n_experts + 1);
    let (mut rows, mut tiles) = (0u32, 0u32);
    for &c in &counts {
        offsets.push(rows);
        tile_offsets.push(tiles);
        rows += c;
        tiles += c.div_ceil(tile_tokens as u32);
    }
    offsets.push(rows);
    tile_offsets.push(tiles);
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
        tile_offsets,
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
    let grouping = group_tokens(&p.topk_ids, s.n_experts, tile);
    let rows_total = p.topk_ids.len();
    let mut h = vec![bf16::ZERO; rows_total * ffn];
    let mut y = vec![0.0f32; rows_total * hidden];
    let mut x_rows = vec![0.0f32; tile * hidden];
    let mut h_rows = vec![0.0f32; tile * ffn];
    let mut gate = vec![0.0f32; tile * ffn];
    let mut weight_row = vec![0.0f32; hidden.max(ffn)];
    for e in 0..s.n_experts {
        let (begin, end) = (
            grouping.offsets[e] as usize,
            grouping.offsets[e + 1] as usize,
        );
        let per_expert = ffn * hidden;
        let (wg, wu, wd) = (
            &p.w_gate[e * per_expert..(e + 1) * per_expert],
            &p.w_up[e * per_expert..(e + 1) * per_expert],
            &p.w_down[e * per_expert..(e + 1) * per_expert],
        );
        let mut row0 = begin;
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
            gemm.run(wg, &mut weight_row[..hidden], |r, n, v| {
                gate[r * ffn + n] = v
            });
            gemm.run(wu, &mut weight_row[..hidden], |r, n, up| {
                if r < valid {
                    h[(row0 + r) * ffn + n] = narrow(silu(gate[r * ffn + n]) * up);
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
                    y[(row0 + r) * hidden + n] = v;
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
                acc += p.topk_weights[a] * y[grouping.position_of[a] as usize * hidden + c];
            }
            out[t * hidden + c] = narrow(acc);
        }
    }
    Ok(MoeOutput { grouping, out })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
                let base = e * s.expert_ffn * s.hidden;
                let x = &p.x[t * s.hidden..(t + 1) * s.hidden];
                let h: Vec<f64> = (0..s.expert_ffn)
                    .map(|n| {
                        let row = base + n * s.hidden;
                        let (mut g, mut u) = (0.0, 0.0);
                        for k in 0..s.hidden {
                            g += f(x[k]) * f(p.w_gate[row + k]);
                            u += f(x[k]) * f(p.w_up[row + k]);
                        }
                        g / (1.0 + (-g).exp()) * u
                    })
                    .collect();
                for c in 0..s.hidden {
                    let row = base + c * s.expert_ffn;
                    let y: f64 = (0..s.expert_ffn).map(|n| h[n] * f(p.w_down[row + n])).sum();
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

    /// bf16 keeps 8 significant bits: one rounding of the intermediate and one of the
    /// output are each within 2^-9 relative; f32 accumulation adds far less. 2^-6 leaves
    /// room for cancellation in the sums while still failing on any real bug.
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
            let err = relative_error(got.out.iter().map(|v| f64::from(v.to_f32())), &want);
            assert!(
                err < BF16_BOUND,
                "tile {tile}, tokens {tokens}: error {err}"
            );
        }
    }

    #[test]
    fn grouping_is_a_stable_permutation_by_expert() {
        let ids = [2, 0, 1, 2, 2, 0];
        let g = group_tokens(&ids, 4, 2);
        assert_eq!(g.counts, vec![2, 1, 3, 0]);
        assert_eq!(g.offsets, vec![0, 2, 3, 6, 6]);
        assert_eq!(g.tile_offsets, vec![0, 1, 2, 4, 4]);
        assert_eq!(g.sorted_assignments, vec![1, 5, 2, 0, 3, 4]);
        for (a, &pos) in g.position_of.iter().enumerate() {
            assert_eq!(g.sorted_assignments[pos as usize] as usize, a);
        }
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
        p.w_down.pop();
        assert!(
            moe_layer_cpu(&p)
                .unwrap_err()
                .to_string()
                .contains("w_down")
        );
        let mut p = MoeProblem::random(shape, 4, 5, 1);
        p.block_cap = Some(0);
        assert!(
            moe_layer_cpu(&p)
                .unwrap_err()
                .to_string()
                .contains("block_cap = 0")
        );
    }
}
