//! Numeric kernels shared by the batch selectors: dot products, sums and peaks over f32
//! expert-load vectors, explicitly vectorised (SSE2 on every x86-64, AVX where the CPU has
//! it, a portable fallback elsewhere) with one fixed accumulation order.
//!
//! Semantics, identical on every backend and bit for bit: a vector is read in chunks of
//! `LANES` = 8 entries; entry `j` of a chunk goes to lane `j mod 8`. Within blocks of `BLOCK`
//! = 128 entries each lane accumulates in f32 (`acc + a * b`, the product rounded before the
//! sum: never fused; dot products keep two accumulators per lane, for the even and the odd
//! chunks of the block, added together at its end), then is added to that lane's f64 total;
//! the 8 totals are summed pairwise, `((t0+t1)+(t2+t3))+((t4+t5)+(t6+t7))`, and the `d mod 8`
//! trailing entries are added last, in order, in f64. So:
//!
//! - equal inputs give bit-identical results whatever backend runs and whatever other
//!   vectors are evaluated alongside (the kernels share loads of the batch vector between
//!   the candidates of a group, never accumulators), and exact ties stay exact ties, which
//!   the selectors then break by index;
//! - for token-count loads every f32 partial sum holds at most 16 products, so it is exact
//!   while those stay below 2^24, and the f64 totals are exact far beyond realistic batches.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Entries per chunk (one AVX register, two SSE registers of f32).
const LANES: usize = 8;
/// Entries accumulated in f32 before the lanes are flushed into their f64 totals.
const BLOCK: usize = 128;

/// Eight f32 lanes on some backend. Every method is `unsafe` because the x86 backends may
/// only run where their CPU feature is present (SSE2 always is on x86-64; AVX is checked).
trait Lanes: Copy {
    /// Candidates evaluated in one pass (at most 4).
    const GROUP: usize;
    /// Eight f64 lane totals.
    type Wide: Copy;
    /// # Safety
    /// The backend's CPU feature must be available.
    unsafe fn zero() -> Self;
    /// # Safety
    /// As [`Lanes::zero`], and `chunk` holds `LANES` readable entries.
    unsafe fn load(chunk: &[f32]) -> Self;
    /// `self + a * b`, lane-wise, product rounded to f32 before the addition.
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn mul_add(self, a: Self, b: Self) -> Self;
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn add(self, a: Self) -> Self;
    /// `if a > self { a } else { self }`, lane-wise.
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn max(self, a: Self) -> Self;
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn to_array(self) -> [f32; LANES];
    /// # Safety
    /// As [`Lanes::zero`], and `out` holds `LANES` writable entries.
    unsafe fn store(self, out: &mut [f32]);
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn wide_zero() -> Self::Wide;
    /// `total + f64(self)`, lane-wise.
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn widen_add(self, total: Self::Wide) -> Self::Wide;
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn wide_to_array(total: Self::Wide) -> [f64; LANES];
}

#[derive(Clone, Copy)]
struct Portable([f32; LANES]);

impl Lanes for Portable {
    const GROUP: usize = 4;
    type Wide = [f64; LANES];
    #[inline(always)]
    unsafe fn zero() -> Self {
        Portable([0.0; LANES])
    }
    #[inline(always)]
    unsafe fn load(chunk: &[f32]) -> Self {
        Portable(chunk[..LANES].try_into().expect("a chunk of LANES"))
    }
    #[inline(always)]
    unsafe fn mul_add(self, a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|k| self.0[k] + a.0[k] * b.0[k]))
    }
    #[inline(always)]
    unsafe fn add(self, a: Self) -> Self {
        Portable(std::array::from_fn(|k| self.0[k] + a.0[k]))
    }
    #[inline(always)]
    unsafe fn max(self, a: Self) -> Self {
        Portable(std::array::from_fn(|k| {
            if a.0[k] > self.0[k] {
                a.0[k]
            } else {
                self.0[k]
            }
        }))
    }
    #[inline(always)]
    unsafe fn to_array(self) -> [f32; LANES] {
        self.0
    }
    #[inline(always)]
    unsafe fn store(self, out: &mut [f32]) {
        out[..LANES].copy_from_slice(&self.0);
    }
    #[inline(always)]
    unsafe fn wide_zero() -> Self::Wide {
        [0.0; LANES]
    }
    #[inline(always)]
    unsafe fn widen_add(self, total: Self::Wide) -> Self::Wide {
        std::array::from_fn(|k| total[k] + f64::from(self.0[k]))
    }
    #[inline(always)]
    unsafe fn wide_to_array(total: Self::Wide) -> [f64; LANES] {
        total
    }
}

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Sse(__m128, __m128);

#[cfg(target_arch = "x86_64")]
impl Lanes for Sse {
    const GROUP: usize = 2;
    /// Lanes (0, 1), (2, 3), (4, 5), (6, 7).
    type Wide = [__m128d; 4];
    #[inline(always)]
    unsafe fn zero() -> Self {
        unsafe { Sse(_mm_setzero_ps(), _mm_setzero_ps()) }
    }
    #[inline(always)]
    unsafe fn load(chunk: &[f32]) -> Self {
        debug_assert!(chunk.len() >= LANES);
        unsafe {
            let p = chunk.as_ptr();
            Sse(_mm_loadu_ps(p), _mm_loadu_ps(p.add(4)))
        }
    }
    #[inline(always)]
    unsafe fn mul_add(self, a: Self, b: Self) -> Self {
        unsafe {
            Sse(
                _mm_add_ps(self.0, _mm_mul_ps(a.0, b.0)),
                _mm_add_ps(self.1, _mm_mul_ps(a.1, b.1)),
            )
        }
    }
    #[inline(always)]
    unsafe fn add(self, a: Self) -> Self {
        unsafe { Sse(_mm_add_ps(self.0, a.0), _mm_add_ps(self.1, a.1)) }
    }
    #[inline(always)]
    unsafe fn max(self, a: Self) -> Self {
        // maxps(x, y) = if x > y { x } else { y }
        unsafe { Sse(_mm_max_ps(a.0, self.0), _mm_max_ps(a.1, self.1)) }
    }
    #[inline(always)]
    unsafe fn to_array(self) -> [f32; LANES] {
        let mut out = [0.0f32; LANES];
        unsafe {
            _mm_storeu_ps(out.as_mut_ptr(), self.0);
            _mm_storeu_ps(out.as_mut_ptr().add(4), self.1);
        }
        out
    }
    #[inline(always)]
    unsafe fn store(self, out: &mut [f32]) {
        assert!(out.len() >= LANES);
        unsafe {
            _mm_storeu_ps(out.as_mut_ptr(), self.0);
            _mm_storeu_ps(out.as_mut_ptr().add(4), self.1);
        }
    }
    #[inline(always)]
    unsafe fn wide_zero() -> Self::Wide {
        unsafe { [_mm_setzero_pd(); 4] }
    }
    #[inline(always)]
    unsafe fn widen_add(self, t: Self::Wide) -> Self::Wide {
        unsafe {
            [
                _mm_add_pd(t[0], _mm_cvtps_pd(self.0)),
                _mm_add_pd(t[1], _mm_cvtps_pd(_mm_movehl_ps(self.0, self.0))),
                _mm_add_pd(t[2], _mm_cvtps_pd(self.1)),
                _mm_add_pd(t[3], _mm_cvtps_pd(_mm_movehl_ps(self.1, self.1))),
            ]
        }
    }
    #[inline(always)]
    unsafe fn wide_to_array(t: Self::Wide) -> [f64; LANES] {
        let mut out = [0.0f64; LANES];
        for (q, half) in t.into_iter().enumerate() {
            unsafe { _mm_storeu_pd(out.as_mut_ptr().add(2 * q), half) };
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx(__m256);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx {
    const GROUP: usize = 4;
    /// Lanes 0..4, 4..8.
    type Wide = [__m256d; 2];
    #[inline(always)]
    unsafe fn zero() -> Self {
        unsafe { Avx(_mm256_setzero_ps()) }
    }
    #[inline(always)]
    unsafe fn load(chunk: &[f32]) -> Self {
        debug_assert!(chunk.len() >= LANES);
        unsafe { Avx(_mm256_loadu_ps(chunk.as_ptr())) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, a: Self, b: Self) -> Self {
        unsafe { Avx(_mm256_add_ps(self.0, _mm256_mul_ps(a.0, b.0))) }
    }
    #[inline(always)]
    unsafe fn add(self, a: Self) -> Self {
        unsafe { Avx(_mm256_add_ps(self.0, a.0)) }
    }
    #[inline(always)]
    unsafe fn max(self, a: Self) -> Self {
        unsafe { Avx(_mm256_max_ps(a.0, self.0)) }
    }
    #[inline(always)]
    unsafe fn to_array(self) -> [f32; LANES] {
        let mut out = [0.0f32; LANES];
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) };
        out
    }
    #[inline(always)]
    unsafe fn store(self, out: &mut [f32]) {
        assert!(out.len() >= LANES);
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) };
    }
    #[inline(always)]
    unsafe fn wide_zero() -> Self::Wide {
        unsafe { [_mm256_setzero_pd(); 2] }
    }
    #[inline(always)]
    unsafe fn widen_add(self, t: Self::Wide) -> Self::Wide {
        unsafe {
            let lo = _mm256_castps256_ps128(self.0);
            let hi = _mm256_extractf128_ps::<1>(self.0);
            [
                _mm256_add_pd(t[0], _mm256_cvtps_pd(lo)),
                _mm256_add_pd(t[1], _mm256_cvtps_pd(hi)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn wide_to_array(t: Self::Wide) -> [f64; LANES] {
        let mut out = [0.0f64; LANES];
        unsafe {
            _mm256_storeu_pd(out.as_mut_ptr(), t[0]);
            _mm256_storeu_pd(out.as_mut_ptr().add(4), t[1]);
        }
        out
    }
}

#[inline(always)]
fn lane_sum(t: &[f64; LANES]) -> f64 {
    ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
}

/// `l · v` for each of the `N` vectors `vs` (each at least as long as `l`).
///
/// # Safety
/// `S`'s CPU feature must be available.
#[inline(always)]
unsafe fn dots_with<S: Lanes, const N: usize>(l: &[f32], vs: [&[f32]; N]) -> [f64; N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut total = [unsafe { S::wide_zero() }; N];
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        // Even and odd chunks of the block in separate accumulators: twice the independent
        // dependency chains.
        let mut even = [unsafe { S::zero() }; N];
        let mut odd = [unsafe { S::zero() }; N];
        while j + 2 * LANES <= end {
            let l0 = unsafe { S::load(&l[j..]) };
            let l1 = unsafe { S::load(&l[j + LANES..]) };
            for n in 0..N {
                even[n] = unsafe { even[n].mul_add(l0, S::load(&vs[n][j..])) };
                odd[n] = unsafe { odd[n].mul_add(l1, S::load(&vs[n][j + LANES..])) };
            }
            j += 2 * LANES;
        }
        if j < end {
            let l0 = unsafe { S::load(&l[j..]) };
            for n in 0..N {
                even[n] = unsafe { even[n].mul_add(l0, S::load(&vs[n][j..])) };
            }
            j += LANES;
        }
        for n in 0..N {
            total[n] = unsafe { even[n].add(odd[n]).widen_add(total[n]) };
        }
    }
    let mut out = [0.0f64; N];
    for ((o, t), v) in out.iter_mut().zip(total).zip(&vs) {
        let mut s = lane_sum(&unsafe { S::wide_to_array(t) });
        for (x, y) in l[full..].iter().zip(&v[full..]) {
            s += f64::from(x * y);
        }
        *o = s;
    }
    out
}

/// `max_j (l_j + v_j)` for each of the `N` vectors `vs` (each at least as long as `l`).
///
/// # Safety
/// `S`'s CPU feature must be available.
#[inline(always)]
unsafe fn peaks_with<S: Lanes, const N: usize>(l: &[f32], vs: [&[f32]; N]) -> [f32; N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut hi = [unsafe { S::load(&[f32::NEG_INFINITY; LANES]) }; N];
    let mut j = 0;
    while j < full {
        let lc = unsafe { S::load(&l[j..]) };
        for (h, v) in hi.iter_mut().zip(&vs) {
            *h = unsafe { h.max(lc.add(S::load(&v[j..]))) };
        }
        j += LANES;
    }
    let mut out = [0.0f32; N];
    for ((o, h), v) in out.iter_mut().zip(hi).zip(&vs) {
        let mut m = f32::NEG_INFINITY;
        let tail = l[full..].iter().zip(&v[full..]).map(|(x, y)| x + y);
        for x in unsafe { h.to_array() }.into_iter().chain(tail) {
            if x > m {
                m = x;
            }
        }
        *o = m;
    }
    out
}

/// `(sum(v), |v|²)` for each of the `N` vectors `vs`, over their first `l.len()` entries
/// (`l` only gives the length).
///
/// # Safety
/// `S`'s CPU feature must be available.
#[inline(always)]
unsafe fn stats_with<S: Lanes, const N: usize>(l: &[f32], vs: [&[f32]; N]) -> [(f64, f64); N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut sums = [unsafe { S::wide_zero() }; N];
    let mut squares = [unsafe { S::wide_zero() }; N];
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        let mut s = [unsafe { S::zero() }; N];
        let mut q = [unsafe { S::zero() }; N];
        while j < end {
            for n in 0..N {
                let x = unsafe { S::load(&vs[n][j..]) };
                s[n] = unsafe { s[n].add(x) };
                q[n] = unsafe { q[n].mul_add(x, x) };
            }
            j += LANES;
        }
        for n in 0..N {
            sums[n] = unsafe { s[n].widen_add(sums[n]) };
            squares[n] = unsafe { q[n].widen_add(squares[n]) };
        }
    }
    let mut out = [(0.0, 0.0); N];
    for n in 0..N {
        let mut s = lane_sum(&unsafe { S::wide_to_array(sums[n]) });
        let mut q = lane_sum(&unsafe { S::wide_to_array(squares[n]) });
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
///
/// # Safety
/// `S`'s CPU feature must be available.
#[inline(always)]
unsafe fn dot_stats_with<S: Lanes, const N: usize>(
    l: &[f32],
    vs: [&[f32]; N],
) -> [(f64, f64, f64); N] {
    let d = l.len();
    let vs = vs.map(|v| &v[..d]);
    let full = d / LANES * LANES;
    let mut dots = [unsafe { S::wide_zero() }; N];
    let mut sums = [unsafe { S::wide_zero() }; N];
    let mut squares = [unsafe { S::wide_zero() }; N];
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        let mut even = [unsafe { S::zero() }; N];
        let mut odd = [unsafe { S::zero() }; N];
        let mut s = [unsafe { S::zero() }; N];
        let mut q = [unsafe { S::zero() }; N];
        while j + 2 * LANES <= end {
            let l0 = unsafe { S::load(&l[j..]) };
            let l1 = unsafe { S::load(&l[j + LANES..]) };
            for n in 0..N {
                let x0 = unsafe { S::load(&vs[n][j..]) };
                let x1 = unsafe { S::load(&vs[n][j + LANES..]) };
                even[n] = unsafe { even[n].mul_add(l0, x0) };
                odd[n] = unsafe { odd[n].mul_add(l1, x1) };
                s[n] = unsafe { s[n].add(x0).add(x1) };
                q[n] = unsafe { q[n].mul_add(x0, x0).mul_add(x1, x1) };
            }
            j += 2 * LANES;
        }
        if j < end {
            let l0 = unsafe { S::load(&l[j..]) };
            for n in 0..N {
                let x0 = unsafe { S::load(&vs[n][j..]) };
                even[n] = unsafe { even[n].mul_add(l0, x0) };
                s[n] = unsafe { s[n].add(x0) };
                q[n] = unsafe { q[n].mul_add(x0, x0) };
            }
            j += LANES;
        }
        for n in 0..N {
            dots[n] = unsafe { even[n].add(odd[n]).widen_add(dots[n]) };
            sums[n] = unsafe { s[n].widen_add(sums[n]) };
            squares[n] = unsafe { q[n].widen_add(squares[n]) };
        }
    }
    let mut out = [(0.0, 0.0, 0.0); N];
    for n in 0..N {
        let mut dot = lane_sum(&unsafe { S::wide_to_array(dots[n]) });
        let mut s = lane_sum(&unsafe { S::wide_to_array(sums[n]) });
        let mut q = lane_sum(&unsafe { S::wide_to_array(squares[n]) });
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

/// Runs `kernel` on backend `S` for the `count` vectors `get(0..count)` against `l`,
/// `S::GROUP` at a time, handing each result to `put(position, value)`. Expands to unsafe calls: the
/// caller guarantees the backend's CPU feature.
macro_rules! grouped {
    ($kernel:ident, $backend:ty, $l:expr, $count:expr, $get:expr, $put:expr) => {
        grouped!(
            $kernel,
            $backend,
            <$backend as Lanes>::GROUP,
            $l,
            $count,
            $get,
            $put
        )
    };
    ($kernel:ident, $backend:ty, $group:expr, $l:expr, $count:expr, $get:expr, $put:expr) => {{
        // Candidates per pass over the batch vector: what fits the 16 vector registers.
        const GROUP: usize = $group;
        let (l, count, get, mut put) = ($l, $count, $get, $put);
        let mut n = 0;
        while n + GROUP <= count {
            let r = unsafe { $kernel::<$backend, GROUP>(l, std::array::from_fn(|k| get(n + k))) };
            for (k, value) in r.into_iter().enumerate() {
                put(n + k, value);
            }
            n += GROUP;
        }
        match count - n {
            0 => {}
            1 => {
                let r = unsafe { $kernel::<$backend, 1>(l, [get(n)]) };
                put(n, r[0]);
            }
            2 => {
                let r = unsafe { $kernel::<$backend, 2>(l, [get(n), get(n + 1)]) };
                r.into_iter().enumerate().for_each(|(k, x)| put(n + k, x));
            }
            _ => {
                let r = unsafe { $kernel::<$backend, 3>(l, [get(n), get(n + 1), get(n + 2)]) };
                r.into_iter().enumerate().for_each(|(k, x)| put(n + k, x));
            }
        }
    }};
}

/// Which implementation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    #[cfg(target_arch = "x86_64")]
    Avx,
    #[cfg(target_arch = "x86_64")]
    Sse,
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    Portable,
}

#[inline]
fn backend() -> Backend {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx") {
            Backend::Avx
        } else {
            Backend::Sse
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Backend::Portable
    }
}

/// Defines `$name(l, count, get, put)`: runs `$kernel` on the fastest backend this CPU has for
/// the `count` vectors `get(0..count)` against `l`, a group of candidates per pass (the
/// backend's own group size unless given), handing each result to `put(position, value)`.
macro_rules! grouped_entry {
    ($(#[$doc:meta])* $name:ident, $kernel:ident, $out:ty) => {
        grouped_entry!($(#[$doc])* $name, $kernel, $out,
            <Avx as Lanes>::GROUP, <Sse as Lanes>::GROUP, <Portable as Lanes>::GROUP);
    };
    ($(#[$doc:meta])* $name:ident, $kernel:ident, $out:ty, $avx:expr, $sse:expr, $portable:expr) => {
        $(#[$doc])*
        pub(crate) fn $name<'a>(
            l: &[f32],
            count: usize,
            get: impl Fn(usize) -> &'a [f32],
            put: impl FnMut(usize, $out),
        ) {
            match backend() {
                #[cfg(target_arch = "x86_64")]
                Backend::Avx => {
                    #[target_feature(enable = "avx")]
                    unsafe fn avx<'a>(
                        l: &[f32],
                        count: usize,
                        get: impl Fn(usize) -> &'a [f32],
                        put: impl FnMut(usize, $out),
                    ) {
                        grouped!($kernel, Avx, $avx, l, count, get, put);
                    }
                    // SAFETY: AVX was detected at run time.
                    unsafe { avx(l, count, get, put) }
                }
                // SSE2 is part of the x86-64 baseline.
                #[cfg(target_arch = "x86_64")]
                Backend::Sse => grouped!($kernel, Sse, $sse, l, count, get, put),
                Backend::Portable => grouped!($kernel, Portable, $portable, l, count, get, put),
            }
        }
    };
}

grouped_entry!(
    /// `put(n, l · get(n))` for `n` in `0..count`.
    dots_each, dots_with, f64
);
grouped_entry!(
    /// `put(n, max(l + get(n)))` for `n` in `0..count`.
    peaks_each, peaks_with, f32
);
grouped_entry!(
    /// `put(n, (sum(get(n)), |get(n)|²))` for `n` in `0..count`; `l` only sets the length.
    stats_against_each, stats_with, (f64, f64)
);
grouped_entry!(
    /// `put(n, (l · get(n), sum(get(n)), |get(n)|²))` for `n` in `0..count`.
    dot_stats_each, dot_stats_with, (f64, f64, f64), 2, 1, 2
);

/// `put(n, (sum(get(n)), |get(n)|²))` for `n` in `0..count` (all of the same length).
pub(crate) fn stats_each<'a>(
    count: usize,
    get: impl Fn(usize) -> &'a [f32],
    put: impl FnMut(usize, (f64, f64)),
) {
    if count > 0 {
        stats_against_each(get(0), count, get, put);
    }
}

/// `out[j] = a[j] + b[j]` (plain f32 additions: the same bits on every backend).
///
/// # Safety
/// `S`'s CPU feature must be available.
#[inline(always)]
unsafe fn add_with<S: Lanes>(out: &mut [f32], a: &[f32], b: &[f32]) {
    let d = out.len();
    let (a, b) = (&a[..d], &b[..d]);
    let full = d / LANES * LANES;
    let mut j = 0;
    while j < full {
        unsafe { S::load(&a[j..]).add(S::load(&b[j..])).store(&mut out[j..]) };
        j += LANES;
    }
    for ((o, x), y) in out[full..].iter_mut().zip(&a[full..]).zip(&b[full..]) {
        *o = x + y;
    }
}

/// `|vs[0] + ... + vs[n - 1]|²`, the sum formed entrywise in f32 in that order, then
/// squared and accumulated like [`stats_with`]'s `|v|²`.
///
/// # Safety
/// `S`'s CPU feature must be available.
#[inline(always)]
unsafe fn square_of_sum_with<S: Lanes>(vs: &[&[f32]]) -> f64 {
    let d = vs[0].len();
    let full = d / LANES * LANES;
    let mut squares = unsafe { S::wide_zero() };
    let mut j = 0;
    while j < full {
        let end = (j + BLOCK).min(full);
        let mut q = unsafe { S::zero() };
        while j < end {
            let mut x = unsafe { S::load(&vs[0][j..]) };
            for v in &vs[1..] {
                x = unsafe { x.add(S::load(&v[j..d])) };
            }
            q = unsafe { q.mul_add(x, x) };
            j += LANES;
        }
        squares = unsafe { q.widen_add(squares) };
    }
    let mut total = lane_sum(&unsafe { S::wide_to_array(squares) });
    for j in full..d {
        let mut x = vs[0][j];
        for v in &vs[1..] {
            x += v[j];
        }
        total += f64::from(x * x);
    }
    total
}

/// `|vs[0] + ... + vs[n - 1]|²` (all of the same length, at least one) without forming the
/// sum in memory.
pub(crate) fn square_of_sum(vs: &[&[f32]]) -> f64 {
    match backend() {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx => {
            #[target_feature(enable = "avx")]
            unsafe fn avx(vs: &[&[f32]]) -> f64 {
                unsafe { square_of_sum_with::<Avx>(vs) }
            }
            // SAFETY: AVX was detected at run time.
            unsafe { avx(vs) }
        }
        // SAFETY: SSE2 is part of the x86-64 baseline.
        #[cfg(target_arch = "x86_64")]
        Backend::Sse => unsafe { square_of_sum_with::<Sse>(vs) },
        // SAFETY: the portable backend needs no CPU feature.
        Backend::Portable => unsafe { square_of_sum_with::<Portable>(vs) },
    }
}

/// `out = a + b`, entrywise (`a` and `b` at least as long as `out`).
pub(crate) fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
    match backend() {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx => {
            #[target_feature(enable = "avx")]
            unsafe fn avx(out: &mut [f32], a: &[f32], b: &[f32]) {
                unsafe { add_with::<Avx>(out, a, b) }
            }
            // SAFETY: AVX was detected at run time.
            unsafe { avx(out, a, b) }
        }
        // SAFETY: SSE2 is part of the x86-64 baseline.
        #[cfg(target_arch = "x86_64")]
        Backend::Sse => unsafe { add_with::<Sse>(out, a, b) },
        // SAFETY: the portable backend needs no CPU feature.
        Backend::Portable => unsafe { add_with::<Portable>(out, a, b) },
    }
}

/// `out += a`, entrywise.
pub(crate) fn add_assign(out: &mut [f32], a: &[f32]) {
    match backend() {
        #[cfg(target_arch = "x86_64")]
        Backend::Avx => {
            #[target_feature(enable = "avx")]
            unsafe fn avx(out: &mut [f32], a: &[f32]) {
                let d = out.len();
                let a = &a[..d];
                let full = d / LANES * LANES;
                let mut j = 0;
                while j < full {
                    unsafe {
                        Avx::load(&out[j..])
                            .add(Avx::load(&a[j..]))
                            .store(&mut out[j..])
                    };
                    j += LANES;
                }
                for (o, x) in out[full..].iter_mut().zip(&a[full..]) {
                    *o += x;
                }
            }
            // SAFETY: AVX was detected at run time.
            unsafe { avx(out, a) }
        }
        _ => {
            for (o, x) in out.iter_mut().zip(a) {
                *o += x;
            }
        }
    }
}

/// `(sum(v), |v|²)` in one pass.
pub(crate) fn sum_and_square(v: &[f32]) -> (f64, f64) {
    let mut out = (0.0, 0.0);
    stats_each(1, |_| v, |_, x| out = x);
    out
}

/// `sum(v)`.
pub(crate) fn sum(v: &[f32]) -> f64 {
    sum_and_square(v).0
}

/// `l · v`.
pub(crate) fn dot(l: &[f32], v: &[f32]) -> f64 {
    let mut out = 0.0;
    dots_each(l, 1, |_| v, |_, x| out = x);
    out
}

/// `out[i] = l · load(i)` for every candidate `i` in `indices`.
pub(crate) fn dots_into(
    window: &sim::batch::CandidateWindow<'_>,
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
    window: &sim::batch::CandidateWindow<'_>,
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
    window: &sim::batch::CandidateWindow<'_>,
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
    window: &sim::batch::CandidateWindow<'_>,
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
    window: &sim::batch::CandidateWindow<'_>,
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

    /// Every backend available here, and every grouping, gives the same bits.
    #[test]
    fn backends_and_groupings_are_bit_identical() {
        for d in [5, 64, 100, 1440] {
            let l = vector(9, d);
            let vs: Vec<Vec<f32>> = (10..17).map(|s| vector(s, d)).collect();
            let get = |n: usize| vs[n].as_slice();
            let reference: Vec<u64> = vs
                .iter()
                .map(|v| unsafe { dots_with::<Portable, 1>(&l, [v]) }[0].to_bits())
                .collect();
            let reference_peaks: Vec<u32> = vs
                .iter()
                .map(|v| unsafe { peaks_with::<Portable, 1>(&l, [v]) }[0].to_bits())
                .collect();
            let reference_sums: Vec<(u64, u64)> = vs
                .iter()
                .map(|v| {
                    let [(s, q)] = unsafe { stats_with::<Portable, 1>(v, [v]) };
                    (s.to_bits(), q.to_bits())
                })
                .collect();
            for count in 1..=vs.len() {
                let mut got = vec![0u64; count];
                dots_each(&l, count, get, |n, x| got[n] = x.to_bits());
                assert_eq!(got, reference[..count]);
                let mut peaks = vec![0u32; count];
                peaks_each(&l, count, get, |n, x| peaks[n] = x.to_bits());
                assert_eq!(peaks, reference_peaks[..count]);
            }
            for count in 1..=vs.len() {
                let mut got = vec![(0u64, 0u64); count];
                stats_each(count, get, |n, (s, q)| got[n] = (s.to_bits(), q.to_bits()));
                assert_eq!(got, reference_sums[..count]);
            }
            #[cfg(target_arch = "x86_64")]
            for v in &vs {
                let sse = unsafe { dots_with::<Sse, 1>(&l, [v]) }[0];
                let portable = unsafe { dots_with::<Portable, 1>(&l, [v]) }[0];
                assert_eq!(sse.to_bits(), portable.to_bits());
                let [(s, q)] = unsafe { stats_with::<Sse, 1>(v, [v]) };
                let [(ps, pq)] = unsafe { stats_with::<Portable, 1>(v, [v]) };
                assert_eq!((s.to_bits(), q.to_bits()), (ps.to_bits(), pq.to_bits()));
            }
        }
    }

    #[test]
    fn fused_kernel_matches_the_separate_ones() {
        for d in [5, 64, 100, 1440] {
            let l = vector(3, d);
            let vs: Vec<Vec<f32>> = (20..27).map(|s| vector(s, d)).collect();
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
                let mut portable = vec![(0, 0, 0); count];
                for (n, v) in vs[..count].iter().enumerate() {
                    let [(a, b, c)] = unsafe { dot_stats_with::<Portable, 1>(&l, [v]) };
                    portable[n] = (a.to_bits(), b.to_bits(), c.to_bits());
                }
                assert_eq!(fused, portable);
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
}
