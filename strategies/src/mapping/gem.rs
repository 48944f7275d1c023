//! GEM's variability-aware expert mapping (gem.txt section 3.3.3 and Appendix B): score a
//! mapping by replaying the trace window through the per-GPU cost curves (equation 1),
//! build an initial mapping greedily heaviest expert first (Algorithm 2), refine it by the
//! best cross-GPU swap until a swap gains less than 0.1 % (Algorithm 3), and keep the best of
//! K restarts whose utilizations after the first carry 20 % noise (Algorithm 4).
//!
//! The search keeps, per window step, every GPU's token count and cost, so a candidate swap
//! costs two curve lookups per step; a candidate is abandoned as soon as its partial score
//! plus a lower bound of the remaining steps (the larger cost of the GPUs the swap does not
//! touch) cannot beat the best swap found so far, or the cheapest of the last rounds' leading
//! swaps priced first on the new mapping (`Search::refine`); a swap whose GPU pair's bounds, or
//! either expert's bound alone (its GPU's least cost without it), already reach that is not
//! priced. On whole token counts within the lookup tables (GEM's traces) a candidate reads the
//! tables by integer load, the same values `GpuCosts::cost` returns, and is first walked over
//! its GPU pair's steps in the order where the mapping's cost stands furthest above the pair's
//! bound (`rejects`), which rejects most candidates in a fraction of the steps; only a
//! candidate that walk cannot reject is priced in step order, so every sum a choice reads is
//! the same. Restarts run on scoped
//! threads, each taking the next restart left; their noisy utilizations are drawn up front from the layer's stream, so the result
//! does not depend on the thread count. The search is a pure function of the window, the
//! curves and those utilizations, so its results are kept for the process (`SEARCHED`): cells
//! that differ only in what the mapping does not see (GEM's sharegpt and codecontests cells
//! share trace and curves) search once.

use crate::mapping::linear::linear_assignment;
use expertsim_serving::memo::Memo;
use expertsim_serving::policies::mapping::gpu_costs::GpuCosts;
use expertsim_serving::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use expertsim_serving::rng::SimRng;
use rand::RngExt;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Leading candidates of a refinement round kept as the next round's hints (`Search::refine`).
const HINTS: usize = 8;

/// GEM with its parameters (defaults: K = 30, 20 % noise, 0.1 % convergence).
#[derive(Clone, Copy, Debug)]
pub struct Gem {
    pub restarts: usize,
    pub noise: f64,
    pub min_relative_drop: f64,
    pub keep_linear_if_better: bool,
}

impl Default for Gem {
    fn default() -> Self {
        Gem {
            restarts: 30,
            noise: 0.2,
            min_relative_drop: 0.001,
            keep_linear_if_better: true,
        }
    }
}

/// The window of one layer in the layout the search reads.
pub struct Search<'a> {
    n_experts: usize,
    n_gpus: usize,
    n_steps: usize,
    /// `counts[e * n_steps + t]`.
    counts: Vec<f64>,
    /// The counts as whole tokens (`whole[e * n_steps + t]`) when every count is a whole number
    /// and every step's total is in the lookup tables: then every GPU's load at every step, under
    /// any mapping, is a table index, and a candidate swap reads the tables directly.
    whole: Option<Vec<u32>>,
    /// With `whole` counts, `splits[pair_index(ga, gb) * joints + j]`: the bits of
    /// `least_split` of GPUs ga < gb at joint load j, for every joint load a step can hold
    /// (`joints`: the largest step total plus one), or 0 where not yet computed (`split`):
    /// each is computed once for all restarts and threads, where a round first needs it.
    splits: Vec<AtomicU64>,
    joints: usize,
    costs: &'a GpuCosts,
}

/// A complete or partial mapping with its per-step bookkeeping.
#[derive(Clone, Debug)]
pub struct State {
    /// GPU of each expert (`usize::MAX` while unplaced).
    pub gpu_of: Vec<usize>,
    /// `load[t * G + g]`: tokens of GPU g at step t.
    load: Vec<f64>,
    /// `cost[t * G + g] = C_g(load)`.
    cost: Vec<f64>,
    pub score: f64,
}

impl<'a> Search<'a> {
    pub fn new(problem: &LayerProblem<'a>) -> Search<'a> {
        let (n_experts, n_steps) = (problem.n_experts, problem.n_steps());
        let mut counts = vec![0.0; n_experts * n_steps];
        for t in 0..n_steps {
            for (e, &c) in problem.step(t).iter().enumerate() {
                counts[e * n_steps + t] = f64::from(c);
            }
        }
        let limit = problem.costs.table_limit() as f64;
        let whole_steps = (0..n_steps).all(|t| {
            let step = problem.step(t);
            step.iter().all(|&c| c >= 0.0 && c.fract() == 0.0)
                && step.iter().map(|&c| f64::from(c)).sum::<f64>() <= limit
        });
        let whole: Option<Vec<u32>> =
            whole_steps.then(|| counts.iter().map(|&c| c as u32).collect());
        let g_count = problem.n_gpus();
        let (mut splits, mut joints) = (Vec::new(), 0);
        if let Some(whole) = &whole {
            let largest = (0..n_steps)
                .map(|t| {
                    (0..n_experts)
                        .map(|e| whole[e * n_steps + t] as usize)
                        .sum()
                })
                .max()
                .unwrap_or(0);
            joints = largest + 1;
            splits = std::iter::repeat_with(|| AtomicU64::new(0))
                .take(g_count * g_count.saturating_sub(1) / 2 * joints)
                .collect();
        }
        Search {
            n_experts,
            n_gpus: g_count,
            n_steps,
            counts,
            whole,
            splits,
            joints,
            costs: problem.costs,
        }
    }

    /// `split_in` of the cells of GPUs `ga < gb`.
    #[cfg(test)]
    fn split(&self, ga: usize, gb: usize, joint: usize) -> f64 {
        self.split_in(self.split_cells(ga, gb), ga, gb, joint)
    }

    /// The cells of `splits` of GPUs `ga < gb`, by joint load (a round reads a pair's for all
    /// its steps).
    fn split_cells(&self, ga: usize, gb: usize) -> &[AtomicU64] {
        &self.splits[pair_index(ga, gb, self.n_gpus) * self.joints..][..self.joints]
    }

    /// `least_split` of GPUs `ga < gb` at joint load `joint`, from their cells of `splits`
    /// (`split_cells`) where a restart already computed it. A value is stored whole by its
    /// bits, and every thread computes the same value, so a race only computes it twice; a
    /// least of 0.0 is computed each time.
    fn split_in(&self, cells: &[AtomicU64], ga: usize, gb: usize, joint: usize) -> f64 {
        let cell = &cells[joint];
        let bits = cell.load(Ordering::Relaxed);
        if bits != 0 {
            return f64::from_bits(bits);
        }
        let least = least_split(
            self.costs.least_whole_from(ga),
            self.costs.least_whole_from(gb),
            joint,
        );
        cell.store(least.to_bits(), Ordering::Relaxed);
        least
    }

    fn expert(&self, e: usize) -> &[f64] {
        &self.counts[e * self.n_steps..(e + 1) * self.n_steps]
    }

    fn empty(&self) -> State {
        State {
            gpu_of: vec![usize::MAX; self.n_experts],
            load: vec![0.0; self.n_steps * self.n_gpus],
            cost: vec![0.0; self.n_steps * self.n_gpus],
            score: 0.0,
        }
    }

    /// Puts expert `e` on GPU `g`, its loads and costs; the score is left to the caller, once
    /// every expert is placed (`score_of`).
    fn place(&self, state: &mut State, e: usize, g: usize) {
        state.gpu_of[e] = g;
        let g_count = self.n_gpus;
        for (t, &c) in self.expert(e).iter().enumerate() {
            let i = t * g_count + g;
            state.load[i] += c;
            state.cost[i] = self.costs.cost(g, state.load[i]);
        }
    }

    fn score_of(&self, state: &State) -> f64 {
        state
            .cost
            .chunks_exact(self.n_gpus)
            .map(|row| row.iter().copied().fold(0.0, f64::max))
            .sum()
    }

    /// The state of a complete mapping given as the GPU of each expert.
    pub fn state_of(&self, gpu_of: &[usize]) -> State {
        let mut state = self.empty();
        for (e, &g) in gpu_of.iter().enumerate() {
            self.place(&mut state, e, g);
        }
        state.score = self.score_of(&state);
        state
    }

    /// Algorithm 2: experts by decreasing `utilization`, each onto the GPU (with room left,
    /// E / G experts each) whose choice gives the lowest score of the partial mapping; ties go
    /// to the lower GPU index.
    pub fn initial(&self, utilization: &[f64]) -> State {
        let mut order: Vec<usize> = (0..self.n_experts).collect();
        order.sort_by(|&a, &b| utilization[b].total_cmp(&utilization[a]).then(a.cmp(&b)));
        if let Some(whole) = &self.whole {
            return self.initial_whole(whole, &order);
        }
        let capacity = self.n_experts / self.n_gpus;
        let mut hosted = vec![0usize; self.n_gpus];
        let mut state = self.empty();
        let g_count = self.n_gpus;
        // Per step, the largest cost of the partial mapping, the first GPU with it and the
        // largest of the other GPUs': the largest cost of the GPUs other than `g` is the second
        // where `g` is the first, else the first (the same maximum as a scan without `g`).
        let mut top = vec![(f64::NEG_INFINITY, usize::MAX, f64::NEG_INFINITY); self.n_steps];
        let mut totals = vec![0.0; g_count];
        // owns[t * G + g]: GPU g's cost at step t with the expert being placed (what `place`
        // would compute).
        let mut owns = vec![0.0; self.n_steps * g_count];
        for e in order {
            let counts = self.expert(e);
            for (t, top) in top.iter_mut().enumerate() {
                *top = top_two(&state.cost[t * g_count..(t + 1) * g_count]);
            }
            // Every GPU's total at once, step by step (each GPU's sum in step order, as one
            // GPU at a time would add it; independent sums overlap). A GPU without room is
            // skipped: its total is never read.
            totals.fill(0.0);
            for (t, (&c, &(first, at, second))) in counts.iter().zip(&top).enumerate() {
                let row = t * g_count..(t + 1) * g_count;
                let (loads, owns) = (&state.load[row.clone()], &mut owns[row]);
                for (g, ((total, own), &load)) in totals.iter_mut().zip(owns).zip(loads).enumerate()
                {
                    if hosted[g] >= capacity {
                        continue;
                    }
                    *own = self.costs.cost(g, load + c);
                    *total += larger(*own, if at == g { second } else { first });
                }
            }
            let g = lowest_with_room(&totals, &hosted, capacity);
            hosted[g] += 1;
            // `place`, with the costs just computed.
            state.gpu_of[e] = g;
            for (t, &c) in counts.iter().enumerate() {
                let i = t * g_count + g;
                state.load[i] += c;
                state.cost[i] = owns[i];
            }
        }
        state.score = self.score_of(&state);
        state
    }

    /// `initial` on whole tokens, where every partial load is a whole token within the tables
    /// and `cost` is the table's entry: the same choices from the same sums, laid out by GPU.
    /// Each GPU's loads and costs are contiguous over the steps (`loads[g * T + t]`), so a GPU's
    /// total is one pass over its steps, in step order as before. Each step's largest cost, its
    /// GPU and the largest of the other GPUs' are kept up to date as experts are placed
    /// (`raise`), rather than found again for every expert: the largest cost of the GPUs other
    /// than `g` is the same value either way (where two GPUs share the largest, the second
    /// equals the first whichever of them is named).
    fn initial_whole(&self, whole: &[u32], order: &[usize]) -> State {
        let (g_count, n_steps) = (self.n_gpus, self.n_steps);
        let capacity = self.n_experts / g_count;
        let mut hosted = vec![0usize; g_count];
        let mut state = self.empty();
        let mut loads = vec![0u32; g_count * n_steps];
        let mut costs = vec![0.0; g_count * n_steps];
        let mut owns = vec![0.0; g_count * n_steps];
        let mut totals = vec![0.0; g_count];
        let mut first = vec![0.0; n_steps];
        let mut second = vec![0.0; n_steps];
        let mut at = vec![0usize; n_steps];
        let column = |costs: &[f64], t: usize| -> (f64, usize, f64) {
            let (mut best, mut at, mut next) = (f64::NEG_INFINITY, usize::MAX, f64::NEG_INFINITY);
            for (h, cost) in costs.chunks_exact(n_steps).enumerate() {
                let x = cost[t];
                if x > best {
                    (next, best, at) = (best, x, h);
                } else if x > next {
                    next = x;
                }
            }
            (best, at, next)
        };
        for t in 0..n_steps {
            (first[t], at[t], second[t]) = column(&costs, t);
        }
        let tables: Vec<&[f64]> = (0..g_count).map(|g| self.costs.table(g)).collect();
        for &e in order {
            let counts = &whole[e * n_steps..][..n_steps];
            for (g, total) in totals.iter_mut().enumerate() {
                if hosted[g] >= capacity {
                    continue;
                }
                let (table, load) = (tables[g], &loads[g * n_steps..][..n_steps]);
                let own = &mut owns[g * n_steps..][..n_steps];
                let (first, second, at) = (&first[..n_steps], &second[..n_steps], &at[..n_steps]);
                let mut sum = 0.0;
                for t in 0..n_steps {
                    let x = table[(load[t] + counts[t]) as usize];
                    own[t] = x;
                    sum += larger(x, if at[t] == g { second[t] } else { first[t] });
                }
                *total = sum;
            }
            let g = lowest_with_room(&totals, &hosted, capacity);
            hosted[g] += 1;
            state.gpu_of[e] = g;
            let own = &owns[g * n_steps..][..n_steps];
            for (t, &c) in counts.iter().enumerate() {
                loads[g * n_steps + t] += c;
                let (old, new) = (costs[g * n_steps + t], own[t]);
                costs[g * n_steps + t] = new;
                if new >= old {
                    // `raise`: the cost grew or held.
                    if at[t] == g {
                        first[t] = new;
                    } else if new > first[t] {
                        (second[t], first[t], at[t]) = (first[t], new, g);
                    } else if new > second[t] {
                        second[t] = new;
                    }
                } else {
                    (first[t], at[t], second[t]) = column(&costs, t);
                }
            }
        }
        for g in 0..g_count {
            for t in 0..n_steps {
                state.load[t * g_count + g] = f64::from(loads[g * n_steps + t]);
                state.cost[t * g_count + g] = costs[g * n_steps + t];
            }
        }
        state.score = self.score_of(&state);
        state
    }

    /// Algorithm 3: commits the best cross-GPU swap while one lowers the score, stopping after
    /// a swap that lowers it by less than `min_relative_drop` of the score before it. Returns
    /// the number of swaps.
    ///
    /// The best swap is the first, in expert order, with the largest drop. Each round first
    /// prices the last rounds' leading candidates (`hints`: the last `HINTS` that led a scan
    /// when they were priced) on the new mapping: no swap that
    /// costs more than the cheapest of them can be the best, so the scan abandons a candidate
    /// once its partial score plus the remaining bound reaches that price (with a margin far
    /// above rounding); the scan itself is unchanged, so it picks the same swap.
    pub fn refine(&self, state: &mut State, min_relative_drop: f64) -> usize {
        self.refine_with(&mut Scratch::default(), state, min_relative_drop)
    }

    /// `refine` with the pair and expert buffers of `scratch`, which a thread keeps across the
    /// restarts it runs: every entry a round reads it writes first that round.
    fn refine_with(
        &self,
        scratch: &mut Scratch,
        state: &mut State,
        min_relative_drop: f64,
    ) -> usize {
        let (g_count, n_steps) = (self.n_gpus, self.n_steps);
        let n_pairs = g_count * g_count;
        // other[p * T + t]: largest cost at step t among GPUs other than the pair p = (ga, gb);
        // bound[p * T + t]: a lower bound of step t's cost after any swap between ga and gb;
        // suffix[p * (T + 1) + t]: sum of bound[p, t..].
        let Scratch {
            other,
            bound,
            suffix,
            walks,
            withouts,
        } = scratch;
        other.resize(n_pairs * n_steps, 0.0);
        bound.resize(n_pairs * n_steps, 0.0);
        suffix.resize(n_pairs * (n_steps + 1), 0.0);
        // loads[g * T + t]: GPU g's whole tokens at step t (with `whole` counts).
        let mut loads = vec![
            0u32;
            if self.whole.is_some() {
                g_count * n_steps
            } else {
                0
            }
        ];
        let mut alone = vec![0.0; self.n_experts * g_count];
        // withouts[e * T + t]: expert e's GPU's least cost at step t without e (see `alone`
        // below); it reads only e's tokens and its GPU's loads, so a round recomputes it only
        // for the experts on a GPU whose loads changed since (`stale`: the last swap's two, or
        // every GPU on the first round).
        withouts.resize(self.n_experts * n_steps, 0.0);
        let mut stale = vec![true; g_count];
        let mut tops = vec![[(0.0, usize::MAX); 3]; n_steps];
        // walks[p * T..][..T]: the steps of pair p in the order `rejects` walks them (with
        // `whole` counts, built each round for the pairs the scan may read: `walk_pair` below);
        // `peak[t]`, the mapping's cost at step t; `order`, a pair's steps.
        if self.whole.is_some() {
            walks.resize(n_pairs * n_steps, WalkStep::default());
        }
        let mut peak = vec![0.0; n_steps];
        let mut order: Vec<u64> = Vec::with_capacity(n_steps);
        // first_row[ga * G + gb], last_partner[ga * G + gb]: see the walks' building below.
        let (mut first_row, mut last_partner) = (vec![0; n_pairs], vec![0; n_pairs]);
        let mut hints: Vec<(usize, usize)> = Vec::new();
        let (mut partners, mut heads): (Vec<Partner>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut swaps = 0;
        loop {
            if self.whole.is_some() {
                for (t, row) in state.load.chunks_exact(g_count).enumerate() {
                    for (g, &x) in row.iter().enumerate() {
                        loads[g * n_steps + t] = x as u32;
                    }
                }
            }
            if self.whole.is_some() {
                for (t, row) in state.cost.chunks_exact(g_count).enumerate() {
                    peak[t] = row.iter().copied().fold(0.0, f64::max);
                }
            }
            // tops[t]: step t's three largest costs above 0.0 with their GPUs, largest first
            // (first GPU on ties), `(0.0, usize::MAX)` where fewer GPUs cost more than 0.0.
            for (top, row) in tops.iter_mut().zip(state.cost.chunks_exact(g_count)) {
                *top = [(0.0, usize::MAX); 3];
                for (h, &x) in row.iter().enumerate() {
                    if x > top[0].0 {
                        top.copy_within(0..2, 1);
                        top[0] = (x, h);
                    } else if x > top[1].0 {
                        top[2] = top[1];
                        top[1] = (x, h);
                    } else if x > top[2].0 {
                        top[2] = (x, h);
                    }
                }
            }
            // A pair's entries hold for either order (the same GPUs untouched, the same half
            // load, the smaller of the two least costs), so each unordered pair of different
            // GPUs is computed once and copied to its mirror; a GPU with itself is never read.
            for ga in 0..g_count {
                for gb in ga + 1..g_count {
                    let p = ga * g_count + gb;
                    let others = &mut other[p * n_steps..][..n_steps];
                    let bounds = &mut bound[p * n_steps..][..n_steps];
                    // Each step's untouched cost is the largest cost of the GPUs other than ga
                    // and gb (0.0 where none is larger): the first of its three largest on
                    // neither. Whatever a swap does, the pair keeps its joint load. On whole
                    // tokens a swap splits it into two whole loads, so the step costs at least
                    // the least over every whole split of the larger of the two GPUs'
                    // `least_whole_from` bounds (`least_split`). Otherwise one of the pair ends
                    // with at least half of it, so the step costs at least the cheaper of the
                    // two GPUs' least cost at half the joint load or more (`least_below`: from
                    // the whole token at or under half, a lookup).
                    if self.whole.is_some() {
                        let cells = self.split_cells(ga, gb);
                        let (la, lb) = (
                            &loads[ga * n_steps..][..n_steps],
                            &loads[gb * n_steps..][..n_steps],
                        );
                        for ((((o, b), top), &x), &y) in others
                            .iter_mut()
                            .zip(bounds.iter_mut())
                            .zip(&tops)
                            .zip(la)
                            .zip(lb)
                        {
                            let untouched = untouched_by(top, ga, gb);
                            *o = untouched;
                            *b = untouched.max(self.split_in(cells, ga, gb, (x + y) as usize));
                        }
                    } else {
                        let steps = state.load.chunks_exact(g_count);
                        for (((o, b), top), row) in others
                            .iter_mut()
                            .zip(bounds.iter_mut())
                            .zip(&tops)
                            .zip(steps)
                        {
                            let untouched = untouched_by(top, ga, gb);
                            let half = 0.5 * (row[ga] + row[gb]);
                            let pair_bound = self
                                .costs
                                .least_below(ga, half)
                                .min(self.costs.least_below(gb, half));
                            *o = untouched;
                            *b = untouched.max(pair_bound);
                        }
                    }
                    let suffixes = &mut suffix[p * (n_steps + 1)..][..n_steps + 1];
                    suffixes[n_steps] = 0.0;
                    let mut rest = 0.0;
                    for (s, &b) in suffixes[..n_steps].iter_mut().zip(&*bounds).rev() {
                        rest += b;
                        *s = rest;
                    }
                    let mirror = gb * g_count + ga;
                    other.copy_within(p * n_steps..(p + 1) * n_steps, mirror * n_steps);
                    bound.copy_within(p * n_steps..(p + 1) * n_steps, mirror * n_steps);
                    suffix.copy_within(
                        p * (n_steps + 1)..(p + 1) * (n_steps + 1),
                        mirror * (n_steps + 1),
                    );
                }
            }
            // alone[e * G + g]: a lower bound of any swap of expert e with an expert on GPU g
            // (either first in the pair: the pair's bounds hold for either order): each step's
            // bound or e's GPU's least cost without e (it keeps at least its load less e's),
            // whichever is larger, summed in step order. Each term is at most the step's cost
            // after the swap and rounding is monotone, so where this reaches the threshold so
            // does the swap's total, which `swap_total` would reject at its last step: the swap
            // is not priced. e's GPU's least cost without e does not depend on the other GPU, so
            // it is looked up once per step (`withouts`) for all of them.
            for e in 0..self.n_experts {
                let ge = state.gpu_of[e];
                let without = &mut withouts[e * n_steps..][..n_steps];
                match &self.whole {
                    _ if !stale[ge] => {}
                    Some(whole) => {
                        // On whole tokens e's GPU keeps a whole load of its load less e's or
                        // more.
                        let rising = self.costs.least_whole_from(ge);
                        let own = &loads[ge * n_steps..][..n_steps];
                        for ((w, &l), &c) in without.iter_mut().zip(own).zip(&whole[e * n_steps..])
                        {
                            *w = rising[(l - c) as usize];
                        }
                    }
                    None => {
                        for (t, (w, &c)) in without.iter_mut().zip(self.expert(e)).enumerate() {
                            *w = self.costs.least_below(ge, state.load[t * g_count + ge] - c);
                        }
                    }
                }
                let without = &*without;
                for g in (0..g_count).filter(|&g| g != ge) {
                    let p = ge * g_count + g;
                    let bounds = &bound[p * n_steps..(p + 1) * n_steps];
                    let mut sum = 0.0;
                    for (&b, &w) in bounds.iter().zip(without) {
                        sum += larger(b, w);
                    }
                    alone[e * g_count + g] = sum;
                }
            }
            let priced = |a: usize, b: usize, threshold: f64| -> Option<f64> {
                let (ga, gb) = (state.gpu_of[a], state.gpu_of[b]);
                let p = ga * g_count + gb;
                let others = &other[p * n_steps..(p + 1) * n_steps];
                let remaining = &suffix[p * (n_steps + 1) + 1..(p + 1) * (n_steps + 1)];
                self.swap_total(state, &loads, others, remaining, a, b, threshold)
            };
            // The cheapest of the last round's leading candidates, as a ceiling (see above).
            let ceiling = hints
                .iter()
                .filter(|&&(a, b)| state.gpu_of[a] != state.gpu_of[b])
                .filter_map(|&(a, b)| priced(a, b, f64::INFINITY))
                .fold(f64::INFINITY, f64::min)
                * (1.0 + 1e-9);
            let previous = state.score;
            // heads[ga]..heads[ga + 1] of `partners`: the experts, ascending, that a row on GPU
            // ga may still be swapped with this round: on another GPU whose pair bounds with ga
            // are below the round's first threshold, with their own bound (`alone`) below it
            // too, each listed with its GPU and that bound. The threshold only falls during the
            // round, so every expert left out is one the scan's own check would skip (`live` or
            // `alone`); the scan walks the rest in the same order with the same checks.
            let first_threshold = previous.min(ceiling);
            partners.clear();
            heads.clear();
            heads.push(0);
            last_partner.fill(0);
            for ga in 0..g_count {
                for (b, &gb) in state.gpu_of.iter().enumerate() {
                    if gb != ga
                        && suffix[(ga * g_count + gb) * (n_steps + 1)] < first_threshold
                        && alone[b * g_count + ga] < first_threshold
                    {
                        partners.push(Partner {
                            expert: b as u32,
                            gpu: gb as u32,
                            alone: alone[b * g_count + ga],
                        });
                        last_partner[ga * g_count + gb] = b;
                    }
                }
                heads.push(partners.len());
            }
            // The walks of GPUs ga < gb, both orders (`walks[(ga * G + gb) * T..]` and
            // `walks[(gb * G + ga) * T..]`, their loads exchanged). The pair's steps go by how
            // far the mapping's cost stands above the pair's bound, largest first: a swap moves
            // a few tokens, so its step costs lie near the mapping's, and where they stand far
            // above the bound the partial sum passes the threshold soonest. Any order gives the
            // same results (`rejects`), so the key is coarse: the high 32 bits of the
            // difference (not negative: the mapping's cost is one of the splits the bound is
            // the least of), inverted, above the step.
            let walk_pair = |walks: &mut [WalkStep], order: &mut Vec<u64>, ga: usize, gb: usize| {
                let p = ga * g_count + gb;
                let bounds = &bound[p * n_steps..][..n_steps];
                order.clear();
                order.extend(peak.iter().zip(bounds).enumerate().map(|(t, (&x, &b))| {
                    let above = (x - b).max(0.0);
                    (!above.to_bits() >> 32 << 32) | t as u64
                }));
                order.sort_unstable();
                let (others, la, lb) = (
                    &other[p * n_steps..][..n_steps],
                    &loads[ga * n_steps..][..n_steps],
                    &loads[gb * n_steps..][..n_steps],
                );
                // The mirror's walk lies past the pair's: (gb * G + ga) > (ga * G + gb).
                let (front, back) = walks.split_at_mut(gb * g_count * n_steps);
                let walk = &mut front[p * n_steps..][..n_steps];
                let mirror = &mut back[ga * n_steps..][..n_steps];
                let mut rest = 0.0;
                for ((step, mirrored), &key) in walk.iter_mut().zip(mirror).zip(&*order).rev() {
                    let t = (key & u64::from(u32::MAX)) as usize;
                    *step = WalkStep {
                        other: others[t],
                        rest,
                        load_a: la[t],
                        load_b: lb[t],
                        step: t as u32,
                    };
                    *mirrored = WalkStep {
                        load_a: lb[t],
                        load_b: la[t],
                        ..*step
                    };
                    rest += bounds[t];
                }
            };
            if self.whole.is_some() {
                // Only the walks the scan may read are built: it prices a swap of a with b > a
                // only where b is among a's GPU's partners and a's own bound with b's GPU is
                // below the threshold, at most the first. So a pair's walk is read in one order
                // (ga, gb) only where the first expert on ga with its bound with gb below the
                // first threshold (`first_row`) comes before the last of ga's partners on gb.
                first_row.fill(usize::MAX);
                for (a, &ga) in state.gpu_of.iter().enumerate() {
                    for gb in 0..g_count {
                        let first = &mut first_row[ga * g_count + gb];
                        if gb != ga
                            && *first == usize::MAX
                            && alone[a * g_count + gb] < first_threshold
                        {
                            *first = a;
                        }
                    }
                }
                let read = |ga: usize, gb: usize| {
                    first_row[ga * g_count + gb] < last_partner[ga * g_count + gb]
                };
                for ga in 0..g_count {
                    for gb in ga + 1..g_count {
                        if read(ga, gb) || read(gb, ga) {
                            walk_pair(walks, &mut order, ga, gb);
                        }
                    }
                }
            }
            let mut best_drop = 0.0;
            let mut best = None;
            // live[g]: whether a swap of the row's expert with one on GPU g may still beat the
            // threshold by the checks that read the row's expert and g alone (another GPU, its
            // pair's bounds and the expert's bound below the threshold); recomputed whenever
            // the threshold falls, so a GPU's experts are skipped by one lookup each.
            let mut live = vec![false; g_count];
            // With whole counts, the scan prices a swap by `whole_total` from slices taken once
            // per row (the row's expert and GPU) and once per row and other GPU (`pairs`).
            let mut pairs: Vec<Option<WholePair<'_>>> = vec![None; g_count];
            let live_at = |live: &mut [bool], a: usize, threshold: f64| -> bool {
                let ga = state.gpu_of[a];
                for (g, live) in live.iter_mut().enumerate() {
                    *live = g != ga
                        && suffix[(ga * g_count + g) * (n_steps + 1)] < threshold
                        && alone[a * g_count + g] < threshold;
                }
                live.contains(&true)
            };
            for a in 0..self.n_experts {
                let ga = state.gpu_of[a];
                let mut threshold = (previous - best_drop).min(ceiling);
                if !live_at(&mut live, a, threshold) {
                    continue;
                }
                let row = self.whole.as_ref().map(|whole| {
                    for (g, pair) in pairs.iter_mut().enumerate() {
                        let p = ga * g_count + g;
                        *pair = (g != ga).then(|| WholePair {
                            others: &other[p * n_steps..][..n_steps],
                            remaining: &suffix[p * (n_steps + 1) + 1..][..n_steps],
                            load_b: &loads[g * n_steps..][..n_steps],
                            table_b: self.costs.table(g),
                            walk: &walks[p * n_steps..][..n_steps],
                        });
                    }
                    (
                        whole,
                        &whole[a * n_steps..][..n_steps],
                        &loads[ga * n_steps..][..n_steps],
                        self.costs.table(ga),
                    )
                });
                let partners = &partners[heads[ga]..heads[ga + 1]];
                let after = partners.partition_point(|b| b.expert as usize <= a);
                for partner in &partners[after..] {
                    let (b, gb) = (partner.expert as usize, partner.gpu as usize);
                    // Any swap between ga and gb costs its first step, at least that step's
                    // bound, plus `remaining[0]`: where the bounds' sum already reaches the
                    // threshold, `swap_total` would stop at the first step, so it is not called;
                    // nor where either expert's bound reaches it (`alone`).
                    if !live[gb] || partner.alone >= threshold {
                        continue;
                    }
                    let total = match (row, &pairs[gb]) {
                        (Some((whole, ca, la, table_a)), Some(pair)) => {
                            let cb = &whole[b * n_steps..][..n_steps];
                            if rejects(ca, table_a, pair, cb, threshold) {
                                None
                            } else {
                                whole_total(ca, la, table_a, pair, cb, threshold)
                            }
                        }
                        _ => priced(a, b, threshold),
                    };
                    if let Some(total) = total {
                        let drop = previous - total;
                        if drop > best_drop {
                            best_drop = drop;
                            best = Some((a, b));
                            hints.push((a, b));
                            threshold = (previous - best_drop).min(ceiling);
                            live_at(&mut live, a, threshold);
                        }
                    }
                }
            }
            let Some((a, b)) = best else {
                break;
            };
            let keep = hints.len().saturating_sub(HINTS);
            hints.drain(..keep);
            stale.fill(false);
            (stale[state.gpu_of[a]], stale[state.gpu_of[b]]) = (true, true);
            self.swap(state, a, b);
            swaps += 1;
            if best_drop / previous < min_relative_drop {
                break;
            }
        }
        swaps
    }

    /// The score after swapping experts `a` and `b` (on different GPUs), step by step, or
    /// `None` as soon as the partial score plus `remaining[t]` (a lower bound of the steps after
    /// `t`) reaches `threshold`. `others[t]`: the largest cost at step `t` of the GPUs the swap
    /// does not touch; `loads`: the whole-token loads by GPU (with `whole` counts).
    #[allow(clippy::too_many_arguments)]
    fn swap_total(
        &self,
        state: &State,
        loads: &[u32],
        others: &[f64],
        remaining: &[f64],
        a: usize,
        b: usize,
        threshold: f64,
    ) -> Option<f64> {
        let (ga, gb) = (state.gpu_of[a], state.gpu_of[b]);
        let n_steps = self.n_steps;
        let mut total = 0.0;
        if let Some(whole) = &self.whole {
            // The same sums as below on whole tokens: `cost` of a whole count in the tables is
            // the table's entry.
            let (ca, cb) = (
                &whole[a * n_steps..(a + 1) * n_steps],
                &whole[b * n_steps..(b + 1) * n_steps],
            );
            let (la, lb) = (
                &loads[ga * n_steps..(ga + 1) * n_steps],
                &loads[gb * n_steps..(gb + 1) * n_steps],
            );
            let (table_a, table_b) = (self.costs.table(ga), self.costs.table(gb));
            let pair = WholePair {
                others,
                remaining,
                load_b: lb,
                table_b,
                walk: &[],
            };
            return whole_total(ca, la, table_a, &pair, cb, threshold);
        } else {
            let g_count = self.n_gpus;
            let (ca, cb) = (self.expert(a), self.expert(b));
            for t in 0..n_steps {
                let d = cb[t] - ca[t];
                let na = state.load[t * g_count + ga] + d;
                let nb = state.load[t * g_count + gb] - d;
                total += larger(
                    larger(others[t], self.costs.cost(ga, na)),
                    self.costs.cost(gb, nb),
                );
                if total + remaining[t] >= threshold {
                    return None;
                }
            }
        }
        Some(total)
    }

    fn swap(&self, state: &mut State, a: usize, b: usize) {
        let (ga, gb) = (state.gpu_of[a], state.gpu_of[b]);
        let g_count = self.n_gpus;
        for t in 0..self.n_steps {
            let d = self.expert(b)[t] - self.expert(a)[t];
            let (ia, ib) = (t * g_count + ga, t * g_count + gb);
            state.load[ia] += d;
            state.load[ib] -= d;
            state.cost[ia] = self.costs.cost(ga, state.load[ia]);
            state.cost[ib] = self.costs.cost(gb, state.load[ib]);
        }
        state.gpu_of.swap(a, b);
        state.score = self.score_of(state);
    }

    /// One restart: initial mapping from `utilization`, then refinement.
    pub fn restart(&self, utilization: &[f64], min_relative_drop: f64) -> State {
        self.restart_with(&mut Scratch::default(), utilization, min_relative_drop)
    }

    fn restart_with(
        &self,
        scratch: &mut Scratch,
        utilization: &[f64],
        min_relative_drop: f64,
    ) -> State {
        let mut state = self.initial(utilization);
        self.refine_with(scratch, &mut state, min_relative_drop);
        state
    }
}

/// `refine`'s buffers by GPU pair and by expert, kept by a thread across the restarts it runs of
/// one search rather than allocated and zeroed for each (on eight GPUs and 128 steps the zeroing
/// alone was about a twentieth of a search).
#[derive(Default)]
struct Scratch {
    other: Vec<f64>,
    bound: Vec<f64>,
    suffix: Vec<f64>,
    walks: Vec<WalkStep>,
    withouts: Vec<f64>,
}

/// An expert a row of `refine`'s scan may be swapped with: the expert, its GPU and its bound
/// (`alone`) for swaps with the row's GPU.
#[derive(Clone, Copy, Debug)]
struct Partner {
    expert: u32,
    gpu: u32,
    alone: f64,
}

/// What a swap between a GPU pair reads of the other GPU (`b`'s): the largest cost of the GPUs
/// the swap leaves untouched per step, the pair's bounds of the steps after each step, the
/// GPU's whole-token loads and its table, and the pair's steps in `rejects`' order.
#[derive(Clone, Copy)]
struct WholePair<'s> {
    others: &'s [f64],
    remaining: &'s [f64],
    load_b: &'s [u32],
    table_b: &'s [f64],
    walk: &'s [WalkStep],
}

/// One step of a GPU pair `(a, b)` in the order `rejects` walks them: the largest cost of the
/// untouched GPUs, the sum of the pair's bounds of the steps walked after it, both GPUs' loads
/// and the step's index in the window.
#[derive(Clone, Copy, Debug, Default)]
struct WalkStep {
    other: f64,
    rest: f64,
    load_a: u32,
    load_b: u32,
    step: u32,
}

/// Relative margin by which `rejects` asks its partial sums to pass the threshold. Every term is
/// a latency (not negative) and the walk's sums and the window-order sums of `whole_total` each
/// add at most a few hundred of them, so they differ from the exact sums by a relative few
/// hundred units in the last place (about 1e-16 each), far below this.
const REJECT_MARGIN: f64 = 1e-9;

/// Whether the swap of expert `a` (tokens `ca`, on the GPU of table `table_a`) with expert `b`
/// (tokens `cb`, on `pair`'s GPU) certainly costs `threshold` or more, walking the steps in the
/// pair's order (`WalkStep`) rather than the window's. Each step's cost is at least its bound,
/// so the walk's partial sum plus the bounds of the steps left is at most the swap's total; the
/// walk answers yes only where that passes the threshold by `REJECT_MARGIN`, which the rounding
/// of the two orders' sums cannot undo: then `whole_total`'s own sum in window order reaches
/// the threshold (at its last step if not before), and it returns `None` too. Otherwise
/// `whole_total` prices the swap as before, so its result and every choice are unchanged.
#[inline(always)]
fn rejects(ca: &[u32], table_a: &[f64], pair: &WholePair<'_>, cb: &[u32], threshold: f64) -> bool {
    let limit = threshold * (1.0 + REJECT_MARGIN);
    let (table_b, n) = (pair.table_b, ca.len());
    let cb = &cb[..n];
    let mut total = 0.0;
    for s in pair.walk {
        let t = s.step as usize;
        let (x, y) = (ca[t], cb[t]);
        let na = s.load_a + y - x;
        let nb = s.load_b + x - y;
        total += larger(larger(s.other, table_a[na as usize]), table_b[nb as usize]);
        if total + s.rest >= limit {
            return true;
        }
    }
    false
}

/// `Search::swap_total` on whole tokens: the score after swapping expert `a` (tokens `ca`, on
/// the GPU of loads `la` and table `table_a`) with expert `b` (tokens `cb`, on `pair`'s GPU),
/// step by step, or `None` as soon as the partial score plus the remaining bound reaches
/// `threshold`. `cost` of a whole count in the tables is the table's entry.
#[inline(always)]
fn whole_total(
    ca: &[u32],
    la: &[u32],
    table_a: &[f64],
    pair: &WholePair<'_>,
    cb: &[u32],
    threshold: f64,
) -> Option<f64> {
    let n = ca.len();
    let (la, cb) = (&la[..n], &cb[..n]);
    let (others, remaining, lb) = (&pair.others[..n], &pair.remaining[..n], &pair.load_b[..n]);
    let table_b = pair.table_b;
    let mut total = 0.0;
    for t in 0..n {
        let na = la[t] + cb[t] - ca[t];
        let nb = lb[t] + ca[t] - cb[t];
        total += larger(
            larger(others[t], table_a[na as usize]),
            table_b[nb as usize],
        );
        if total + remaining[t] >= threshold {
            return None;
        }
    }
    Some(total)
}

/// The largest of `row`, the first index holding it and the largest of the others (`NEG_INFINITY`
/// where there are none).
fn top_two(row: &[f64]) -> (f64, usize, f64) {
    let (mut first, mut at, mut second) = (f64::NEG_INFINITY, usize::MAX, f64::NEG_INFINITY);
    for (h, &x) in row.iter().enumerate() {
        if x > first {
            (second, first, at) = (first, x, h);
        } else if x > second {
            second = x;
        }
    }
    (first, at, second)
}

/// The largest cost of a step's GPUs other than `ga` and `gb`, from the step's three largest
/// costs above 0.0 (`top`, largest first): the first on neither GPU, 0.0 where there is none.
#[inline(always)]
fn untouched_by(top: &[(f64, usize); 3], ga: usize, gb: usize) -> f64 {
    top.iter()
        .find(|&&(_, h)| h != ga && h != gb)
        .map_or(0.0, |&(x, _)| x)
}

/// The GPU with room (fewer than `capacity` experts) of the lowest total, the first on ties.
fn lowest_with_room(totals: &[f64], hosted: &[usize], capacity: usize) -> usize {
    let mut best = (f64::INFINITY, usize::MAX);
    for (g, (&on_g, &total)) in hosted.iter().zip(totals).enumerate() {
        if on_g < capacity && total < best.0 {
            best = (total, g);
        }
    }
    best.1
}

/// The index of the pair of GPUs `ga < gb` among the `g_count * (g_count - 1) / 2` pairs, in
/// the order `(0, 1), (0, 2), ..., (1, 2), ...`.
fn pair_index(ga: usize, gb: usize, g_count: usize) -> usize {
    ga * (2 * g_count - ga - 1) / 2 + (gb - ga - 1)
}

/// The least over every whole split `x + (joint - x)` of `max(a[x], b[joint - x])`, where `a`
/// and `b` never fall (`GpuCosts::least_whole_from`): the first `x` where `a`'s side reaches `b`'s is found
/// by bisection; from there on `a[x]` rules and only grows, before it `b`'s side rules and only
/// grows towards lower `x`, so the least is `a` at that `x` or `b` one token before it. Only
/// comparisons, so the value is one of the splits' exactly.
fn least_split(a: &[f64], b: &[f64], joint: usize) -> f64 {
    let (mut low, mut high) = (0, joint + 1);
    while low < high {
        let mid = low + (high - low) / 2;
        if a[mid] >= b[joint - mid] {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    let at = if low <= joint { a[low] } else { f64::INFINITY };
    let before = if low > 0 {
        b[joint + 1 - low]
    } else {
        f64::INFINITY
    };
    at.min(before)
}

/// The larger of two latencies: `f64::max` without its NaN handling (a latency is never NaN),
/// so the same value, in fewer instructions on the scan's path.
#[inline]
fn larger(x: f64, y: f64) -> f64 {
    if y > x { y } else { x }
}

/// Algorithm 4 on `problem`: the best of `gem.restarts` restarts (lowest score, earliest
/// restart on ties), or the linear mapping if it scores lower and `keep_linear_if_better`.
pub fn gem_place(gem: &Gem, problem: &LayerProblem<'_>, rng: &mut SimRng) -> (Vec<usize>, f64) {
    let u = problem.mean_utilization();
    let inputs: Vec<Vec<f64>> = (0..gem.restarts.max(1))
        .map(|i| {
            if i == 0 {
                u.clone()
            } else {
                u.iter()
                    .map(|&x| x * (1.0 + gem.noise * (2.0 * rng.random::<f64>() - 1.0)))
                    .collect()
            }
        })
        .collect();
    SEARCHED
        .get_or_compute(&search_key(gem, problem, &inputs), || {
            search_restarts(gem, problem, &inputs)
        })
        .as_ref()
        .clone()
}

/// The searches by `search_key`; a second caller of a search under way waits for it. It keeps
/// the 8192 most recently used: a search's result is its mapping (a word per expert: 1 kB for
/// 128 experts) and its key 32 bytes, so about 10 MB at most.
static SEARCHED: Memo<[u8; 32], (Vec<usize>, f64)> = Memo::new(8192);

/// Forgets every search, so that the next `gem_place` searches again: for a benchmark that
/// times the search itself rather than the memo.
pub fn forget_searches() {
    SEARCHED.clear();
}

/// The SHA-256 of everything `gem_place`'s search reads, each number by its bits and each list
/// behind its length: the parameters, the window, every GPU's curve and table size, and the
/// restarts' utilizations. A digest rather than the exact bytes, which would keep the window
/// and the curves (megabytes) per search; two inputs share a key with odds of 2^-128.
fn search_key(gem: &Gem, problem: &LayerProblem<'_>, inputs: &[Vec<f64>]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(gem.min_relative_drop.to_bits().to_le_bytes());
    hash.update([u8::from(gem.keep_linear_if_better)]);
    for n in [
        problem.n_experts,
        problem.window.len(),
        problem.costs.table_limit(),
    ] {
        hash.update((n as u64).to_le_bytes());
    }
    // The numbers' bytes are gathered and hashed in one call each (the same bytes in the same
    // order, so the same digest; a call per number cost more than the hashing itself).
    let bytes: Vec<u8> = problem
        .window
        .iter()
        .flat_map(|x| x.to_bits().to_le_bytes())
        .collect();
    hash.update(&bytes);
    hash.update(curves_digest(problem.costs));
    let mut bytes = Vec::with_capacity(inputs.iter().map(|i| 8 + 8 * i.len()).sum());
    for input in inputs {
        bytes.extend((input.len() as u64).to_le_bytes());
        for x in input {
            bytes.extend(x.to_bits().to_le_bytes());
        }
    }
    hash.update(&bytes);
    hash.finalize().into()
}

/// The SHA-256 of every GPU's curve, each behind its sample count, each sample's tokens and
/// latency by their bits. The layers of one deployment plan on the same curves (a megabyte for
/// Qwen3-30B-A3B), so each thread keeps the last curves' encoding and digest and hashes again
/// only when the encoding differs (compared word for word, cheaper than the hash).
fn curves_digest(costs: &GpuCosts) -> [u8; 32] {
    thread_local! {
        static LAST: RefCell<(Vec<u64>, [u8; 32])> = const { RefCell::new((Vec::new(), [0; 32])) };
    }
    let mut words = Vec::new();
    for curve in costs.curves() {
        words.push(curve.samples().count() as u64);
        for (tokens, nanos) in curve.samples() {
            words.extend([tokens.to_bits(), nanos.to_bits()]);
        }
    }
    LAST.with_borrow_mut(|(last, digest)| {
        if *last != words {
            let mut hash = Sha256::new();
            for w in &words {
                hash.update(w.to_le_bytes());
            }
            *digest = hash.finalize().into();
            *last = words;
        }
        *digest
    })
}

/// The restarts from `inputs` on scoped threads, each taking the next restart left; the best
/// state (or linear, see `gem_place`).
fn search_restarts(
    gem: &Gem,
    problem: &LayerProblem<'_>,
    inputs: &[Vec<f64>],
) -> (Vec<usize>, f64) {
    let search = Search::new(problem);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(inputs.len());
    let mut results: Vec<Option<State>> = vec![None; inputs.len()];
    if threads <= 1 {
        let mut scratch = Scratch::default();
        for (slot, input) in results.iter_mut().zip(inputs) {
            *slot = Some(search.restart_with(&mut scratch, input, gem.min_relative_drop));
        }
    } else {
        // Each thread takes the next restart not yet taken, so the threads finish together
        // whatever the restarts cost (a fixed split left one thread idle while the other ran
        // its share's long restarts); each result goes to its restart's place, so the best is
        // the same whichever thread ran what.
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (search, next) = (&search, &next);
                    scope.spawn(move || {
                        let mut scratch = Scratch::default();
                        std::iter::from_fn(|| {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            (i < inputs.len()).then(|| {
                                let restart = &inputs[i];
                                (
                                    i,
                                    search.restart_with(
                                        &mut scratch,
                                        restart,
                                        gem.min_relative_drop,
                                    ),
                                )
                            })
                        })
                        .collect::<Vec<_>>()
                    })
                })
                .collect();
            for handle in handles {
                for (i, state) in handle.join().expect("a GEM restart panicked") {
                    results[i] = Some(state);
                }
            }
        });
    }
    let mut best: Option<State> = None;
    for state in results.into_iter().flatten() {
        if best.as_ref().is_none_or(|b| state.score < b.score) {
            best = Some(state);
        }
    }
    let best = best.expect("at least one restart");
    if gem.keep_linear_if_better {
        let linear = linear_assignment(problem.n_experts, problem.n_gpus());
        let linear_state = search.state_of(&linear);
        if linear_state.score < best.score {
            return (linear, linear_state.score);
        }
    }
    (best.gpu_of, best.score)
}

impl ExpertMapper for Gem {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, rng: &mut SimRng) -> LayerMapping {
        let (gpu_of, _) = gem_place(self, problem, rng);
        LayerMapping::from_assignment(&gpu_of, problem.n_gpus())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_serving::cost::curve::CostCurve;
    use expertsim_serving::policies::mapping::score;
    use expertsim_serving::rng::stream;
    use expertsim_serving::serving::expert_trace::{TraceParams, generate};

    fn staircase() -> CostCurve {
        // 10 us floor, +5 us per 64-token tile.
        let mut samples = vec![(1.0, 10_000.0)];
        for k in 1..200 {
            samples.push((f64::from(k) * 64.0, 10_000.0 + 5_000.0 * f64::from(k - 1)));
            samples.push((f64::from(k) * 64.0 + 1.0, 10_000.0 + 5_000.0 * f64::from(k)));
        }
        CostCurve::new(samples).unwrap()
    }

    fn trace(n_experts: usize, top_k: usize, seed: u64) -> Vec<f32> {
        trace_of(n_experts, top_k, seed, 16)
    }

    /// Layer 0 of `n_experts` experts over `window`, priced by `costs`.
    fn layer_zero<'a>(
        n_experts: usize,
        window: &'a [f32],
        costs: &'a GpuCosts,
    ) -> LayerProblem<'a> {
        LayerProblem {
            layer: 0,
            n_experts,
            window,
            costs,
        }
    }

    fn trace_of(n_experts: usize, top_k: usize, seed: u64, steps: usize) -> Vec<f32> {
        let params = TraceParams {
            observed_steps: steps,
            unseen_steps: 1,
            tokens_per_step: 1024,
            ..TraceParams::default()
        };
        let (trace, _) = generate(&params, 1, n_experts, top_k, &mut stream(seed, "trace"));
        trace.window(0, 0..steps).to_vec()
    }

    #[test]
    fn search_score_matches_the_reference_score() {
        let costs = GpuCosts::scaled(&staircase(), &[0.88, 1.0, 1.0, 1.0], 20_000);
        let window = trace(16, 1, 1);
        let problem = layer_zero(16, &window, &costs);
        let search = Search::new(&problem);
        let linear = linear_assignment(16, 4);
        let state = search.state_of(&linear);
        let reference = score(&LayerMapping::from_assignment(&linear, 4), &problem);
        assert!(
            (state.score - reference).abs() < 1e-6,
            "{} vs {reference}",
            state.score
        );
    }

    #[test]
    fn a_search_is_named_by_everything_it_reads_and_a_repeat_returns_the_first_result() {
        let speeds = [0.88, 1.0, 1.0, 1.0];
        let costs = GpuCosts::scaled(&staircase(), &speeds, 40_000);
        let window = trace(16, 2, 1);
        let problem = layer_zero(16, &window, &costs);
        let gem = Gem::default();
        let inputs = vec![problem.mean_utilization()];
        let key = search_key(&gem, &problem, &inputs);
        let window_copy = window.clone();
        let same = LayerProblem {
            layer: 3,
            window: &window_copy,
            ..problem
        };
        assert_eq!(search_key(&gem, &same, &inputs), key);
        let mut other_window = window.clone();
        other_window[5] += 1.0;
        let slower = GpuCosts::scaled(&staircase(), &[0.87, 1.0, 1.0, 1.0], 40_000);
        let mut other_inputs = inputs.clone();
        other_inputs[0][2] *= 1.0 + 1e-12;
        for differing in [
            search_key(
                &gem,
                &LayerProblem {
                    window: &other_window,
                    ..problem
                },
                &inputs,
            ),
            search_key(
                &gem,
                &LayerProblem {
                    costs: &slower,
                    ..problem
                },
                &inputs,
            ),
            search_key(&gem, &problem, &other_inputs),
            search_key(
                &Gem {
                    min_relative_drop: 0.01,
                    ..gem
                },
                &problem,
                &inputs,
            ),
        ] {
            assert_ne!(differing, key);
        }
        // A repeat (same stream) returns what the first search found, and what a search
        // without the memo finds.
        let first = gem_place(&gem, &problem, &mut stream(7, "gem"));
        let again = gem_place(&gem, &problem, &mut stream(7, "gem"));
        assert_eq!(first, again);
        let mut rng = stream(7, "gem");
        let u = problem.mean_utilization();
        let inputs: Vec<Vec<f64>> = (0..gem.restarts)
            .map(|i| match i {
                0 => u.clone(),
                _ => u
                    .iter()
                    .map(|&x| x * (1.0 + gem.noise * (2.0 * rng.random::<f64>() - 1.0)))
                    .collect(),
            })
            .collect();
        assert_eq!(search_restarts(&gem, &problem, &inputs), first);
    }

    /// Algorithm 3 without shortcuts: every cross-GPU swap scored from scratch, the first with
    /// the largest drop committed.
    fn exhaustive_refine(search: &Search, state: &mut State, min_relative_drop: f64) -> usize {
        let mut swaps = 0;
        loop {
            let previous = state.score;
            let (mut best_drop, mut best) = (0.0, None);
            for a in 0..search.n_experts {
                for b in a + 1..search.n_experts {
                    if state.gpu_of[a] == state.gpu_of[b] {
                        continue;
                    }
                    let mut gpu_of = state.gpu_of.clone();
                    gpu_of.swap(a, b);
                    let drop = previous - search.state_of(&gpu_of).score;
                    if drop > best_drop {
                        best_drop = drop;
                        best = Some((a, b));
                    }
                }
            }
            let Some((a, b)) = best else {
                break;
            };
            search.swap(state, a, b);
            swaps += 1;
            if best_drop / previous < min_relative_drop {
                break;
            }
        }
        swaps
    }

    /// Calls `check` with a search over each of `shapes` (experts, top-k, GPU speeds) at each
    /// of `seeds`, on whole tokens (tables past every step's total, read directly) and on the
    /// fractional path (tables below it: the curve itself).
    fn each_search(
        shapes: &[(usize, usize, Vec<f64>)],
        seeds: std::ops::Range<u64>,
        check: impl FnMut(&Search<'_>, &LayerProblem<'_>, u64),
    ) {
        let windows: Vec<_> = shapes
            .iter()
            .map(|(n, k, speeds)| (*n, *k, speeds.clone(), 16))
            .collect();
        each_window_search(&windows, seeds, &[40_000, 64], check);
    }

    /// `check` on the search of each (experts, top-k, GPU speeds, window steps) case, each seed's
    /// trace, and each table limit; a limit of 40,000 tokens holds every step's whole loads
    /// (`Search::whole`), 64 none.
    fn each_window_search(
        cases: &[(usize, usize, Vec<f64>, usize)],
        seeds: std::ops::Range<u64>,
        limits: &[usize],
        mut check: impl FnMut(&Search<'_>, &LayerProblem<'_>, u64),
    ) {
        for (n_experts, top_k, speeds, steps) in cases {
            for seed in seeds.clone() {
                let window = trace_of(*n_experts, *top_k, seed, *steps);
                for &limit in limits {
                    let costs = GpuCosts::scaled(&staircase(), speeds, limit);
                    let problem = layer_zero(*n_experts, &window, &costs);
                    let search = Search::new(&problem);
                    assert_eq!(search.whole.is_some(), limit == 40_000);
                    check(&search, &problem, seed);
                }
            }
        }
    }

    /// `refine` from the mean utilizations' `initial`, at each least relative drop, commits the
    /// swaps (at least one), the mapping and the score bits of `exhaustive_refine`.
    fn refine_is_the_exhaustive_scan(
        search: &Search<'_>,
        problem: &LayerProblem<'_>,
        drops: &[f64],
    ) {
        for &min_relative_drop in drops {
            let initial = search.initial(&problem.mean_utilization());
            let (mut fast, mut slow) = (initial.clone(), initial);
            let swaps = search.refine(&mut fast, min_relative_drop);
            assert_eq!(
                swaps,
                exhaustive_refine(search, &mut slow, min_relative_drop)
            );
            assert!(swaps > 0);
            assert_eq!(fast.gpu_of, slow.gpu_of);
            assert_eq!(fast.score.to_bits(), slow.score.to_bits());
        }
    }

    #[test]
    fn refine_commits_the_swaps_an_exhaustive_scan_commits_on_whole_and_fractional_loads() {
        let shapes = [
            (16, 1, vec![0.88, 1.0, 1.0, 1.0]),
            (32, 4, vec![0.7, 0.9, 1.0, 1.0]),
        ];
        each_search(&shapes, 0..3, |search, problem, _| {
            refine_is_the_exhaustive_scan(search, problem, &[0.001, 0.0]);
        });
    }

    #[test]
    fn refine_on_long_windows_commits_the_swaps_an_exhaustive_scan_commits() {
        // 64- and 128-step windows, where the pairs' reordered walks (`rejects`) differ most
        // from the window's order.
        let cases = [
            (16, 2, vec![0.88, 1.0, 1.0, 1.0], 128),
            (32, 4, vec![0.7, 0.9, 1.0, 1.0], 64),
        ];
        each_window_search(&cases, 0..3, &[40_000], |search, problem, _| {
            refine_is_the_exhaustive_scan(search, problem, &[0.0]);
        });
    }

    #[test]
    fn rejects_only_swaps_whole_total_rejects() {
        // Random pairs of rising tables, loads, untouched costs and walk orders; each step's
        // bound the untouched cost (a lower bound of the step). Thresholds at, just above and
        // just below each swap's total, and spread around it.
        let mut rng = stream(5, "rejects");
        let (mut rejected, mut tried) = (0, 0);
        for _ in 0..2000 {
            let n = rng.random_range(1..64);
            let mut table = || {
                let mut x = rng.random_range(0.0..100.0);
                (0..400)
                    .map(|_| {
                        x += rng.random_range(0.0..3.0);
                        x
                    })
                    .collect::<Vec<f64>>()
            };
            let (table_a, table_b) = (table(), table());
            let ca: Vec<u32> = (0..n).map(|_| rng.random_range(0..50)).collect();
            let cb: Vec<u32> = (0..n).map(|_| rng.random_range(0..50)).collect();
            let la: Vec<u32> = ca.iter().map(|&c| c + rng.random_range(0..150)).collect();
            let lb: Vec<u32> = cb.iter().map(|&c| c + rng.random_range(0..150)).collect();
            let others: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..400.0)).collect();
            let mut remaining = vec![0.0; n];
            for t in (0..n.saturating_sub(1)).rev() {
                remaining[t] = remaining[t + 1] + others[t + 1];
            }
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            let mut walk = vec![WalkStep::default(); n];
            let mut rest = 0.0;
            for (k, &t) in order.iter().enumerate().rev() {
                walk[k] = WalkStep {
                    other: others[t],
                    rest,
                    load_a: la[t],
                    load_b: lb[t],
                    step: t as u32,
                };
                rest += others[t];
            }
            let pair = WholePair {
                others: &others,
                remaining: &remaining,
                load_b: &lb,
                table_b: &table_b,
                walk: &walk,
            };
            let total = whole_total(&ca, &la, &table_a, &pair, &cb, f64::INFINITY).unwrap();
            for threshold in [
                total,
                total.next_up(),
                total.next_down(),
                total * (1.0 + 1e-9),
                total * (1.0 - 1e-9),
                total * rng.random_range(0.5..1.5),
            ] {
                tried += 1;
                if rejects(&ca, &table_a, &pair, &cb, threshold) {
                    rejected += 1;
                    assert_eq!(
                        whole_total(&ca, &la, &table_a, &pair, &cb, threshold),
                        None,
                        "{total} {threshold}"
                    );
                }
            }
        }
        assert!(rejected > tried / 10, "{rejected} of {tried}");
    }

    /// Algorithm 2 without shortcuts: each expert tried on every GPU with room, the partial
    /// mapping scored in full each time, the lowest (first on ties) kept.
    fn reference_initial(search: &Search, utilization: &[f64]) -> State {
        let mut order: Vec<usize> = (0..search.n_experts).collect();
        order.sort_by(|&a, &b| utilization[b].total_cmp(&utilization[a]).then(a.cmp(&b)));
        let capacity = search.n_experts / search.n_gpus;
        let mut state = search.empty();
        for e in order {
            let mut best = (f64::INFINITY, usize::MAX);
            for g in 0..search.n_gpus {
                if state.gpu_of.iter().filter(|&&h| h == g).count() >= capacity {
                    continue;
                }
                let mut tried = state.clone();
                search.place(&mut tried, e, g);
                let score = search.score_of(&tried);
                if score < best.0 {
                    best = (score, g);
                }
            }
            search.place(&mut state, e, best.1);
        }
        state.score = search.score_of(&state);
        state
    }

    #[test]
    fn initial_places_each_expert_where_a_full_rescore_places_it() {
        let shapes = [
            (16, 1, vec![0.88, 1.0, 1.0, 1.0]),
            (32, 4, vec![0.7, 0.9, 1.0, 1.0]),
            (64, 8, vec![0.88, 1.0, 0.95, 1.0]),
        ];
        each_search(&shapes, 0..4, |search, problem, seed| {
            initial_is_the_rescores(search, problem, seed, 4)
        });
    }

    /// `initial` from the mean utilizations and from `restarts - 1` noisy copies of them (the
    /// restarts' inputs) places every expert as `reference_initial` does.
    fn initial_is_the_rescores(
        search: &Search<'_>,
        problem: &LayerProblem<'_>,
        seed: u64,
        restarts: usize,
    ) {
        let mut rng = stream(seed, "noise");
        let u = problem.mean_utilization();
        for restart in 0..restarts {
            let noisy: Vec<f64> = u
                .iter()
                .map(|&x| match restart {
                    0 => x,
                    _ => x * (1.0 + 0.2 * (2.0 * rng.random::<f64>() - 1.0)),
                })
                .collect();
            let fast = search.initial(&noisy);
            let slow = reference_initial(search, &noisy);
            assert_eq!(fast.gpu_of, slow.gpu_of);
            assert_eq!(fast.score.to_bits(), slow.score.to_bits());
            assert_eq!(fast.cost, slow.cost);
            assert_eq!(fast.load, slow.load);
        }
    }

    #[test]
    fn initial_on_long_windows_places_each_expert_where_a_full_rescore_places_it() {
        // Windows of 64 to 256 steps, on four and eight GPUs.
        let cases = [
            (16, 2, vec![0.88, 1.0, 1.0, 1.0], 128),
            (32, 4, vec![0.7, 0.9, 1.0, 1.0], 64),
            (32, 2, vec![0.8, 1.0, 0.9, 1.0, 1.0, 0.95, 1.0, 1.0], 256),
        ];
        each_window_search(&cases, 0..3, &[40_000], |search, problem, seed| {
            initial_is_the_rescores(search, problem, seed, 3)
        });
    }

    #[test]
    fn refine_on_eight_gpus_commits_the_swaps_an_exhaustive_scan_commits() {
        // Eight GPUs: each row's partners (`refine`'s lists by GPU) leave out the experts of
        // several GPUs at once.
        let speeds = vec![0.8, 1.0, 0.9, 1.0, 1.0, 0.95, 1.0, 1.0];
        let cases = [(32, 2, speeds.clone(), 16), (32, 4, speeds, 64)];
        each_window_search(&cases, 0..3, &[40_000, 64], |search, problem, _| {
            refine_is_the_exhaustive_scan(search, problem, &[0.001, 0.0]);
        });
    }

    #[test]
    fn the_scan_reads_only_walks_built_in_its_round() {
        // A scratch whose every walk would reject any swap (an infinite untouched cost) where
        // the scan read one it had not built: `refine` still commits the exhaustive scan's
        // swaps, on four GPUs and on eight (where a round leaves many pairs' walks unbuilt).
        let eight = vec![0.8, 1.0, 0.9, 1.0, 1.0, 0.95, 1.0, 1.0];
        let cases = [(32, 2, vec![0.7, 0.9, 1.0, 1.0], 16), (32, 4, eight, 64)];
        each_window_search(&cases, 0..3, &[40_000], |search, problem, _| {
            let poison = WalkStep {
                other: f64::INFINITY,
                ..WalkStep::default()
            };
            let mut scratch = Scratch {
                walks: vec![poison; search.n_gpus.pow(2) * search.n_steps],
                ..Scratch::default()
            };
            let initial = search.initial(&problem.mean_utilization());
            let (mut fast, mut slow) = (initial.clone(), initial);
            let swaps = search.refine_with(&mut scratch, &mut fast, 0.0);
            assert!(swaps > 0);
            assert_eq!(swaps, exhaustive_refine(search, &mut slow, 0.0));
            assert_eq!(fast.gpu_of, slow.gpu_of);
            assert_eq!(fast.score.to_bits(), slow.score.to_bits());
        });
    }

    #[test]
    fn a_kept_scratch_refines_as_a_fresh_one() {
        // One scratch through searches of other window lengths, GPU counts and paths (whole
        // and fractional), as a thread's restarts would leave it: the same mapping and score
        // bits as each restart with fresh buffers.
        let mut scratch = Scratch::default();
        let eight = vec![0.8, 1.0, 0.9, 1.0, 1.0, 0.95, 1.0, 1.0];
        let cases = [
            (32, 4, vec![0.7, 0.9, 1.0, 1.0], 64),
            (16, 2, eight.clone(), 16),
            (32, 2, vec![0.88, 1.0, 1.0, 1.0], 128),
            (32, 4, eight, 32),
            (32, 4, vec![0.7, 0.9, 1.0, 1.0], 16),
        ];
        each_window_search(&cases, 0..2, &[40_000, 64], |search, problem, _| {
            let u = problem.mean_utilization();
            let fresh = search.restart(&u, 0.0);
            let kept = search.restart_with(&mut scratch, &u, 0.0);
            assert_eq!(fresh.gpu_of, kept.gpu_of);
            assert_eq!(fresh.score.to_bits(), kept.score.to_bits());
        });
    }

    #[test]
    fn a_searchs_kept_splits_are_the_bisections() {
        let shapes = [(16, 2, vec![0.7, 0.88, 1.0, 1.0])];
        each_search(&shapes, 0..1, |search, _, _| {
            if search.whole.is_none() {
                return;
            }
            let costs = search.costs;
            for ga in 0..4 {
                for gb in ga + 1..4 {
                    for joint in (0..search.joints).step_by(7) {
                        let least = least_split(
                            costs.least_whole_from(ga),
                            costs.least_whole_from(gb),
                            joint,
                        );
                        for _ in 0..2 {
                            assert_eq!(search.split(ga, gb, joint).to_bits(), least.to_bits());
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn least_split_is_the_least_over_every_split() {
        let mut rng = stream(3, "splits");
        for _ in 0..500 {
            let len = rng.random_range(1..40);
            // Two tables that never fall, with runs of equal entries.
            let mut rising = || {
                let mut x = 0.0;
                (0..len)
                    .map(|_| {
                        if rng.random::<f64>() < 0.6 {
                            x += f64::from(rng.random_range(0..5u32));
                        }
                        x
                    })
                    .collect::<Vec<f64>>()
            };
            let (a, b) = (rising(), rising());
            for joint in 0..len {
                let brute = (0..=joint)
                    .map(|x| a[x].max(b[joint - x]))
                    .fold(f64::INFINITY, f64::min);
                assert_eq!(least_split(&a, &b, joint), brute, "{a:?} {b:?} {joint}");
            }
        }
    }

    #[test]
    fn never_worse_than_initial_or_linear_and_equal_experts_per_gpu() {
        for (n_experts, top_k, speeds) in [
            (8, 2, vec![0.88, 1.0, 1.0, 1.0]),
            (16, 1, vec![0.88, 0.92, 0.95, 1.0]),
            (64, 8, vec![1.0, 1.0, 1.0, 1.0]),
            (128, 8, vec![0.88, 1.0, 1.0, 1.0]),
        ] {
            for seed in 0..3 {
                let costs = GpuCosts::scaled(&staircase(), &speeds, 40_000);
                let window = trace(n_experts, top_k, seed);
                let problem = layer_zero(n_experts, &window, &costs);
                let search = Search::new(&problem);
                let u = problem.mean_utilization();
                let initial = search.initial(&u);
                let mut refined = initial.clone();
                search.refine(&mut refined, 0.001);
                assert!(refined.score <= initial.score);
                let gem = Gem {
                    restarts: 5,
                    ..Gem::default()
                };
                let mut mapper = gem;
                let mapping = mapper.map_layer(&problem, &mut stream(seed, "gem"));
                mapping.check(n_experts, 4).unwrap();
                assert!(mapping.slots.iter().all(|s| s.len() == n_experts / 4));
                let s = score(&mapping, &problem);
                let linear = score(
                    &LayerMapping::from_assignment(&linear_assignment(n_experts, 4), 4),
                    &problem,
                );
                assert!(s <= initial.score + 1e-6, "{s} > initial {}", initial.score);
                assert!(s <= linear + 1e-6, "{s} > linear {linear}");
            }
        }
    }

    #[test]
    fn gem_moves_load_off_the_slow_gpu_and_beats_linear() {
        let costs = GpuCosts::scaled(&staircase(), &[0.7, 1.0, 1.0, 1.0], 40_000);
        let window = trace(16, 1, 4);
        let problem = layer_zero(16, &window, &costs);
        let mapping = Gem::default().map_layer(&problem, &mut stream(1, "gem"));
        let loads: Vec<f64> = (0..16).fold(vec![0.0; 4], |mut acc, t| {
            for (a, x) in acc.iter_mut().zip(mapping.gpu_tokens(problem.step(t))) {
                *a += x;
            }
            acc
        });
        let fast_mean = (loads[1] + loads[2] + loads[3]) / 3.0;
        assert!(
            loads[0] < fast_mean,
            "slow GPU 0 carries {} vs {fast_mean}",
            loads[0]
        );
        let linear = score(
            &LayerMapping::from_assignment(&linear_assignment(16, 4), 4),
            &problem,
        );
        assert!(score(&mapping, &problem) < linear * 0.98);
    }

    #[test]
    fn result_is_deterministic_for_a_stream() {
        let costs = GpuCosts::scaled(&staircase(), &[0.88, 1.0, 1.0, 1.0], 40_000);
        let window = trace(64, 8, 2);
        let problem = layer_zero(64, &window, &costs);
        let a = gem_place(&Gem::default(), &problem, &mut stream(9, "gem"));
        let b = gem_place(&Gem::default(), &problem, &mut stream(9, "gem"));
        assert_eq!(a, b);
    }
}
