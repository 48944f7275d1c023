//! lpt: Longest Processing Time first (caps.txt: "lpt | Longest Processing Time | O(W log W) |
//! Harmful for load balance").

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::linalg;

/// Fills the batch with the unchosen candidates of largest total predicted load (the sum of
/// the load vector, the request's processing-time proxy), largest first; equal totals go to
/// the oldest. It ignores where the load falls, and heavy requests of one semantic burst load
/// the same experts, which is why caps.txt finds it harmful for balance.
#[derive(Debug, Default)]
pub struct Lpt {
    totals: Vec<f64>,
    order: Vec<usize>,
}

/// Sorts `order` into LPT order: total load descending, then index ascending.
pub(crate) fn lpt_order(
    window: &CandidateWindow<'_>,
    selection: &BatchSelection,
    totals: &mut Vec<f64>,
    order: &mut Vec<usize>,
) {
    totals.clear();
    totals.resize(window.len(), 0.0);
    order.clear();
    order.extend(selection.remaining());
    linalg::totals_into(window, order, totals);
    order.sort_unstable_by(|&a, &b| totals[b].total_cmp(&totals[a]).then(a.cmp(&b)));
}

impl BatchSelector for Lpt {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        if selection.is_full() {
            return;
        }
        lpt_order(window, selection, &mut self.totals, &mut self.order);
        for &i in &self.order {
            if selection.is_full() {
                break;
            }
            selection.add(window, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testutil::{rows, run};

    #[test]
    fn takes_the_largest_totals_first() {
        let (dims, loads) = rows(&[
            &[1.0, 0.0],
            &[5.0, 5.0],
            &[0.0, 3.0],
            &[9.0, 0.0],
            &[2.0, 8.0],
            &[1.0, 1.0],
        ]);
        let window = CandidateWindow::new(dims, &loads);
        // Totals 1, 10, 3, 9, 10, 2: the two 10s in index order, then 9.
        assert_eq!(run(&mut Lpt::default(), &window, 3, &[], 0), vec![1, 4, 3]);
        assert_eq!(run(&mut Lpt::default(), &window, 3, &[0], 0), vec![0, 1, 4]);
    }
}
