//! fcfs: first-come-first-served, the CAPS baseline ("fcfs | First-come-first-served | O(B) |
//! Baseline, no optimization" in caps.txt): the oldest candidates, in arrival order.

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

/// Fills the batch with the oldest unchosen candidates (indices 0, 1, 2, ... skipping any the
/// scheduler pre-seeded). Ignores the load vectors and the RNG.
#[derive(Debug, Default)]
pub struct Fcfs;

impl BatchSelector for Fcfs {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        for idx in 0..window.len() {
            if selection.is_full() {
                break;
            }
            if !selection.is_chosen(idx) {
                selection.add(window, idx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testutil::{random_window, run};

    #[test]
    fn takes_the_oldest_in_order() {
        let (dims, loads) = random_window(1, 32, 40);
        let window = CandidateWindow::new(dims, &loads);
        assert_eq!(
            run(&mut Fcfs, &window, 8, &[], 0),
            vec![0, 1, 2, 3, 4, 5, 6, 7]
        );
        assert_eq!(
            run(&mut Fcfs, &window, 8, &[3], 0),
            vec![3, 0, 1, 2, 4, 5, 6, 7]
        );
    }
}
