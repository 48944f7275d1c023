//! The batch-selection extension point: a window of queued requests with their predicted
//! expert-load vectors, the batch being formed, and the `BatchSelector` trait every CAPS
//! selection strategy implements.

use crate::rng::SimRng;
use multiversion::multiversion;

/// The queued requests a selector may choose from, oldest first, each with its predicted
/// expert-load vector (tokens routed to each expert of each MoE layer, flattened layer-major:
/// index `layer * n_experts + expert`), as produced by the router dry-run. Rows are borrowed
/// from the queue, so forming a window copies no load data.
#[derive(Clone, Debug)]
pub struct CandidateWindow<'a> {
    dims: usize,
    rows: Vec<&'a [f32]>,
}

impl<'a> CandidateWindow<'a> {
    /// A window over `loads`, which holds `loads.len() / dims` rows of `dims` values each.
    pub fn new(dims: usize, loads: &'a [f32]) -> Self {
        assert!(dims > 0, "CandidateWindow: dims must be positive");
        assert_eq!(
            loads.len() % dims,
            0,
            "CandidateWindow: loads is not a whole number of rows"
        );
        CandidateWindow {
            dims,
            rows: loads.chunks_exact(dims).collect(),
        }
    }
    /// A window over separately stored rows, each of length `dims`.
    pub fn from_rows(dims: usize, rows: Vec<&'a [f32]>) -> Self {
        assert!(dims > 0, "CandidateWindow: dims must be positive");
        assert!(
            rows.iter().all(|r| r.len() == dims),
            "CandidateWindow: a row is not {dims} long"
        );
        CandidateWindow { dims, rows }
    }
    /// Number of candidates in the window.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// Length of each load vector (layers x experts).
    pub fn dims(&self) -> usize {
        self.dims
    }
    /// The predicted load vector of candidate `idx` (0 = oldest).
    pub fn load(&self, idx: usize) -> &'a [f32] {
        self.rows[idx]
    }
}

/// The batch being formed: which candidates are chosen (in the order chosen) and their summed
/// load vector. The scheduler may seed it with the oldest candidate before the selector runs.
#[derive(Clone, Debug)]
pub struct BatchSelection {
    chosen: Vec<usize>,
    is_chosen: Vec<bool>,
    load: Vec<f32>,
    max_size: usize,
}

impl BatchSelection {
    /// An empty selection for `window` that may hold at most `max_size` requests.
    pub fn new(window: &CandidateWindow<'_>, max_size: usize) -> Self {
        assert!(max_size > 0, "BatchSelection: max_size must be positive");
        BatchSelection {
            chosen: Vec::with_capacity(max_size),
            is_chosen: vec![false; window.len()],
            load: vec![0.0; window.dims()],
            max_size: max_size.min(window.len()),
        }
    }
    /// A selection for `window` of at most `max_size` requests holding candidate `idx`: `new`
    /// and then `add(window, idx)`, the same load bits (`0 + v` per entry), without zeroing
    /// the load first.
    pub fn seeded(window: &CandidateWindow<'_>, max_size: usize, idx: usize) -> Self {
        assert!(max_size > 0, "BatchSelection: max_size must be positive");
        let mut chosen = Vec::with_capacity(max_size);
        chosen.push(idx);
        let mut is_chosen = vec![false; window.len()];
        is_chosen[idx] = true;
        BatchSelection {
            chosen,
            is_chosen,
            load: window.load(idx).iter().map(|&x| 0.0 + x).collect(),
            max_size: max_size.min(window.len()),
        }
    }
    /// Adds candidate `idx`; it must not already be chosen and the batch must not be full.
    pub fn add(&mut self, window: &CandidateWindow<'_>, idx: usize) {
        assert!(!self.is_full(), "BatchSelection::add on a full batch");
        assert!(
            !self.is_chosen[idx],
            "BatchSelection::add: candidate {idx} chosen twice"
        );
        self.is_chosen[idx] = true;
        self.chosen.push(idx);
        add_load(&mut self.load, window.load(idx));
    }
    pub fn chosen(&self) -> &[usize] {
        &self.chosen
    }
    pub fn is_chosen(&self, idx: usize) -> bool {
        self.is_chosen[idx]
    }
    /// The summed load vector of the chosen candidates.
    pub fn load(&self) -> &[f32] {
        &self.load
    }
    pub fn len(&self) -> usize {
        self.chosen.len()
    }
    pub fn is_empty(&self) -> bool {
        self.chosen.is_empty()
    }
    /// How many requests the batch may hold (max batch size, capped by the window length).
    pub fn capacity(&self) -> usize {
        self.max_size
    }
    pub fn is_full(&self) -> bool {
        self.chosen.len() >= self.max_size
    }
    /// Indices of the candidates not chosen yet, oldest first.
    pub fn remaining(&self) -> impl Iterator<Item = usize> + '_ {
        self.is_chosen
            .iter()
            .enumerate()
            .filter(|(_, c)| !**c)
            .map(|(i, _)| i)
    }
}

/// A CAPS batch-selection strategy: fills `selection` (possibly pre-seeded with the oldest
/// candidate) with up to `selection.capacity()` candidates from `window`.
///
/// Contract, checked by the engine: every chosen index is in the window, none twice, and the
/// selection is full when it returns (a selector never leaves capacity unused while candidates
/// remain; the engine asserts this).
pub trait BatchSelector: Send {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        rng: &mut SimRng,
    );
}

/// The `[scheduler.selector]` table of a scenario: which selection strategy, tagged by `kind`.
/// This enum is the registry of batch selectors; `strategies::batch::build` turns it into a
/// `BatchSelector`, one file per variant.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BatchSelectorConfig {
    Fcfs,
    Random,
    GreedyVariance,
    GreedyDotProduct,
    NormMinimizing,
    BestFit,
    PowerOfD {
        /// Candidates sampled per pick (CAPS default k = 8).
        #[serde(default = "default_power_of_d_samples")]
        samples: usize,
    },
    PowerOfDDot {
        /// Candidates sampled per pick (CAPS default k = 8).
        #[serde(default = "default_power_of_d_samples")]
        samples: usize,
    },
    Lpt,
    LptBalanced,
    KarmarkarKarp,
    Differencing,
}

fn default_power_of_d_samples() -> usize {
    8
}

impl BatchSelectorConfig {
    /// The snake_case `kind` tag of this variant, as written in scenario files.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Random => "random",
            Self::GreedyVariance => "greedy_variance",
            Self::GreedyDotProduct => "greedy_dot_product",
            Self::NormMinimizing => "norm_minimizing",
            Self::BestFit => "best_fit",
            Self::PowerOfD { .. } => "power_of_d",
            Self::PowerOfDDot { .. } => "power_of_d_dot",
            Self::Lpt => "lpt",
            Self::LptBalanced => "lpt_balanced",
            Self::KarmarkarKarp => "karmarkar_karp",
            Self::Differencing => "differencing",
        }
    }
}

/// `sum += value` entry by entry, compiled for baseline x86-64 and for AVX (picked at run
/// time): one IEEE addition per entry either way, so the same bits.
#[multiversion(targets("x86_64+avx"))]
fn add_load(sums: &mut [f32], values: &[f32]) {
    for (sum, value) in sums.iter_mut().zip(values) {
        *sum += *value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_tracks_chosen_and_summed_load() {
        let loads = [1.0, 0.0, 0.0, 2.0, 3.0, 3.0];
        let window = CandidateWindow::new(2, &loads);
        assert_eq!(window.len(), 3);
        assert_eq!(window.load(2), &[3.0, 3.0]);
        let mut selection = BatchSelection::new(&window, 2);
        selection.add(&window, 2);
        selection.add(&window, 0);
        assert_eq!(selection.chosen(), &[2, 0]);
        assert_eq!(selection.load(), &[4.0, 3.0]);
        assert!(selection.is_full());
        assert_eq!(selection.remaining().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_seeded_selection_is_a_new_one_with_the_seed_added() {
        let loads = [-0.0, 1.5, 1e-40, 2.0, 3.0, -0.0];
        let window = CandidateWindow::new(3, &loads);
        for idx in 0..2 {
            let seeded = BatchSelection::seeded(&window, 2, idx);
            let mut added = BatchSelection::new(&window, 2);
            added.add(&window, idx);
            assert_eq!(seeded.chosen(), added.chosen());
            assert_eq!(seeded.capacity(), added.capacity());
            assert!((0..2).all(|i| seeded.is_chosen(i) == added.is_chosen(i)));
            let bits =
                |s: &BatchSelection| s.load().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&seeded), bits(&added));
        }
    }

    #[test]
    fn capacity_is_capped_by_window_length() {
        let loads = [1.0, 2.0];
        let window = CandidateWindow::new(1, &loads);
        assert_eq!(BatchSelection::new(&window, 8).capacity(), 2);
    }
}
