//! Four f64 lanes side by side, the vector of the kernel model's lane pricing
//! (`kernel::KernelRates::grouped_lanes_in`, `moe_layer::MoeLayerCost::lane_times_in`), behind
//! one trait (`Lanes`) with two implementations: `F64x4`, four f64s that LLVM vectorises for
//! the build's target (two SSE2 registers on baseline x86-64), and on x86-64 `Avx`, one AVX
//! register, used only where the CPU has AVX (`MoeLayerCost::lane_times_with` checks at run
//! time). Every operation is one IEEE operation per lane (division and square root correctly
//! rounded, nothing contracted to FMA), so a lane's bits are the scalar operation's on either.
//! A comparison gives a mask lane of all bits set (true) or none (false), for `bitselect`.

use std::ops::{Add, Div, Mul, Sub};

/// Four f64 lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C, align(32))]
pub struct F64x4([f64; 4]);

impl F64x4 {
    #[inline(always)]
    pub fn new(lanes: [f64; 4]) -> F64x4 {
        F64x4(lanes)
    }

    #[inline(always)]
    pub fn splat(x: f64) -> F64x4 {
        F64x4([x; 4])
    }

    #[inline(always)]
    fn map(self, f: impl Fn(f64) -> f64) -> F64x4 {
        F64x4([f(self.0[0]), f(self.0[1]), f(self.0[2]), f(self.0[3])])
    }

    #[inline(always)]
    fn zip(self, other: F64x4, f: impl Fn(f64, f64) -> f64) -> F64x4 {
        let (a, b) = (self.0, other.0);
        F64x4([f(a[0], b[0]), f(a[1], b[1]), f(a[2], b[2]), f(a[3], b[3])])
    }

    /// The mask lane of `holds`.
    #[inline(always)]
    fn mask(holds: bool) -> f64 {
        f64::from_bits(if holds { u64::MAX } else { 0 })
    }

    #[inline(always)]
    pub fn simd_lt(self, other: F64x4) -> F64x4 {
        self.zip(other, |a, b| F64x4::mask(a < b))
    }

    #[inline(always)]
    pub fn simd_le(self, other: F64x4) -> F64x4 {
        self.zip(other, |a, b| F64x4::mask(a <= b))
    }

    #[inline(always)]
    pub fn simd_gt(self, other: F64x4) -> F64x4 {
        self.zip(other, |a, b| F64x4::mask(a > b))
    }

    #[inline(always)]
    pub fn simd_ge(self, other: F64x4) -> F64x4 {
        self.zip(other, |a, b| F64x4::mask(a >= b))
    }

    /// Per lane, `t` where this mask is set, else `f`.
    #[inline(always)]
    pub fn bitselect(self, t: F64x4, f: F64x4) -> F64x4 {
        let (m, t, f) = (self.0, t.0, f.0);
        F64x4(std::array::from_fn(|i| {
            let m = m[i].to_bits();
            f64::from_bits((m & t[i].to_bits()) | (!m & f[i].to_bits()))
        }))
    }

    /// Whether every lane of this mask is set (its sign bit, as the hardware tests it).
    #[inline(always)]
    pub fn all(self) -> bool {
        self.0.iter().all(|x| x.is_sign_negative())
    }

    #[inline(always)]
    pub fn sqrt(self) -> F64x4 {
        self.map(f64::sqrt)
    }

    /// Each lane rounded up to a whole number.
    #[inline(always)]
    pub fn ceil(self) -> F64x4 {
        self.map(f64::ceil)
    }

    /// Four whole numbers, each exactly.
    #[inline(always)]
    pub fn from_u32(x: [u32; 4]) -> F64x4 {
        F64x4(x.map(f64::from))
    }

    #[inline(always)]
    pub fn as_array(&self) -> &[f64; 4] {
        &self.0
    }

    #[inline(always)]
    pub fn to_array(self) -> [f64; 4] {
        self.0
    }
}

macro_rules! lane_op {
    ($trait:ident, $method:ident, $op:tt) => {
        impl $trait for F64x4 {
            type Output = F64x4;
            #[inline(always)]
            fn $method(self, other: F64x4) -> F64x4 {
                self.zip(other, |a, b| a $op b)
            }
        }
    };
}

lane_op!(Add, add, +);
lane_op!(Sub, sub, -);
lane_op!(Mul, mul, *);
lane_op!(Div, div, /);

/// The operations of four lanes the lane pricing runs on (see the module's comment).
pub trait Lanes:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    fn splat(x: f64) -> Self;
    fn load(lanes: F64x4) -> Self;
    fn store(self) -> F64x4;
    fn simd_lt(self, other: Self) -> Self;
    fn simd_le(self, other: Self) -> Self;
    fn simd_gt(self, other: Self) -> Self;
    fn simd_ge(self, other: Self) -> Self;
    /// Per lane, `t` where this mask is set, else `f`.
    fn bitselect(self, t: Self, f: Self) -> Self;
    /// Whether every lane of this mask is set (its sign bit).
    fn all(self) -> bool;
    fn sqrt(self) -> Self;
    /// Each lane rounded up to a whole number (exact).
    fn ceil(self) -> Self;
    /// Four whole numbers, each exactly (`f64::from` per lane).
    fn from_u32(x: [u32; 4]) -> Self;
}

impl Lanes for F64x4 {
    #[inline(always)]
    fn splat(x: f64) -> F64x4 {
        F64x4::splat(x)
    }
    #[inline(always)]
    fn load(lanes: F64x4) -> F64x4 {
        lanes
    }
    #[inline(always)]
    fn store(self) -> F64x4 {
        self
    }
    #[inline(always)]
    fn simd_lt(self, other: F64x4) -> F64x4 {
        F64x4::simd_lt(self, other)
    }
    #[inline(always)]
    fn simd_le(self, other: F64x4) -> F64x4 {
        F64x4::simd_le(self, other)
    }
    #[inline(always)]
    fn simd_gt(self, other: F64x4) -> F64x4 {
        F64x4::simd_gt(self, other)
    }
    #[inline(always)]
    fn simd_ge(self, other: F64x4) -> F64x4 {
        F64x4::simd_ge(self, other)
    }
    #[inline(always)]
    fn bitselect(self, t: F64x4, f: F64x4) -> F64x4 {
        F64x4::bitselect(self, t, f)
    }
    #[inline(always)]
    fn all(self) -> bool {
        F64x4::all(self)
    }
    #[inline(always)]
    fn sqrt(self) -> F64x4 {
        F64x4::sqrt(self)
    }
    #[inline(always)]
    fn ceil(self) -> F64x4 {
        F64x4::ceil(self)
    }
    #[inline(always)]
    fn from_u32(x: [u32; 4]) -> F64x4 {
        F64x4::from_u32(x)
    }
}

/// Four f64 lanes in one AVX register. Only to be used where the CPU has AVX: the one caller
/// (`moe_layer`'s dispatch) checks `is_x86_feature_detected!("avx")` first and runs it inside
/// a function compiled with AVX enabled.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx {
    use super::{F64x4, Lanes};
    use std::arch::x86_64::*;
    use std::ops::{Add, Div, Mul, Sub};

    #[derive(Clone, Copy)]
    pub(crate) struct Avx(__m256d);

    // SAFETY (every `unsafe` below): an `Avx` exists only inside the AVX-compiled dispatch,
    // entered after the run-time check that the CPU has AVX.
    macro_rules! avx_op {
        ($trait:ident, $method:ident, $intrinsic:ident) => {
            impl $trait for Avx {
                type Output = Avx;
                #[inline(always)]
                fn $method(self, other: Avx) -> Avx {
                    unsafe { Avx($intrinsic(self.0, other.0)) }
                }
            }
        };
    }
    avx_op!(Add, add, _mm256_add_pd);
    avx_op!(Sub, sub, _mm256_sub_pd);
    avx_op!(Mul, mul, _mm256_mul_pd);
    avx_op!(Div, div, _mm256_div_pd);

    impl Lanes for Avx {
        #[inline(always)]
        fn splat(x: f64) -> Avx {
            unsafe { Avx(_mm256_set1_pd(x)) }
        }
        #[inline(always)]
        fn load(lanes: F64x4) -> Avx {
            unsafe { Avx(_mm256_loadu_pd(lanes.as_array().as_ptr())) }
        }
        #[inline(always)]
        fn store(self) -> F64x4 {
            let mut out = [0.0; 4];
            unsafe { _mm256_storeu_pd(out.as_mut_ptr(), self.0) };
            F64x4::new(out)
        }
        // The ordered, quiet predicates: false where a lane is NaN, as `<` is.
        #[inline(always)]
        fn simd_lt(self, other: Avx) -> Avx {
            unsafe { Avx(_mm256_cmp_pd::<_CMP_LT_OQ>(self.0, other.0)) }
        }
        #[inline(always)]
        fn simd_le(self, other: Avx) -> Avx {
            unsafe { Avx(_mm256_cmp_pd::<_CMP_LE_OQ>(self.0, other.0)) }
        }
        #[inline(always)]
        fn simd_gt(self, other: Avx) -> Avx {
            unsafe { Avx(_mm256_cmp_pd::<_CMP_GT_OQ>(self.0, other.0)) }
        }
        #[inline(always)]
        fn simd_ge(self, other: Avx) -> Avx {
            unsafe { Avx(_mm256_cmp_pd::<_CMP_GE_OQ>(self.0, other.0)) }
        }
        #[inline(always)]
        fn bitselect(self, t: Avx, f: Avx) -> Avx {
            unsafe {
                Avx(_mm256_or_pd(
                    _mm256_and_pd(self.0, t.0),
                    _mm256_andnot_pd(self.0, f.0),
                ))
            }
        }
        #[inline(always)]
        fn all(self) -> bool {
            unsafe { _mm256_movemask_pd(self.0) == 0b1111 }
        }
        #[inline(always)]
        fn sqrt(self) -> Avx {
            unsafe { Avx(_mm256_sqrt_pd(self.0)) }
        }
        #[inline(always)]
        fn ceil(self) -> Avx {
            unsafe {
                Avx(_mm256_round_pd::<
                    { _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC },
                >(self.0))
            }
        }
        // As signed 32-bit integers after flipping the top bit (exact), plus 2^31 (exact: a
        // whole number under 2^32).
        #[inline(always)]
        fn from_u32(x: [u32; 4]) -> Avx {
            unsafe {
                let x = _mm_set_epi32(x[3] as i32, x[2] as i32, x[1] as i32, x[0] as i32);
                let flipped = _mm_xor_si128(x, _mm_set1_epi32(i32::MIN));
                Avx(_mm256_add_pd(
                    _mm256_cvtepi32_pd(flipped),
                    _mm256_set1_pd(2147483648.0),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lane_is_its_scalar_operation() {
        let a = F64x4::new([1.0, -2.5, 3e300, 0.1]);
        let b = F64x4::new([3.0, 0.0, 7e-300, 0.7]);
        let lanes = |x: F64x4| x.to_array().map(f64::to_bits);
        let each = |f: fn(f64, f64) -> f64| {
            std::array::from_fn::<u64, 4, _>(|i| f(a.0[i], b.0[i]).to_bits())
        };
        assert_eq!(lanes(a + b), each(|x, y| x + y));
        assert_eq!(lanes(a - b), each(|x, y| x - y));
        assert_eq!(lanes(a * b), each(|x, y| x * y));
        assert_eq!(lanes(a / b), each(|x, y| x / y));
        assert_eq!(lanes(b.sqrt()), b.0.map(|x| x.sqrt().to_bits()));
        let less = a.simd_lt(b);
        assert_eq!(
            lanes(less.bitselect(a, b)),
            [1.0, -2.5, 7e-300, 0.1].map(f64::to_bits)
        );
        assert!(!less.all());
        let whole = F64x4::new([0.0, 0.5, 1.0, 1e15 + 0.25]);
        assert_eq!(
            lanes(whole.ceil()),
            [0.0, 1.0, 1.0, 1e15 + 1.0].map(f64::to_bits)
        );
        let counts = [0, 1, u32::MAX, 1 << 31];
        assert_eq!(
            lanes(F64x4::from_u32(counts)),
            counts.map(|c| f64::from(c).to_bits())
        );
        // The same on AVX lanes, where the CPU has AVX.
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx") {
            #[target_feature(enable = "avx")]
            fn on_avx(whole: F64x4, counts: [u32; 4]) -> (F64x4, F64x4) {
                use avx::Avx;
                (
                    Avx::load(whole).ceil().store(),
                    Avx::from_u32(counts).store(),
                )
            }
            for counts in [
                counts,
                [7, (1 << 31) - 1, 64, 129],
                [u32::MAX - 63, 3, 0, 0],
            ] {
                // SAFETY: the CPU has AVX.
                let (ceiled, converted) = unsafe { on_avx(whole, counts) };
                assert_eq!(lanes(ceiled), lanes(whole.ceil()));
                assert_eq!(lanes(converted), lanes(F64x4::from_u32(counts)));
            }
        }
        assert!(a.simd_le(a).all());
        assert!(!a.simd_gt(a).all() && a.simd_ge(a).all());
    }
}
