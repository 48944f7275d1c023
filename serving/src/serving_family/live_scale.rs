//! How live mode runs a dense model (the Chimera and MOSAIC live cases' replicas), shared by the
//! live executor, the calibration binary and the profile-priced dense replica
//! (`dense_profile`): the model scaled down by [`Scaling`], one transformer block as one GEMM
//! over `hidden` with attention, and a serving replica's step (`serving::StepWork`) as that
//! kernel's rows and cached tokens per row.

use crate::cost::shape::DenseModelShape;
use crate::serving::StepWork;
use serde::{Deserialize, Serialize};

/// A dense model at 1/`widths` of its hidden, intermediate, head and vocabulary widths and
/// 1/`layers` of its layers (at least one of each); the heads are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scaling {
    pub widths: u64,
    pub layers: u64,
}

/// The scaling live mode runs a dense model at when no dense-decode profile prices it.
pub const LIVE_SCALING: Scaling = Scaling {
    widths: 64,
    layers: 8,
};

impl Scaling {
    /// `shape` scaled down ([`DenseModelShape::scaled_down`]).
    pub fn apply(&self, shape: &DenseModelShape) -> DenseModelShape {
        shape.scaled_down(self.widths, self.layers)
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        format!(
            "1/{} of the hidden, intermediate, head and vocabulary widths and 1/{} of the \
             layers (heads kept)",
            self.widths, self.layers
        )
    }
}

/// The dimensions the decode kernel runs `shape` at: hidden, one block's GEMM width, query and
/// KV heads, head width and vocabulary (the order of `kernels::decode::DenseDims`).
pub fn kernel_dims(shape: &DenseModelShape) -> [usize; 6] {
    [
        shape.hidden as usize,
        block_gemm_width(shape) as usize,
        shape.n_heads as usize,
        shape.n_kv_heads as usize,
        shape.head_dim as usize,
        shape.vocab as usize,
    ]
}

/// Output features of one transformer block of `shape` run as one GEMM over `hidden`.
pub fn block_gemm_width(shape: &DenseModelShape) -> u64 {
    shape.block_params().div_ceil(shape.hidden)
}

/// The decode kernel's rows (the step's prefill and decode tokens) and cached tokens per row
/// for the replica's step `work`: the attention the cost model counts (every cached token once,
/// prefills causally: half the squared prompt chunk) spread evenly over the rows.
pub fn kernel_rows_and_context(work: &StepWork<'_>) -> (u64, u64) {
    let rows = work.prefill_tokens + work.decode_tokens;
    let prefill_square: u64 = if work.prefill_tokens > 0 {
        work.batch
            .iter()
            .map(|seq| u64::from(seq.step_prefill()).pow(2))
            .sum()
    } else {
        0
    };
    let attended = work.context_tokens + prefill_square / 2;
    (rows, attended.div_ceil(rows.max(1)))
}
