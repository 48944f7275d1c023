//! `CostCurve`: a token-count -> latency staircase stored as sample points, evaluated by linear
//! interpolation, the form in which both the analytic roofline and the calibration binary
//! hand kernel costs to the simulator.
//!
//! Sampling convention (GEM section 3.3.2): latency only jumps where the token count crosses a
//! tile boundary (multiples of 32 or 64 tokens), so a curve is sampled at tile boundaries up to
//! the counts that matter, then sparsely (every thousand tokens or so) at high counts, where a
//! tile's step is a small fraction of the total and interpolation between sparse samples is
//! accurate. A generator that wants the steps reproduced exactly samples both sides of each
//! boundary (`k * tile` and `k * tile + 1`); the roofline does so.

use serde::{Deserialize, Serialize};

/// Why a list of samples is not a cost curve.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CurveError {
    #[error("a cost curve needs at least one sample")]
    Empty,
    #[error("sample {index} is not finite: ({tokens}, {nanos})")]
    NonFinite {
        index: usize,
        tokens: f64,
        nanos: f64,
    },
    #[error(
        "sample {index} has {tokens} tokens; sample token counts must be positive (0 tokens costs 0 by definition)"
    )]
    NonPositiveTokens { index: usize, tokens: f64 },
    #[error("sample {index} has a negative latency: {nanos} ns")]
    NegativeLatency { index: usize, nanos: f64 },
    #[error(
        "sample {index} has {tokens} tokens, not more than the previous sample's {previous}; token counts must strictly increase"
    )]
    NotIncreasing {
        index: usize,
        tokens: f64,
        previous: f64,
    },
}

/// The JSON form: `{"samples": [[tokens, nanoseconds], ...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CostCurveRepr {
    samples: Vec<(f64, f64)>,
}

/// Latency (nanoseconds) as a function of a token or sequence count.
///
/// - at 0 tokens (or fewer) the cost is 0: an expert that receives nothing is not run;
/// - between 0 and the first sample, and between samples, it is linearly interpolated;
/// - past the last sample it is extrapolated along the line through the last two samples
///   (through the origin and the only sample when there is one); a falling last segment
///   (measurement noise) is extrapolated flat, so costs never drop with more tokens out there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CostCurveRepr", into = "CostCurveRepr")]
pub struct CostCurve {
    tokens: Vec<f64>,
    nanos: Vec<f64>,
    /// Slope (ns per token) used past the last sample.
    tail_slope: f64,
}

impl CostCurve {
    /// A curve through `samples` of `(tokens, nanoseconds)`: token counts positive and
    /// strictly increasing, latencies finite and non-negative.
    pub fn new(samples: Vec<(f64, f64)>) -> Result<CostCurve, CurveError> {
        if samples.is_empty() {
            return Err(CurveError::Empty);
        }
        let mut previous = 0.0;
        for (index, &(tokens, nanos)) in samples.iter().enumerate() {
            if !tokens.is_finite() || !nanos.is_finite() {
                return Err(CurveError::NonFinite {
                    index,
                    tokens,
                    nanos,
                });
            }
            if tokens <= 0.0 {
                return Err(CurveError::NonPositiveTokens { index, tokens });
            }
            if nanos < 0.0 {
                return Err(CurveError::NegativeLatency { index, nanos });
            }
            if index > 0 && tokens <= previous {
                return Err(CurveError::NotIncreasing {
                    index,
                    tokens,
                    previous,
                });
            }
            previous = tokens;
        }
        let (tokens, nanos): (Vec<f64>, Vec<f64>) = samples.into_iter().unzip();
        let n = tokens.len();
        let (x0, y0) = if n >= 2 {
            (tokens[n - 2], nanos[n - 2])
        } else {
            (0.0, 0.0)
        };
        let tail_slope = ((nanos[n - 1] - y0) / (tokens[n - 1] - x0)).max(0.0);
        Ok(CostCurve {
            tokens,
            nanos,
            tail_slope,
        })
    }

    /// Latency in nanoseconds at `tokens` (fractional counts allowed: expected loads).
    pub fn at(&self, tokens: f64) -> f64 {
        assert!(
            !tokens.is_nan(),
            "CostCurve::at: token count is NaN (a broken load vector)"
        );
        if tokens <= 0.0 {
            return 0.0;
        }
        // Index of the first sample at or above `tokens`.
        let idx = self.tokens.partition_point(|&x| x < tokens);
        let last = self.tokens.len() - 1;
        if idx > last {
            return self.nanos[last] + self.tail_slope * (tokens - self.tokens[last]);
        }
        if self.tokens[idx] == tokens {
            return self.nanos[idx];
        }
        let (x0, y0) = if idx == 0 {
            (0.0, 0.0)
        } else {
            (self.tokens[idx - 1], self.nanos[idx - 1])
        };
        let (x1, y1) = (self.tokens[idx], self.nanos[idx]);
        y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
    }

    /// The samples as `(tokens, nanoseconds)` pairs.
    pub fn samples(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.tokens.iter().copied().zip(self.nanos.iter().copied())
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Always false: a curve has at least one sample.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Checks a curve read from a measured file: every latency positive (a kernel that ran took
    /// time; a zero would price steps at nothing) and at most `MAX_MEASURED_NANOS`.
    pub fn check_measured(&self) -> Result<(), String> {
        match self
            .samples()
            .find(|&(_, ns)| !(ns > 0.0 && ns <= MAX_MEASURED_NANOS))
        {
            None => Ok(()),
            Some((tokens, ns)) => Err(measured_latency_problem(tokens, ns)),
        }
    }
}

/// The longest one measured sample may take: an hour. Anything longer is not a kernel timing,
/// and divided by a speed factor and summed over a run it would outlast simulated time.
pub const MAX_MEASURED_NANOS: f64 = 3.6e12;

/// Why the latency `ns` measured at `x` is not usable.
pub fn measured_latency_problem(x: f64, ns: f64) -> String {
    if ns > 0.0 {
        format!(
            "the sample at {x} takes {ns:e} ns, over the {MAX_MEASURED_NANOS:e} ns (one hour) a \
             measured kernel may take"
        )
    } else {
        format!(
            "the sample at {x} takes {ns} ns; a measured latency must be positive (a zero-latency \
             profile prices every step at nothing)"
        )
    }
}

impl TryFrom<CostCurveRepr> for CostCurve {
    type Error = CurveError;
    fn try_from(repr: CostCurveRepr) -> Result<CostCurve, CurveError> {
        CostCurve::new(repr.samples)
    }
}

impl From<CostCurve> for CostCurveRepr {
    fn from(curve: CostCurve) -> CostCurveRepr {
        CostCurveRepr {
            samples: curve.tokens.into_iter().zip(curve.nanos).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_curves_take_positive_plausible_times() {
        let curve = |ns: f64| CostCurve::new(vec![(1.0, 10.0), (8.0, ns)]).unwrap();
        assert!(curve(20.0).check_measured().is_ok());
        assert!(
            curve(0.0)
                .check_measured()
                .unwrap_err()
                .contains("positive")
        );
        assert!(
            curve(1e300)
                .check_measured()
                .unwrap_err()
                .contains("one hour")
        );
    }

    fn curve(samples: &[(f64, f64)]) -> CostCurve {
        CostCurve::new(samples.to_vec()).unwrap()
    }

    #[test]
    fn interpolates_between_samples_and_from_zero() {
        let c = curve(&[(10.0, 100.0), (20.0, 300.0), (40.0, 300.0)]);
        assert_eq!(c.at(0.0), 0.0);
        assert_eq!(c.at(-3.0), 0.0);
        assert_eq!(c.at(5.0), 50.0);
        assert_eq!(c.at(10.0), 100.0);
        assert_eq!(c.at(15.0), 200.0);
        assert_eq!(c.at(20.0), 300.0);
        assert_eq!(c.at(33.0), 300.0);
    }

    #[test]
    fn extrapolates_along_the_last_two_samples() {
        let c = curve(&[(10.0, 100.0), (20.0, 300.0)]);
        assert_eq!(c.at(30.0), 500.0);
        assert_eq!(c.at(120.0), 2_300.0);
        // One sample: the line through the origin.
        assert_eq!(curve(&[(4.0, 40.0)]).at(10.0), 100.0);
        // A falling last segment (noise) extrapolates flat.
        assert_eq!(curve(&[(10.0, 100.0), (20.0, 90.0)]).at(50.0), 90.0);
    }

    #[test]
    fn rejects_invalid_samples() {
        assert_eq!(CostCurve::new(vec![]), Err(CurveError::Empty));
        assert!(matches!(
            CostCurve::new(vec![(1.0, 1.0), (1.0, 2.0)]),
            Err(CurveError::NotIncreasing { index: 1, .. })
        ));
        assert!(matches!(
            CostCurve::new(vec![(2.0, 1.0), (1.0, 2.0)]),
            Err(CurveError::NotIncreasing { index: 1, .. })
        ));
        assert!(matches!(
            CostCurve::new(vec![(-1.0, 1.0)]),
            Err(CurveError::NonPositiveTokens { index: 0, .. })
        ));
        assert!(matches!(
            CostCurve::new(vec![(0.0, 0.0)]),
            Err(CurveError::NonPositiveTokens { index: 0, .. })
        ));
        assert!(matches!(
            CostCurve::new(vec![(1.0, 1.0), (2.0, -5.0)]),
            Err(CurveError::NegativeLatency { index: 1, .. })
        ));
        assert!(matches!(
            CostCurve::new(vec![(1.0, f64::NAN)]),
            Err(CurveError::NonFinite { index: 0, .. })
        ));
    }

    #[test]
    fn json_round_trip_validates() {
        let c = curve(&[(1.0, 10.0), (64.0, 20.5)]);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, r#"{"samples":[[1.0,10.0],[64.0,20.5]]}"#);
        assert_eq!(serde_json::from_str::<CostCurve>(&json).unwrap(), c);
        let error = serde_json::from_str::<CostCurve>(r#"{"samples":[[5,1],[3,2]]}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("strictly increase"), "{error}");
        assert!(serde_json::from_str::<CostCurve>(r#"{"samples":[]}"#).is_err());
    }
}
