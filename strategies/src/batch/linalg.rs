//! Numeric kernels shared by the batch selectors: dot products, sums and peaks over f32
//! expert-load vectors, as chunked loops over eight-lane f32 chunks (trait [`Chunk`]) with one
//! fixed accumulation order.
//!
//! Semantics, bit for bit: a vector is read in chunks of `LANES` = 8 entries; entry `j` of a
//! chunk goes to lane `j mod 8`. Within blocks of `BLOCK` = 128 entries each lane accumulates
//! in f32 (`acc + a * b`, the product rounded before the sum: Rust never fuses them; dot
//! products keep two accumulators per lane, for the even and the odd chunks of the block,
//! added together at its end), then is added to that lane's f64 total; the 8 totals are
//! summed pairwise, `((t0+t1)+(t2+t3))+((t4+t5)+(t6+t7))`, and the `d mod 8` trailing entries
//! are added last, in order, in f64. This is the order the earlier hand-written AVX, SSE2
//! and portable backends shared, so results are the bits they gave. So:
//!
//! - equal inputs give bit-identical results whatever CPU runs them and whatever other
//!   vectors are evaluated alongside (the kernels share reads of the batch vector between
//!   the candidates of a group, never accumulators), and exact ties stay exact ties, which
//!   the selectors then break by index;
//! - for token-count loads every f32 partial sum holds at most 16 products, so it is exact
//!   while those stay below 2^24, and the f64 totals are exact far beyond realistic batches.
//!
//! A chunk has two implementations: `wide`'s portable `f32x8` (two SSE2 registers on
//! baseline x86-64, packed instructions elsewhere), and on x86-64 `avx::Avx8`, one 256-bit
//! AVX register whose f64 totals are two more, used only where the CPU has AVX (each entry
//! point checks at run time and then runs its kernel inside a function compiled with AVX).
//! The lanes are the lanes of the order above, each operation one IEEE operation per lane
//! (no FMA), so neither changes a bit: both run the same additions in the same order. The
//! tests hold the kernels, on both chunks, to a scalar reference written entry by entry in
//! the documented order.

/// Entries per chunk: the lane width of the accumulators.
const LANES: usize = 8;
/// Entries accumulated in f32 before the lanes are flushed into their f64 totals.
const BLOCK: usize = 128;
/// Candidates evaluated in one pass over the batch vector (they share its reads): what fits
/// the 16 vector registers when a chunk takes two (the portable chunk on baseline x86-64);
/// measured faster than 4 with the criterion selector benches.
const GROUP: usize = 2;
/// The same for the fused dot + stats kernel, which keeps four accumulators per candidate:
/// two, now that the AVX chunk takes one register (one pass cost 176 ns a candidate alone,
/// 153 ns two at a time, on the 2-core machine's EPYC with 32 vectors of 1440 entries in L2;
/// docs/performance.md, "CAPS, i35caps").
const FUSED_GROUP: usize = 2;

use multiversion::multiversion;
use wide::f32x8;

/// Eight f32 lanes and their eight f64 totals: the operations the kernels run on, each one
/// IEEE operation per lane (see the module's comment).
trait Chunk: Copy {
    /// The eight f64 lane totals.
    type Total: Copy;
    fn zero() -> Self;
    fn splat(x: f32) -> Self;
    fn load(v: &[f32; LANES]) -> Self;
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// Lane-wise `if self > other { self } else { other }` (x86's `maxps`).
    fn max(self, other: Self) -> Self;
    fn to_array(self) -> [f32; LANES];
    fn total_zero() -> Self::Total;
    /// `total += f64(self)`, lane-wise (the widening is exact).
    fn widen_add(self, total: &mut Self::Total);
    fn total_array(total: Self::Total) -> [f64; LANES];
}

impl Chunk for f32x8 {
    type Total = [f64; LANES];
    #[inline(always)]
    fn zero() -> f32x8 {
        f32x8::ZERO
    }
    #[inline(always)]
    fn splat(x: f32) -> f32x8 {
        f32x8::splat(x)
    }
    #[inline(always)]
    fn load(v: &[f32; LANES]) -> f32x8 {
        f32x8::from(*v)
    }
    #[inline(always)]
    fn add(self, other: f32x8) -> f32x8 {
        self + other
    }
    #[inline(always)]
    fn mul(self, other: f32x8) -> f32x8 {
        self * other
    }
    #[inline(always)]
    fn max(self, other: f32x8) -> f32x8 {
        // `fast_max` is x86's `maxps` (the portable fallback is the same up to NaN and signed
        // zeros, which sums of loads never produce).
        self.fast_max(other)
    }
    #[inline(always)]
    fn to_array(self) -> [f32; LANES] {
        f32x8::to_array(self)
    }
    #[inline(always)]
    fn total_zero() -> [f64; LANES] {
        [0.0; LANES]
    }
    #[inline(always)]
    fn widen_add(self, total: &mut [f64; LANES]) {
        let acc = f32x8::to_array(self);
        for k in 0..LANES {
            total[k] += f64::from(acc[k]);
        }
    }
    #[inline(always)]
    fn total_array(total: [f64; LANES]) -> [f64; LANES] {
        total
    }
}

/// Eight f32 lanes in one AVX register, their f64 totals in two. Only to be used where the
/// CPU has AVX: the entry points check `is_x86_feature_detected!("avx")` first and run it
/// inside a function compiled with AVX enabled.
#[cfg(target_arch = "x86_64")]
mod avx {
    use super::{Chunk, LANES};
    use std::arch::x86_64::*;

    #[derive(Clone, Copy)]
    pub(super) struct Avx8(__m256);

    // SAFETY (every `unsafe` below): an `Avx8` exists only inside the AVX-compiled entry
    // points, entered after the run-time check that the CPU has AVX; loads and stores are
    // unaligned ones through references to eight f32s / f64s.
    impl Chunk for Avx8 {
        type Total = [__m256d; 2];
        #[inline(always)]
        fn zero() -> Avx8 {
            unsafe { Avx8(_mm256_setzero_ps()) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Avx8 {
            unsafe { Avx8(_mm256_set1_ps(x)) }
        }
        #[inline(always)]
        fn load(v: &[f32; LANES]) -> Avx8 {
            unsafe { Avx8(_mm256_loadu_ps(v.as_ptr())) }
        }
        #[inline(always)]
        fn add(self, other: Avx8) -> Avx8 {
            unsafe { Avx8(_mm256_add_ps(self.0, other.0)) }
        }
        #[inline(always)]
        fn mul(self, other: Avx8) -> Avx8 {
            unsafe { Avx8(_mm256_mul_ps(self.0, other.0)) }
        }
        #[inline(always)]
        fn max(self, other: Avx8) -> Avx8 {
            unsafe { Avx8(_mm256_max_ps(self.0, other.0)) }
        }
        #[inline(always)]
        fn to_array(self) -> [f32; LANES] {
            let mut out = [0.0; LANES];
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) };
            out
        }
        #[inline(always)]
        fn total_zero() -> [__m256d; 2] {
            unsafe { [_mm256_setzero_pd(); 2] }
        }
        #[inline(always)]
        fn widen_add(self, total: &mut [__m256d; 2]) {
            unsafe {
                let low = _mm256_cvtps_pd(_mm256_castps256_ps128(self.0));
                let high = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(self.0));
                total[0] = _mm256_add_pd(total[0], low);
                total[1] = _mm256_add_pd(total[1], high);
            }
        }
        #[inline(always)]
        fn total_array(total: [__m256d; 2]) -> [f64; LANES] {
            let mut out = [0.0; LANES];
            unsafe {
                _mm256_storeu_pd(out.as_mut_ptr(), total[0]);
                _mm256_storeu_pd(out.as_mut_ptr().add(4), total[1]);
            }
            out
        }
    }
}

/// The chunk of `v` starting at `j` (which holds `LANES` entries), as an array.
#[inline(always)]
fn chunk_array(v: &[f32], j: usize) -> &[f32; LANES] {
    v[j..j + LANES]
        .try_into()
        .expect("a chunk holds LANES entries")
}

/// The chunk of `v` starting at `j`, as lanes.
#[inline(always)]
fn chunk<C: Chunk>(v: &[f32], j: usize) -> C {
    C::load(chunk_array(v, j))
}

/// `acc += a * b`, lane-wise, the product rounded to f32 before the addition (a separate
/// multiply and add, never a fused one).
#[inline(always)]
fn mul_add<C: Chunk>(acc: &mut C, a: C, b: C) {
    *acc = acc.add(a.mul(b));
}

/// `acc += a`, lane-wise.
#[inline(always)]
fn add_to<C: Chunk>(acc: &mut C, a: C) {
    *acc = acc.add(a);
}

/// The pairwise sum of the eight lane totals.
#[inline(always)]
fn lane_sum<C: Chunk>(t: C::Total) -> f64 {
    let t = C::total_array(t);
    ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
}

/// `l · v` for each of the `N` vectors `vs` (each at least as long as `l`).
#[inline(always)]
fn dots_with<C: Chunk, const N: usize>(l: &[f32], vs: [&[f32]; N]) -> [f64; N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut total = [C::total_zero(); N];
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        // Even and odd chunks of the block in separate accumulators: twice the independent
        // dependency chains.
        let mut even = [C::zero(); N];
        let mut odd = [C::zero(); N];
        while j + 2 * LANES <= end {
            let (l0, l1) = (chunk::<C>(l, j), chunk::<C>(l, j + LANES));
            for n in 0..N {
                mul_add(&mut even[n], l0, chunk(vs[n], j));
                mul_add(&mut odd[n], l1, chunk(vs[n], j + LANES));
            }
            j += 2 * LANES;
        }
        if j < end {
            let l0 = chunk::<C>(l, j);
            for n in 0..N {
                mul_add(&mut even[n], l0, chunk(vs[n], j));
            }
            j += LANES;
        }
        for n in 0..N {
            even[n].add(odd[n]).widen_add(&mut total[n]);
        }
    }
    // Plain loops, not `array::from_fn`, for the finish: its closure is not inlined into
    // the AVX entry, and would take the lanes across a call compiled without AVX.
    let mut out = [0.0; N];
    for n in 0..N {
        let mut s = lane_sum::<C>(total[n]);
        for (x, y) in l[full..].iter().zip(&vs[n][full..]) {
            s += f64::from(x * y);
        }
        out[n] = s;
    }
    out
}

/// `max_j (l_j + v_j)` for each of the `N` vectors `vs` (each at least as long as `l`).
#[inline(always)]
fn peaks_with<C: Chunk, const N: usize>(l: &[f32], vs: [&[f32]; N]) -> [f32; N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut hi = [C::splat(f32::NEG_INFINITY); N];
    let mut j = 0;
    while j < full {
        let lc = chunk::<C>(l, j);
        for n in 0..N {
            hi[n] = lc.add(chunk(vs[n], j)).max(hi[n]);
        }
        j += LANES;
    }
    let mut out = [0.0; N];
    for n in 0..N {
        let mut m = f32::NEG_INFINITY;
        let tail = l[full..].iter().zip(&vs[n][full..]).map(|(x, y)| x + y);
        for x in hi[n].to_array().into_iter().chain(tail) {
            if x > m {
                m = x;
            }
        }
        out[n] = m;
    }
    out
}

/// `(sum(v), |v|²)` for each of the `N` vectors `vs`, over their first `d` entries.
#[inline(always)]
fn stats_with<C: Chunk, const N: usize>(d: usize, vs: [&[f32]; N]) -> [(f64, f64); N] {
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut sums = [C::total_zero(); N];
    let mut squares = [C::total_zero(); N];
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        let mut s = [C::zero(); N];
        let mut q = [C::zero(); N];
        while j < end {
            for n in 0..N {
                let x = chunk::<C>(vs[n], j);
                add_to(&mut s[n], x);
                mul_add(&mut q[n], x, x);
            }
            j += LANES;
        }
        for n in 0..N {
            s[n].widen_add(&mut sums[n]);
            q[n].widen_add(&mut squares[n]);
        }
    }
    let mut out = [(0.0, 0.0); N];
    for n in 0..N {
        let mut s = lane_sum::<C>(sums[n]);
        let mut q = lane_sum::<C>(squares[n]);
        for x in &vs[n][full..] {
            s += f64::from(*x);
            q += f64::from(x * x);
        }
        out[n] = (s, q);
    }
    out
}

/// `(l · v, sum(v), |v|²)` for each of the `N` vectors `vs` in one pass; each part is
/// bit-identical to what [`dots_with`] and [`stats_with`] give.
#[inline(always)]
fn dot_stats_with<C: Chunk, const N: usize>(l: &[f32], vs: [&[f32]; N]) -> [(f64, f64, f64); N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut dots = [C::total_zero(); N];
    let mut sums = [C::total_zero(); N];
    let mut squares = [C::total_zero(); N];
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        let mut even = [C::zero(); N];
        let mut odd = [C::zero(); N];
        let mut s = [C::zero(); N];
        let mut q = [C::zero(); N];
        while j + 2 * LANES <= end {
            let (l0, l1) = (chunk::<C>(l, j), chunk::<C>(l, j + LANES));
            for n in 0..N {
                let (x0, x1) = (chunk::<C>(vs[n], j), chunk::<C>(vs[n], j + LANES));
                mul_add(&mut even[n], l0, x0);
                mul_add(&mut odd[n], l1, x1);
                add_to(&mut s[n], x0);
                add_to(&mut s[n], x1);
                mul_add(&mut q[n], x0, x0);
                mul_add(&mut q[n], x1, x1);
            }
            j += 2 * LANES;
        }
        if j < end {
            let l0 = chunk::<C>(l, j);
            for n in 0..N {
                let x0 = chunk::<C>(vs[n], j);
                mul_add(&mut even[n], l0, x0);
                add_to(&mut s[n], x0);
                mul_add(&mut q[n], x0, x0);
            }
            j += LANES;
        }
        for n in 0..N {
            even[n].add(odd[n]).widen_add(&mut dots[n]);
            s[n].widen_add(&mut sums[n]);
            q[n].widen_add(&mut squares[n]);
        }
    }
    let mut out = [(0.0, 0.0, 0.0); N];
    for n in 0..N {
        let mut dot = lane_sum::<C>(dots[n]);
        let mut s = lane_sum::<C>(sums[n]);
        let mut q = lane_sum::<C>(squares[n]);
        for (x, y) in l[full..].iter().zip(&vs[n][full..]) {
            dot += f64::from(x * y);
        }
        for x in &vs[n][full..] {
            s += f64::from(*x);
            q += f64::from(x * x);
        }
        out[n] = (dot, s, q);
    }
    out
}

/// The sum formed entrywise in f32 in the order of `vs`, then squared and accumulated like
/// [`stats_with`]'s `|v|²`.
#[inline(always)]
fn square_of_sum_with<C: Chunk>(vs: &[&[f32]]) -> f64 {
    let d = vs[0].len();
    let full = d / LANES * LANES;
    let mut squares = C::total_zero();
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        let mut q = C::zero();
        while j < end {
            let mut x = chunk::<C>(vs[0], j);
            for v in &vs[1..] {
                add_to(&mut x, chunk(&v[..d], j));
            }
            mul_add(&mut q, x, x);
            j += LANES;
        }
        q.widen_add(&mut squares);
    }
    let mut total = lane_sum::<C>(squares);
    for j in full..d {
        let mut x = vs[0][j];
        for v in &vs[1..] {
            x += v[j];
        }
        total += f64::from(x * x);
    }
    total
}

/// An entry point that runs `$body` with the chunk type `$c`: `avx::Avx8` inside a function
/// compiled with AVX where the CPU has it (checked at run time; the check is one load of
/// std's cached feature bits), else the portable `f32x8`.
macro_rules! entry {
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = <$c:ident> $body:expr) => {
        pub(super) fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx") {
                #[target_feature(enable = "avx")]
                fn on_avx($($arg: $ty),*) -> $ret {
                    type $c = super::avx::Avx8;
                    $body
                }
                // SAFETY: the CPU has AVX.
                return unsafe { on_avx($($arg),*) };
            }
            type $c = f32x8;
            $body
        }
    };
}

/// The kernels at the group sizes the entry points use, each dispatched to the AVX chunk
/// where the CPU has AVX. Generic `#[inline(always)]` kernels inline into each entry and
/// take its target features.
mod dispatch {
    use super::*;

    entry!(dots(l: &[f32], vs: [&[f32]; GROUP]) -> [f64; GROUP] = <C> dots_with::<C, GROUP>(l, vs));
    entry!(dot(l: &[f32], v: &[f32]) -> f64 = <C> dots_with::<C, 1>(l, [v])[0]);
    entry!(peaks(l: &[f32], vs: [&[f32]; GROUP]) -> [f32; GROUP] = <C> peaks_with::<C, GROUP>(l, vs));
    entry!(peak(l: &[f32], v: &[f32]) -> f32 = <C> peaks_with::<C, 1>(l, [v])[0]);
    entry!(stats(d: usize, vs: [&[f32]; GROUP]) -> [(f64, f64); GROUP] = <C> stats_with::<C, GROUP>(d, vs));
    entry!(stat(d: usize, v: &[f32]) -> (f64, f64) = <C> stats_with::<C, 1>(d, [v])[0]);
    entry!(dot_stats(l: &[f32], vs: [&[f32]; FUSED_GROUP]) -> [(f64, f64, f64); FUSED_GROUP]
        = <C> dot_stats_with::<C, FUSED_GROUP>(l, vs));
    entry!(dot_stat(l: &[f32], v: &[f32]) -> (f64, f64, f64) = <C> dot_stats_with::<C, 1>(l, [v])[0]);
    entry!(square_of_sum(vs: &[&[f32]]) -> f64 = <C> square_of_sum_with::<C>(vs));

    #[multiversion(targets("x86_64+avx"))]
    pub(super) fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
        let d = out.len();
        for ((o, x), y) in out.iter_mut().zip(&a[..d]).zip(&b[..d]) {
            *o = x + y;
        }
    }
    #[multiversion(targets("x86_64+avx"))]
    pub(super) fn add_assign(out: &mut [f32], a: &[f32]) {
        let d = out.len();
        for (o, x) in out.iter_mut().zip(&a[..d]) {
            *o += x;
        }
    }
}

/// Runs a kernel for the `count` vectors `get(0..count)`, `G` at a time (`group`), the rest
/// one at a time (`one`), handing each result to `put(position, value)`.
#[inline(always)]
fn grouped<'a, T, const G: usize>(
    count: usize,
    get: impl Fn(usize) -> &'a [f32],
    mut put: impl FnMut(usize, T),
    group: impl Fn([&'a [f32]; G]) -> [T; G],
    one: impl Fn(&'a [f32]) -> T,
) {
    let mut n = 0;
    while n + G <= count {
        for (k, value) in group(std::array::from_fn(|k| get(n + k)))
            .into_iter()
            .enumerate()
        {
            put(n + k, value);
        }
        n += G;
    }
    for n in n..count {
        put(n, one(get(n)));
    }
}

/// `put(n, l · get(n))` for `n` in `0..count`.
pub(crate) fn dots_each<'a>(
    l: &[f32],
    count: usize,
    get: impl Fn(usize) -> &'a [f32],
    put: impl FnMut(usize, f64),
) {
    grouped(
        count,
        get,
        put,
        |vs| dispatch::dots(l, vs),
        |v| dispatch::dot(l, v),
    );
}

/// `put(n, max(l + get(n)))` for `n` in `0..count`.
pub(crate) fn peaks_each<'a>(
    l: &[f32],
    count: usize,
    get: impl Fn(usize) -> &'a [f32],
    put: impl FnMut(usize, f32),
) {
    grouped(
        count,
        get,
        put,
        |vs| dispatch::peaks(l, vs),
        |v| dispatch::peak(l, v),
    );
}

/// `put(n, (l · get(n), sum(get(n)), |get(n)|²))` for `n` in `0..count`.
pub(crate) fn dot_stats_each<'a>(
    l: &[f32],
    count: usize,
    get: impl Fn(usize) -> &'a [f32],
    put: impl FnMut(usize, (f64, f64, f64)),
) {
    grouped(
        count,
        get,
        put,
        |vs| dispatch::dot_stats(l, vs),
        |v| dispatch::dot_stat(l, v),
    );
}

/// `put(n, (sum(get(n)), |get(n)|²))` for `n` in `0..count` (all of the same length).
pub(crate) fn stats_each<'a>(
    count: usize,
    get: impl Fn(usize) -> &'a [f32],
    put: impl FnMut(usize, (f64, f64)),
) {
    if count > 0 {
        let d = get(0).len();
        grouped(
            count,
            get,
            put,
            |vs| dispatch::stats(d, vs),
            |v| dispatch::stat(d, v),
        );
    }
}

/// `|vs[0] + ... + vs[n - 1]|²` (all of the same length, at least one) without forming the
/// sum in memory.
pub(crate) fn square_of_sum(vs: &[&[f32]]) -> f64 {
    dispatch::square_of_sum(vs)
}

/// `out = a + b`, entrywise (`a` and `b` at least as long as `out`; plain f32 additions).
pub(crate) fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
    dispatch::add(out, a, b);
}

/// `out += a`, entrywise.
pub(crate) fn add_assign(out: &mut [f32], a: &[f32]) {
    dispatch::add_assign(out, a);
}

/// `(sum(v), |v|²)` in one pass.
pub(crate) fn sum_and_square(v: &[f32]) -> (f64, f64) {
    dispatch::stat(v.len(), v)
}

/// `sum(v)`.
pub(crate) fn sum(v: &[f32]) -> f64 {
    sum_and_square(v).0
}

/// `l · v`.
pub(crate) fn dot(l: &[f32], v: &[f32]) -> f64 {
    dispatch::dot(l, v)
}

/// `out[i] = l · load(i)` for every candidate `i` in `indices`.
pub(crate) fn dots_into(
    window: &expertsim_serving::policies::batch::CandidateWindow<'_>,
    l: &[f32],
    indices: &[usize],
    out: &mut [f64],
) {
    dots_each(
        l,
        indices.len(),
        |n| window.load(indices[n]),
        |n, x| out[indices[n]] = x,
    );
}

/// `dots[i] = l · load(i)`, `totals[i] = sum(load(i))` and `squares[i] = |load(i)|²` for
/// every candidate `i` in `indices`, in one pass over each load.
pub(crate) fn dot_stats_into(
    window: &expertsim_serving::policies::batch::CandidateWindow<'_>,
    l: &[f32],
    indices: &[usize],
    dots: &mut [f64],
    totals: &mut [f64],
    squares: &mut [f64],
) {
    dot_stats_each(
        l,
        indices.len(),
        |n| window.load(indices[n]),
        |n, (dot, s, q)| {
            dots[indices[n]] = dot;
            totals[indices[n]] = s;
            squares[indices[n]] = q;
        },
    );
}

/// `totals[i] = sum(load(i))` and `squares[i] = |load(i)|²` for every candidate `i` in
/// `indices`.
pub(crate) fn stats_into(
    window: &expertsim_serving::policies::batch::CandidateWindow<'_>,
    indices: &[usize],
    totals: &mut [f64],
    squares: &mut [f64],
) {
    stats_each(
        indices.len(),
        |n| window.load(indices[n]),
        |n, (s, q)| {
            totals[indices[n]] = s;
            squares[indices[n]] = q;
        },
    );
}

/// `totals[i] = sum(load(i))` for every candidate `i` in `indices`.
pub(crate) fn totals_into(
    window: &expertsim_serving::policies::batch::CandidateWindow<'_>,
    indices: &[usize],
    totals: &mut [f64],
) {
    stats_each(
        indices.len(),
        |n| window.load(indices[n]),
        |n, (s, _)| totals[indices[n]] = s,
    );
}

/// `out[i] = max(l + load(i))` for every candidate `i` in `indices`.
pub(crate) fn peaks_into(
    window: &expertsim_serving::policies::batch::CandidateWindow<'_>,
    l: &[f32],
    indices: &[usize],
    out: &mut [f32],
) {
    peaks_each(
        l,
        indices.len(),
        |n| window.load(indices[n]),
        |n, x| out[indices[n]] = x,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(seed: u32, d: usize) -> Vec<f32> {
        // A small LCG: values with fractional parts so rounding actually happens.
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..d)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1 << 16) as f32
            })
            .collect()
    }

    /// Lengths around every boundary: below one chunk, chunk multiples and not, one block
    /// and an odd chunk count within it, several blocks with a ragged last one.
    const LENGTHS: [usize; 16] = [
        0, 1, 5, 7, 8, 9, 15, 16, 17, 63, 100, 127, 128, 129, 200, 1440,
    ];

    /// The documented accumulation order written entry by entry: entry `j < full` goes to
    /// lane `j mod 8` of its block's accumulator (the even or odd chunk one when `split`), a
    /// block's lanes are widened into f64 lane totals, the totals summed pairwise, and the
    /// trailing entries added in order in f64.
    fn reference(d: usize, term: impl Fn(usize) -> f32, split: bool) -> f64 {
        let full = d / LANES * LANES;
        let mut total = [0.0f64; LANES];
        for start in (0..full).step_by(BLOCK) {
            let mut acc = [[0.0f32; LANES]; 2];
            for j in start..(start + BLOCK).min(full) {
                let parity = if split { (j - start) / LANES % 2 } else { 0 };
                acc[parity][j % LANES] += term(j);
            }
            for k in 0..LANES {
                let block = if split {
                    acc[0][k] + acc[1][k]
                } else {
                    acc[0][k]
                };
                total[k] += f64::from(block);
            }
        }
        let mut s = ((total[0] + total[1]) + (total[2] + total[3]))
            + ((total[4] + total[5]) + (total[6] + total[7]));
        for j in full..d {
            s += f64::from(term(j));
        }
        s
    }

    fn reference_peak(l: &[f32], v: &[f32]) -> f32 {
        let full = l.len() / LANES * LANES;
        let mut hi = [f32::NEG_INFINITY; LANES];
        for j in 0..full {
            let x = l[j] + v[j];
            if x > hi[j % LANES] {
                hi[j % LANES] = x;
            }
        }
        let mut m = f32::NEG_INFINITY;
        for x in hi.into_iter().chain((full..l.len()).map(|j| l[j] + v[j])) {
            if x > m {
                m = x;
            }
        }
        m
    }

    /// Every kernel, grouped or alone, gives the bits of the entry-by-entry reference.
    #[test]
    fn kernels_match_the_scalar_reference_bit_for_bit() {
        for d in LENGTHS {
            let l = vector(9, d);
            let vs: Vec<Vec<f32>> = (10..17).map(|s| vector(s, d)).collect();
            let get = |n: usize| vs[n].as_slice();
            let dots: Vec<u64> = vs
                .iter()
                .map(|v| reference(d, |j| l[j] * v[j], true).to_bits())
                .collect();
            let stats: Vec<(u64, u64)> = vs
                .iter()
                .map(|v| {
                    let s = reference(d, |j| v[j], false);
                    let q = reference(d, |j| v[j] * v[j], false);
                    (s.to_bits(), q.to_bits())
                })
                .collect();
            let peaks: Vec<u32> = vs.iter().map(|v| reference_peak(&l, v).to_bits()).collect();
            for count in 0..=vs.len() {
                let mut got = vec![0u64; count];
                dots_each(&l, count, get, |n, x| got[n] = x.to_bits());
                assert_eq!(got, dots[..count], "dots, d = {d}, count = {count}");
                let mut got = vec![0u32; count];
                peaks_each(&l, count, get, |n, x| got[n] = x.to_bits());
                assert_eq!(got, peaks[..count], "peaks, d = {d}, count = {count}");
                let mut got = vec![(0u64, 0u64); count];
                stats_each(count, get, |n, (s, q)| got[n] = (s.to_bits(), q.to_bits()));
                assert_eq!(got, stats[..count], "stats, d = {d}, count = {count}");
                let mut got = vec![(0u64, 0u64, 0u64); count];
                dot_stats_each(&l, count, get, |n, (a, s, q)| {
                    got[n] = (a.to_bits(), s.to_bits(), q.to_bits())
                });
                let want: Vec<_> = (0..count)
                    .map(|n| (dots[n], stats[n].0, stats[n].1))
                    .collect();
                assert_eq!(got, want, "dot_stats, d = {d}, count = {count}");
            }
            for (n, v) in vs.iter().enumerate() {
                assert_eq!(dot(&l, v).to_bits(), dots[n]);
                let (s, q) = sum_and_square(v);
                assert_eq!((s.to_bits(), q.to_bits()), stats[n]);
                assert_eq!(sum(v).to_bits(), stats[n].0);
            }
            if d > 0 {
                let three = [vs[0].as_slice(), &vs[1], &vs[2]];
                let want = reference(
                    d,
                    |j| {
                        let x = vs[0][j] + vs[1][j] + vs[2][j];
                        x * x
                    },
                    false,
                );
                assert_eq!(square_of_sum(&three).to_bits(), want.to_bits(), "d = {d}");
            }
        }
    }

    #[test]
    fn kernels_match_naive_sums_for_awkward_lengths() {
        for d in [1, 7, 8, 9, 63, 64, 65, 130, 1440] {
            let l = vector(1, d);
            let v = vector(2, d);
            let naive_dot: f64 = l.iter().zip(&v).map(|(a, b)| f64::from(a * b)).sum();
            assert!((dot(&l, &v) - naive_dot).abs() <= 1e-6 * naive_dot.abs().max(1.0));
            let (s, q) = sum_and_square(&v);
            let naive_sum: f64 = v.iter().map(|x| f64::from(*x)).sum();
            let naive_sq: f64 = v.iter().map(|x| f64::from(x * x)).sum();
            assert!((s - naive_sum).abs() <= 1e-6 * naive_sum.max(1.0));
            assert!((q - naive_sq).abs() <= 1e-6 * naive_sq.max(1.0));
            let hi = l
                .iter()
                .zip(&v)
                .map(|(a, b)| a + b)
                .fold(f32::MIN, f32::max);
            let mut peak = 0.0;
            peaks_each(&l, 1, |_| &v, |_, x| peak = x);
            assert_eq!(peak, hi);
        }
    }

    /// A candidate's result does not depend on which others share its pass, nor on the
    /// chunk its kernel ran on (`alone` runs the portable chunk at the baseline, the entry
    /// points the AVX chunk where the CPU has AVX).
    #[test]
    fn groupings_are_bit_identical() {
        for d in [5, 64, 100, 1440] {
            let l = vector(3, d);
            let vs: Vec<Vec<f32>> = (20..27).map(|s| vector(s, d)).collect();
            let alone: Vec<_> = vs
                .iter()
                .map(|v| {
                    let [(a, b, c)] = dot_stats_with::<f32x8, 1>(&l, [v]);
                    (a.to_bits(), b.to_bits(), c.to_bits())
                })
                .collect();
            for count in 1..=vs.len() {
                let mut fused = vec![(0, 0, 0); count];
                dot_stats_each(
                    &l,
                    count,
                    |n| &vs[n],
                    |n, (a, b, c)| fused[n] = (a.to_bits(), b.to_bits(), c.to_bits()),
                );
                let mut separate = vec![(0, 0, 0); count];
                dots_each(&l, count, |n| &vs[n], |n, a| separate[n].0 = a.to_bits());
                stats_each(
                    count,
                    |n| &vs[n],
                    |n, (b, c)| {
                        separate[n].1 = b.to_bits();
                        separate[n].2 = c.to_bits();
                    },
                );
                assert_eq!(fused, separate);
                assert_eq!(fused, alone[..count]);
            }
            // Three at once (a group size the entry points do not use) agrees too.
            let three = dots_with::<f32x8, 3>(&l, [&vs[0], &vs[1], &vs[2]]);
            for (n, x) in three.iter().enumerate() {
                assert_eq!(x.to_bits(), alone[n].0);
            }
        }
    }

    /// Every kernel's results on chunk `C`, as bits in one list.
    fn kernel_bits_on<C: Chunk>(l: &[f32], vs: &[Vec<f32>]) -> Vec<u64> {
        let d = l.len();
        let mut out = Vec::new();
        for pair in vs.chunks_exact(2) {
            let two = [pair[0].as_slice(), &pair[1]];
            out.extend(dots_with::<C, 2>(l, two).map(f64::to_bits));
            out.extend(peaks_with::<C, 2>(l, two).map(|x| u64::from(x.to_bits())));
            for (s, q) in stats_with::<C, 2>(d, two) {
                out.extend([s.to_bits(), q.to_bits()]);
            }
            for (a, s, q) in dot_stats_with::<C, 2>(l, two) {
                out.extend([a.to_bits(), s.to_bits(), q.to_bits()]);
            }
        }
        for v in vs {
            let [(a, s, q)] = dot_stats_with::<C, 1>(l, [v]);
            out.extend([a.to_bits(), s.to_bits(), q.to_bits()]);
        }
        if d > 0 {
            let three: Vec<&[f32]> = vs.iter().take(3).map(Vec::as_slice).collect();
            out.push(square_of_sum_with::<C>(&three).to_bits());
        }
        out
    }

    /// The AVX chunk gives the portable chunk's bits, and both the scalar reference's, on
    /// random vectors of random lengths (odd ones and ragged blocks included) with values of
    /// mixed sign and magnitude, so that the f32 sums round.
    #[test]
    fn the_avx_chunk_equals_the_portable_one_bit_for_bit() {
        let mut seed = 0x9e37_79b9u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            seed
        };
        for round in 0..300 {
            let d = if round < 140 {
                round
            } else {
                (next() % 3000) as usize | 1
            };
            let mut random = |_: usize| {
                let x = (next() >> 8) as f32 / (1 << 24) as f32;
                let scale = [1.0, 1e3, 1e-3, 37.0][(next() % 4) as usize];
                if next() % 3 == 0 {
                    -x * scale
                } else {
                    x * scale
                }
            };
            let l: Vec<f32> = (0..d).map(&mut random).collect();
            let vs: Vec<Vec<f32>> = (0..4).map(|_| (0..d).map(&mut random).collect()).collect();
            let portable = kernel_bits_on::<f32x8>(&l, &vs);
            for (n, v) in vs.iter().enumerate() {
                let dot = reference(d, |j| l[j] * v[j], true).to_bits();
                let [(a, _, q)] = dot_stats_with::<f32x8, 1>(&l, [v]);
                let square = reference(d, |j| v[j] * v[j], false).to_bits();
                assert_eq!(
                    (a.to_bits(), q.to_bits()),
                    (dot, square),
                    "d = {d}, n = {n}"
                );
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx") {
                #[target_feature(enable = "avx")]
                fn on_avx(l: &[f32], vs: &[Vec<f32>]) -> Vec<u64> {
                    kernel_bits_on::<avx::Avx8>(l, vs)
                }
                // SAFETY: the CPU has AVX.
                let avx = unsafe { on_avx(&l, &vs) };
                assert_eq!(avx, portable, "d = {d}");
            }
        }
    }

    #[test]
    fn vector_sums_match_scalar_ones() {
        for d in [1, 7, 8, 9, 130, 1440] {
            let vs: Vec<Vec<f32>> = (30..34).map(|s| vector(s, d)).collect();
            let mut out = vec![0.0f32; d];
            add(&mut out, &vs[0], &vs[1]);
            add_assign(&mut out, &vs[2]);
            let expected: Vec<f32> = (0..d).map(|j| vs[0][j] + vs[1][j] + vs[2][j]).collect();
            assert_eq!(out, expected);
            let square = square_of_sum(&[&vs[0], &vs[1], &vs[2]]);
            assert_eq!(square.to_bits(), sum_and_square(&expected).1.to_bits());
            assert_eq!(
                square_of_sum(&[&vs[3]]).to_bits(),
                sum_and_square(&vs[3]).1.to_bits()
            );
        }
    }

    #[test]
    fn integer_loads_give_exact_results() {
        // Token counts: a permutation of the same values gives exactly the same |v|².
        let d = 1440;
        let v: Vec<f32> = (0..d).map(|j| ((j * 37) % 101) as f32).collect();
        let mut w = v.clone();
        w.reverse();
        assert_eq!(sum_and_square(&v), sum_and_square(&w));
        let exact: u64 = v.iter().map(|x| (*x as u64) * (*x as u64)).sum();
        assert_eq!(sum_and_square(&v).1, exact as f64);
        // Large counts: per-lane f32 sums would round, the blocked f64 totals do not.
        let big: Vec<f32> = (0..d).map(|j| (3000 + (j * 13) % 997) as f32).collect();
        let exact: u64 = big
            .iter()
            .zip(&v)
            .map(|(a, b)| (*a as u64) * (*b as u64))
            .sum();
        assert_eq!(dot(&big, &v), exact as f64);
    }

    /// FNV-1a over the bits of every kernel's results on the `LENGTHS` x 7 vectors, computed
    /// through the kernel functions of module `$m`.
    macro_rules! fingerprint {
        ($($m:ident)::+) => {{
            let mut hash = 0xcbf2_9ce4_8422_2325u64;
            for d in LENGTHS {
                let l = vector(41, d);
                let vs: Vec<Vec<f32>> = (42..49).map(|s| vector(s, d)).collect();
                let get = |n: usize| vs[n].as_slice();
                let mut out: Vec<u64> = Vec::new();
                $($m)::+::dots_each(&l, 7, get, |_, x| out.push(x.to_bits()));
                $($m)::+::peaks_each(&l, 7, get, |_, x| out.push(u64::from(x.to_bits())));
                $($m)::+::stats_each(7, get, |_, (s, q)| out.extend([s.to_bits(), q.to_bits()]));
                $($m)::+::dot_stats_each(&l, 7, get, |_, (a, s, q)| {
                    out.extend([a.to_bits(), s.to_bits(), q.to_bits()])
                });
                if d > 0 {
                    out.push($($m)::+::square_of_sum(&[&vs[0], &vs[1], &vs[2]]).to_bits());
                }
                for bits in out {
                    for byte in bits.to_le_bytes() {
                        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
                    }
                }
            }
            hash
        }};
    }

    /// The bits the hand-written AVX / SSE2 / portable backends gave before this file became
    /// plain loops: `0xc98f00e2a3b1afb6`, computed by this same fingerprint over the former
    /// kernels compiled side by side with these (the AVX backend, on x86-64), and equal to it.
    /// The rewrite changed no result.
    #[test]
    fn results_are_the_bits_of_the_former_simd_backends() {
        assert_eq!(fingerprint!(super), 0xc98f_00e2_a3b1_afb6);
    }
}
