//! CAPS batch-selection strategies: which queued requests form the next MoE batch.
//!
//! One file per strategy of caps.txt (the twelve of its "run_paper_evaluation" suite), each a
//! [`BatchSelector`] built from its [`BatchSelectorConfig`] variant by [`build`]. All of them
//! fill the selection (possibly pre-seeded by the scheduler with the oldest candidate) to its
//! capacity from the unchosen candidates, are deterministic given the RNG, and break ties in
//! favour of the oldest (lowest-index) candidate.

use expertsim_serving::policies::batch::{BatchSelector, BatchSelectorConfig};

pub mod best_fit;
pub mod differencing;
pub mod fcfs;
pub mod greedy_dot_product;
pub mod greedy_variance;
pub mod karmarkar_karp;
pub mod lpt;
pub mod lpt_balanced;
pub mod norm_minimizing;
pub mod power_of_d;
pub mod power_of_d_dot;
pub mod random;

mod greedy;
mod ldm;
mod linalg;
#[cfg(test)]
mod testutil;

/// The selector a scenario's `[scheduler.selector]` table asks for.
pub fn build(config: &BatchSelectorConfig) -> Box<dyn BatchSelector> {
    match config {
        BatchSelectorConfig::Fcfs => Box::new(fcfs::Fcfs),
        BatchSelectorConfig::Random => Box::new(random::Random::default()),
        BatchSelectorConfig::GreedyVariance => Box::new(greedy_variance::GreedyVariance::default()),
        BatchSelectorConfig::GreedyDotProduct => {
            Box::new(greedy_dot_product::GreedyDotProduct::default())
        }
        BatchSelectorConfig::NormMinimizing => Box::new(norm_minimizing::NormMinimizing::default()),
        BatchSelectorConfig::BestFit => Box::new(best_fit::BestFit::default()),
        BatchSelectorConfig::PowerOfD { samples } => Box::new(power_of_d::PowerOfD::new(*samples)),
        BatchSelectorConfig::PowerOfDDot { samples } => {
            Box::new(power_of_d_dot::PowerOfDDot::new(*samples))
        }
        BatchSelectorConfig::Lpt => Box::new(lpt::Lpt::default()),
        BatchSelectorConfig::LptBalanced => Box::new(lpt_balanced::LptBalanced::default()),
        BatchSelectorConfig::KarmarkarKarp => Box::new(karmarkar_karp::KarmarkarKarp::default()),
        BatchSelectorConfig::Differencing => Box::new(differencing::Differencing::default()),
    }
}

/// The other name of the selector `config` builds, where [`build`] builds one algorithm under
/// two: best_fit's distance to uniform is greedy_variance's `d · Var(L+v)` and scored by its
/// very function (best_fit.rs), so the two select the same batches with the same draws (none).
/// `None` for every other config. `reproduce` keys its cells by it, simulating such cells once.
pub fn same_selector(config: &BatchSelectorConfig) -> Option<BatchSelectorConfig> {
    match config {
        BatchSelectorConfig::BestFit => Some(BatchSelectorConfig::GreedyVariance),
        _ => None,
    }
}

/// One line of `expertsim list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyInfo {
    pub family: &'static str,
    pub kind: &'static str,
    pub description: &'static str,
}

const fn batch(kind: &'static str, description: &'static str) -> PolicyInfo {
    PolicyInfo {
        family: "batch",
        kind,
        description,
    }
}

/// Every batch selector, in caps.txt's order of presentation (baselines, the equivalent
/// near-optimal objectives, the fast approximations, the partitioning heuristics).
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        batch(
            "fcfs",
            "first-come-first-served: the oldest requests (baseline)",
        ),
        batch(
            "random",
            "uniformly random requests from the window (baseline)",
        ),
        batch(
            "greedy_variance",
            "original CAPS: greedily add the request minimising Var(L+v) of the batch load",
        ),
        batch(
            "greedy_dot_product",
            "greedily add the request with the least overlap v·L with the batch load",
        ),
        batch(
            "norm_minimizing",
            "greedily add the request minimising ||L+v||² of the batch load",
        ),
        batch(
            "best_fit",
            "vector bin packing best fit: L+v closest to the balanced vector of equal total",
        ),
        batch(
            "power_of_d",
            "sample `samples` requests (default 8) per pick, add the min-variance one",
        ),
        batch(
            "power_of_d_dot",
            "sample `samples` requests (default 8) per pick, add the min-dot-product one",
        ),
        batch(
            "lpt",
            "longest processing time first: largest total load (harmful for balance)",
        ),
        batch(
            "lpt_balanced",
            "LPT order, adding the request that keeps the peak expert load lowest",
        ),
        batch(
            "karmarkar_karp",
            "balanced Karmarkar-Karp partition of the window's total loads; the oldest's part",
        ),
        batch(
            "differencing",
            "multi-dimensional Karmarkar-Karp partition of the load vectors; best part",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testutil::{random_window, run};
    use expertsim_serving::policies::batch::CandidateWindow;

    fn all_configs() -> Vec<BatchSelectorConfig> {
        catalogue()
            .iter()
            .map(|info| {
                serde_json::from_value(serde_json::json!({ "kind": info.kind }))
                    .unwrap_or_else(|e| panic!("{}: {e}", info.kind))
            })
            .collect()
    }

    #[test]
    fn catalogue_kinds_deserialize_and_round_trip() {
        let infos = catalogue();
        assert_eq!(infos.len(), 12);
        for (info, config) in infos.iter().zip(all_configs()) {
            assert_eq!(info.family, "batch");
            assert!(!info.description.is_empty());
            assert_eq!(config.kind(), info.kind);
            let json = serde_json::to_value(&config).unwrap();
            let back: BatchSelectorConfig = serde_json::from_value(json).unwrap();
            assert_eq!(back, config);
        }
        let mut kinds: Vec<_> = infos.iter().map(|i| i.kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), 12, "duplicate kinds");
        for kind in [
            "fcfs",
            "random",
            "greedy_variance",
            "greedy_dot_product",
            "norm_minimizing",
            "best_fit",
            "power_of_d",
            "power_of_d_dot",
            "lpt",
            "lpt_balanced",
            "karmarkar_karp",
            "differencing",
        ] {
            assert!(kinds.contains(&kind), "{kind} missing");
        }
    }

    /// The `BatchSelector` contract, for every strategy: the selection ends full (capacity =
    /// min(batch size, window)), indices unique and in range, pre-seeded candidates kept
    /// first, and the same RNG seed gives the same selection.
    #[test]
    fn every_selector_honours_the_contract() {
        let cases: &[(usize, usize, usize)] = &[
            // (window length, dims, batch size)
            (32, 1440, 8),
            (32, 64, 8),
            (9, 16, 8),
            (5, 8, 8),
            (8, 8, 8),
            (17, 12, 4),
            (1, 4, 8),
            (40, 24, 1),
            (33, 7, 5),
        ];
        for config in all_configs().into_iter().chain([
            BatchSelectorConfig::PowerOfD { samples: 0 },
            BatchSelectorConfig::PowerOfD { samples: 3 },
            BatchSelectorConfig::PowerOfDDot { samples: 64 },
        ]) {
            let mut selector = build(&config);
            for (case, &(len, dims, batch_size)) in cases.iter().enumerate() {
                for seed in 0..3u64 {
                    let (dims, loads) = random_window(seed * 100 + case as u64, len, dims);
                    let window = CandidateWindow::new(dims, &loads);
                    for seeded in [&[][..], &[0][..]] {
                        let chosen = run(selector.as_mut(), &window, batch_size, seeded, seed);
                        let what = format!("{} len {len} B {batch_size} {seeded:?}", config.kind());
                        assert_eq!(chosen.len(), batch_size.min(len), "{what}: {chosen:?}");
                        assert!(chosen.iter().all(|&i| i < len), "{what}: {chosen:?}");
                        let mut unique = chosen.clone();
                        unique.sort_unstable();
                        unique.dedup();
                        assert_eq!(unique.len(), chosen.len(), "{what}: {chosen:?}");
                        assert!(chosen.starts_with(seeded), "{what}: {chosen:?}");
                        // Same seed, same selection, also from a fresh selector (no state
                        // leaks between decisions).
                        let again = run(selector.as_mut(), &window, batch_size, seeded, seed);
                        assert_eq!(again, chosen, "{what}");
                        let fresh = run(build(&config).as_mut(), &window, batch_size, seeded, seed);
                        assert_eq!(fresh, chosen, "{what}");
                    }
                }
            }
        }
    }

    /// `same_selector`'s pairs select alike: decision after decision on one selector each
    /// (integer loads with many ties, fractional loads, seeded or not), the same batches in the
    /// same order and the RNG left in the same state.
    #[test]
    fn a_selector_and_its_other_name_select_alike() {
        use expertsim_serving::policies::batch::BatchSelection;
        use rand::Rng;
        let pairs: Vec<_> = all_configs()
            .into_iter()
            .filter_map(|config| same_selector(&config).map(|other| (config, other)))
            .collect();
        assert_eq!(pairs.len(), 1, "best_fit alone has another name");
        for (config, other) in pairs {
            assert_eq!(same_selector(&other), None, "names do not chain");
            let (mut a, mut b) = (build(&config), build(&other));
            let mut rng_a = expertsim_serving::rng::stream(7, "same-selector");
            let mut rng_b = expertsim_serving::rng::stream(7, "same-selector");
            for seed in 0..60u64 {
                let (dims, mut loads) = random_window(seed, 32, 16 + (seed as usize % 7) * 61);
                if seed % 2 == 1 {
                    for (j, x) in loads.iter_mut().enumerate() {
                        *x *= 1.0 + (j % 11) as f32 * 0.0137;
                    }
                }
                let window = CandidateWindow::new(dims, &loads);
                for seeded in [&[][..], &[0][..], &[3, 9][..]] {
                    let choose = |selector: &mut dyn BatchSelector, rng| {
                        let mut selection = BatchSelection::new(&window, 8);
                        for &i in seeded {
                            selection.add(&window, i);
                        }
                        selector.select(&window, &mut selection, rng);
                        selection.chosen().to_vec()
                    };
                    let chosen = choose(a.as_mut(), &mut rng_a);
                    assert_eq!(chosen, choose(b.as_mut(), &mut rng_b), "seed {seed}");
                }
            }
            assert_eq!(rng_a.next_u64(), rng_b.next_u64(), "{}", config.kind());
        }
    }

    #[test]
    fn a_full_selection_is_left_alone() {
        let (dims, loads) = random_window(9, 6, 8);
        let window = CandidateWindow::new(dims, &loads);
        for config in all_configs() {
            let chosen = run(build(&config).as_mut(), &window, 2, &[4, 1], 0);
            assert_eq!(chosen, vec![4, 1], "{}", config.kind());
        }
    }
}
