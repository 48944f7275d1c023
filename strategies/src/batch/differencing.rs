//! differencing: multi-dimensional Karmarkar-Karp, the largest-differencing method applied to
//! the load vectors themselves (caps.txt: "differencing | Multi-dim Karmarkar-Karp |
//! O(B×W×d)", listed with the equivalent near-optimal strategies).

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::ldm::Ldm;
use super::linalg;

/// The balanced largest-differencing method of karmarkar_karp (same layout, see `ldm`: the
/// oldest `k * m` unchosen candidates split into `k` parts of `m`, starting from rows of `k`
/// candidates of similar total), with every part carrying its summed load vector `G` instead
/// of a scalar:
///
/// - A tuple's difference is the spread of its parts' vectors around their mean,
///   `sum_g ||G_g - T/k||² = sum_g ||G_g||² - ||T||² / k` (`T` = the tuple's summed vector);
///   for `d = 1` this is the scalar imbalance KK drives down.
/// - The two tuples with the largest differences are combined by the pairing `π` of their
///   parts that minimises `sum_g ||A_g + B_π(g)||²`, i.e. `sum_g A_g · B_π(g)`: an assignment
///   problem on the `k × k` matrix of dot products, solved exactly (Hungarian method). For
///   scalars that pairing is KK's heavy-with-light; for vectors it puts requests that load
///   the same experts into different parts.
///
/// The batch that falls out: with no pre-seed, the part holding the oldest candidate; with a
/// pre-seeded load `L`, the part `G` that best complements it, minimising `Var(L + G)` over
/// all entries (ties: the part with the oldest member). Cost per decision: one pass over the
/// partitioned loads for their totals and norms, one per row for its `||T||²`, then per
/// combination `k²` dot products and `k` vector additions: `O(k·W·d)` in all.
#[derive(Debug, Default)]
pub struct Differencing {
    ldm: Ldm,
    /// Slot-major summed load vectors of the parts that have been joined.
    vectors: Vec<f32>,
    /// Slot -> whether its row of `vectors` holds its part's vector (else the part is still
    /// the slot's single candidate, read from the window).
    materialized: Vec<bool>,
    /// Head slot -> `||G||²`.
    squares: Vec<f64>,
    /// Tuple -> `||T||²`.
    tuple_squares: Vec<f64>,
    cost: Vec<f64>,
    assignment: Assignment,
    row: Vec<f32>,
    scratch: Vec<usize>,
}

/// Rows of at most this many parts have their `|T|²` computed without a buffer.
const ROW: usize = 8;

/// The summed load vector of the part headed by `slot`: the candidate's own load until the
/// part has been joined with another, then its row of `vectors`.
fn part_vector<'b>(
    window: &CandidateWindow<'b>,
    vectors: &'b [f32],
    materialized: &[bool],
    items: &[usize],
    slot: usize,
) -> &'b [f32] {
    let d = window.dims();
    if materialized[slot] {
        &vectors[slot * d..(slot + 1) * d]
    } else {
        window.load(items[slot])
    }
}

/// Makes row `a` of `vectors` the sum of the parts headed by `a` and `b` (`a != b`).
fn join_vectors(
    window: &CandidateWindow<'_>,
    vectors: &mut [f32],
    materialized: &mut [bool],
    items: &[usize],
    a: usize,
    b: usize,
) {
    let d = window.dims();
    let (dst, b_row) = if a < b {
        let (lo, hi) = vectors.split_at_mut(b * d);
        (&mut lo[a * d..(a + 1) * d], &hi[..d])
    } else {
        let (lo, hi) = vectors.split_at_mut(a * d);
        (&mut hi[..d], &lo[b * d..(b + 1) * d])
    };
    let src = if materialized[b] {
        b_row
    } else {
        window.load(items[b])
    };
    if materialized[a] {
        linalg::add_assign(dst, src);
    } else {
        linalg::add(dst, window.load(items[a]), src);
        materialized[a] = true;
    }
}

impl BatchSelector for Differencing {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        let Self {
            ldm,
            vectors,
            materialized,
            squares,
            tuple_squares,
            cost,
            assignment,
            row,
            scratch,
        } = self;
        if !ldm.setup(window, selection) {
            return;
        }
        let d = window.dims();
        let (k, m) = (ldm.parts, ldm.rows);
        let slots = k * m;
        // Rows of `vectors` are written before they are read (see `materialized`), so the
        // buffer only ever grows and is never cleared.
        if vectors.len() < slots * d {
            vectors.resize(slots * d, 0.0);
        }
        materialized.clear();
        materialized.resize(slots, false);
        squares.clear();
        squares.extend_from_slice(&ldm.squares);
        tuple_squares.clear();
        for t in 0..m {
            let parts = ldm.tuple(t);
            let load = |g: usize| window.load(ldm.items[parts[g]]);
            // |T|² of the row, without forming T where the row is short enough to list.
            let square = if k <= ROW {
                let mut loads: [&[f32]; ROW] = [&[]; ROW];
                for (g, slot) in loads.iter_mut().take(k).enumerate() {
                    *slot = load(g);
                }
                linalg::square_of_sum(&loads[..k])
            } else {
                row.resize(d, 0.0);
                linalg::add(row, load(0), load(1));
                for g in 2..k {
                    linalg::add_assign(row, load(g));
                }
                linalg::sum_and_square(row).1
            };
            tuple_squares.push(square);
        }
        while ldm.alive.len() > 1 {
            let (pa, pb) = ldm.two_largest(|t| {
                let parts: f64 = ldm.tuple(t).iter().map(|&h| squares[h]).sum();
                parts - tuple_squares[t] / k as f64
            });
            let (ta, tb) = (ldm.alive[pa], ldm.alive[pb]);
            cost.clear();
            for &a in ldm.tuple(ta) {
                let heads = ldm.tuple(tb);
                let start = cost.len();
                cost.resize(start + k, 0.0);
                let vector = |slot| part_vector(window, vectors, materialized, &ldm.items, slot);
                linalg::dots_each(
                    vector(a),
                    k,
                    |h| vector(heads[h]),
                    |h, x| cost[start + h] = x,
                );
            }
            let cross: f64 = cost.iter().sum();
            let pairing = assignment.solve(k, cost);
            for g in 0..k {
                let h = pairing[g];
                let (a, b) = (ldm.tuple(ta)[g], ldm.tuple(tb)[h]);
                join_vectors(window, vectors, materialized, &ldm.items, a, b);
                squares[a] += 2.0 * cost[g * k + h] + squares[b];
                ldm.join(a, b);
            }
            tuple_squares[ta] += 2.0 * cross + tuple_squares[tb];
            ldm.alive.remove(pb);
        }
        let head = if selection.is_empty() {
            ldm.part_holding(ldm.oldest())
        } else {
            let l = selection.load();
            let l_total = linalg::sum(l);
            let final_tuple = ldm.alive[0];
            let mut best: Option<(f64, usize, usize)> = None;
            for &h in ldm.tuple(final_tuple) {
                let g = part_vector(window, vectors, materialized, &ldm.items, h);
                let total = l_total + ldm.sums[h];
                let score = 2.0 * linalg::dot(l, g) + squares[h] - total * total / d as f64;
                let oldest = ldm.members(h).min().expect("non-empty part");
                if best.is_none_or(|(s, o, _)| score < s || (score == s && oldest < o)) {
                    best = Some((score, oldest, h));
                }
            }
            best.expect("at least one part").2
        };
        ldm.add_part(window, selection, head, scratch);
    }
}

/// Minimum-cost perfect matching on a square cost matrix (Hungarian method with potentials,
/// O(k³)); buffers reused between calls.
#[derive(Debug, Default)]
struct Assignment {
    u: Vec<f64>,
    v: Vec<f64>,
    row_of_col: Vec<usize>,
    way: Vec<usize>,
    min_v: Vec<f64>,
    used: Vec<bool>,
    col_of_row: Vec<usize>,
}

impl Assignment {
    /// `cost` is row-major `k × k`; returns `col_of_row` (row `g` is matched to column
    /// `result[g]`). Non-finite costs are clamped so the method always terminates.
    fn solve(&mut self, k: usize, cost: &[f64]) -> &[usize] {
        const BIG: f64 = 1e300;
        let c = |i: usize, j: usize| {
            let x = cost[(i - 1) * k + (j - 1)];
            if x.is_nan() { BIG } else { x.clamp(-BIG, BIG) }
        };
        for buf in [&mut self.u, &mut self.v] {
            buf.clear();
            buf.resize(k + 1, 0.0);
        }
        for buf in [&mut self.row_of_col, &mut self.way] {
            buf.clear();
            buf.resize(k + 1, 0);
        }
        for i in 1..=k {
            self.row_of_col[0] = i;
            let mut j0 = 0;
            self.min_v.clear();
            self.min_v.resize(k + 1, f64::INFINITY);
            self.used.clear();
            self.used.resize(k + 1, false);
            loop {
                self.used[j0] = true;
                let i0 = self.row_of_col[j0];
                let mut delta = f64::INFINITY;
                let mut j1 = 0;
                for j in 1..=k {
                    if !self.used[j] {
                        let cur = c(i0, j) - self.u[i0] - self.v[j];
                        if cur < self.min_v[j] {
                            self.min_v[j] = cur;
                            self.way[j] = j0;
                        }
                        if self.min_v[j] < delta {
                            delta = self.min_v[j];
                            j1 = j;
                        }
                    }
                }
                for j in 0..=k {
                    if self.used[j] {
                        self.u[self.row_of_col[j]] += delta;
                        self.v[j] -= delta;
                    } else {
                        self.min_v[j] -= delta;
                    }
                }
                j0 = j1;
                if self.row_of_col[j0] == 0 {
                    break;
                }
            }
            loop {
                let j1 = self.way[j0];
                self.row_of_col[j0] = self.row_of_col[j1];
                j0 = j1;
                if j0 == 0 {
                    break;
                }
            }
        }
        self.col_of_row.clear();
        self.col_of_row.resize(k, 0);
        for j in 1..=k {
            self.col_of_row[self.row_of_col[j] - 1] = j - 1;
        }
        &self.col_of_row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::fcfs::Fcfs;
    use crate::batch::karmarkar_karp::KarmarkarKarp;
    use crate::batch::testutil::{random_window, rows, run, sorted};

    #[test]
    fn pairs_complementary_vectors_where_scalar_kk_cannot() {
        // Totals 4, 4, 3, 3: scalar KK joins 0 with 2 (both load expert 0); the vector
        // version joins 0 with 3, the request that loads the other expert.
        let (dims, loads) = rows(&[&[4.0, 0.0], &[0.0, 4.0], &[3.0, 0.0], &[0.0, 3.0]]);
        let window = CandidateWindow::new(dims, &loads);
        assert_eq!(
            run(&mut Differencing::default(), &window, 2, &[], 0),
            vec![0, 3]
        );
        assert_eq!(
            run(&mut KarmarkarKarp::default(), &window, 2, &[], 0),
            vec![0, 2]
        );
    }

    #[test]
    fn with_a_seed_takes_the_part_that_complements_it() {
        // Seeded with 0 (expert 0 heavy); the rest splits into {1 or 2 .., ..}: the part
        // loading expert 1 is taken.
        let (dims, loads) = rows(&[
            &[6.0, 0.0],
            &[5.0, 0.0],
            &[0.0, 5.0],
            &[4.0, 0.0],
            &[0.0, 4.0],
        ]);
        let window = CandidateWindow::new(dims, &loads);
        // m = 2, n = 4, k = 2. Rows (5,0)(0,5) | (4,0)(0,4): parts {1,3}=(9,0), {2,4}=(0,9)
        // would be worst; the matching makes {1,4}=(5,4) and {2,3}=(4,5). With L = (6,0) the
        // part (4,5) gives (10,5), better than (11,4).
        assert_eq!(
            run(&mut Differencing::default(), &window, 3, &[0], 0),
            vec![0, 2, 3]
        );
    }

    #[test]
    fn assignment_is_optimal_on_small_matrices() {
        let mut a = Assignment::default();
        let cost = [4.0, 1.0, 3.0, 2.0, 0.0, 5.0, 3.0, 2.0, 2.0];
        assert_eq!(a.solve(3, &cost), &[1, 0, 2]);
        // Exhaustive check against all permutations of a 4x4 matrix.
        let cost: Vec<f64> = (0..16).map(|x| ((x * 7 + 3) % 11) as f64).collect();
        let got: Vec<usize> = a.solve(4, &cost).to_vec();
        let value = |p: &[usize]| (0..4).map(|g| cost[g * 4 + p[g]]).sum::<f64>();
        let mut best = f64::INFINITY;
        for p0 in 0..4 {
            for p1 in 0..4 {
                for p2 in 0..4 {
                    for p3 in 0..4 {
                        let p = [p0, p1, p2, p3];
                        if sorted(p.to_vec()) == vec![0, 1, 2, 3] {
                            best = best.min(value(&p));
                        }
                    }
                }
            }
        }
        assert_eq!(value(&got), best);
    }

    #[test]
    fn balances_expert_load_better_than_fcfs_and_scalar_kk() {
        let variance = |window: &CandidateWindow<'_>, chosen: &[usize]| {
            let mut sum = vec![0.0f64; window.dims()];
            for &i in chosen {
                for (s, x) in sum.iter_mut().zip(window.load(i)) {
                    *s += f64::from(*x);
                }
            }
            let mean = sum.iter().sum::<f64>() / sum.len() as f64;
            sum.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / mean / mean
        };
        let (mut diff, mut fcfs, mut kk) = (0.0, 0.0, 0.0);
        for seed in 0..10 {
            let (dims, loads) = random_window(seed, 32, 240);
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..]] {
                diff += variance(
                    &window,
                    &run(&mut Differencing::default(), &window, 8, seeded, 0),
                );
                fcfs += variance(&window, &run(&mut Fcfs, &window, 8, seeded, 0));
                kk += variance(
                    &window,
                    &run(&mut KarmarkarKarp::default(), &window, 8, seeded, 0),
                );
            }
        }
        assert!(diff < 0.8 * fcfs, "differencing {diff} vs fcfs {fcfs}");
        assert!(
            diff < 0.8 * kk,
            "differencing {diff} vs karmarkar_karp {kk}"
        );
    }
}
