//! e^x, σ and tanh on `f32` in plain IEEE operations, so a loop over them
//! vectorises and every compiled copy of it (scalar, AVX2, AVX-512) gives
//! the same bits.
//!
//! The C library's `expf` and `tanhf` are scalar calls: the LSTM's gates
//! spent about a twentieth of a gradient call in them. These are Cephes'
//! single-precision approximations (range reduction by ln 2 in two parts, a
//! polynomial of degree 6 for e^x; an odd polynomial below |x| = 0.625 and
//! `1 − 2 / (e^{2|x|} + 1)` above it for tanh), written without branches
//! (both sides computed, one kept) and without fused multiply-adds, so the
//! result is a pure function of the input whatever the CPU: e^x and tanh
//! within 2 ulp of the exact value, σ within 3 (the division adds its
//! rounding) over the range the net uses (the tests measure it). A NaN
//! stays a NaN.

/// ln 2 in two parts: `LN2_HI` has few enough bits that `n · LN2_HI` is
/// exact for every `n` the range allows.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Rounds a float below 2²² to the nearest integer when added and taken away
/// again (1.5 · 2²³: the sum's last bit is worth 1).
const ROUND: f32 = 12_582_912.0;
/// The range of x kept: e^x stays a normal float with 2ⁿ's exponent in
/// range (e^88.7 overflows, e^−87.4 is subnormal).
const HIGH: f32 = 88.0;
const LOW: f32 = -87.0;

/// e^x (`LOW`'s value below `LOW`, `HIGH`'s above `HIGH`).
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    // comparisons rather than `clamp`/`max`: those would turn a NaN into a bound
    #[allow(clippy::manual_clamp)]
    let x = if x > HIGH {
        HIGH
    } else if x < LOW {
        LOW
    } else {
        x
    };
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = (p * (r * r) + r) + 1.0;
    // 2ⁿ, n in -126..=127: the integer n + 127 sits in the low bits of this
    // sum's mantissa, whence it moves to the exponent's place
    let biased = (n + 127.0 + ROUND).to_bits() & 0x3f_ffff;
    y * f32::from_bits(biased << 23)
}

/// σ(x) = 1 / (1 + e^−x).
#[inline(always)]
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// tanh(x).
#[inline(always)]
pub(super) fn tanh(x: f32) -> f32 {
    let a = x.abs();
    // near 0, an odd polynomial (1 − 2 / (e^{2a} + 1) would cancel)
    let z = x * x;
    let mut p = -5.704_988_7e-3_f32;
    p = p * z + 2.063_909e-2;
    p = p * z - 5.373_971_6e-2;
    p = p * z + 1.333_144_2e-1;
    p = p * z - 3.333_328e-1;
    let small = (p * z) * x + x;
    let large = (1.0 - 2.0 / (exp(a + a) + 1.0)).copysign(x);
    if a < 0.625 {
        small
    } else {
        large
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units in the last place between `got` and `want` (both finite, same sign or zero).
    fn ulps(got: f32, want: f64) -> f64 {
        let want32 = want as f32;
        let ulp = (f32::from_bits(want32.abs().to_bits() + 1) - want32.abs()) as f64;
        (got as f64 - want).abs() / ulp
    }

    fn grid() -> impl Iterator<Item = f32> {
        (-40_000..=40_000).map(|i| i as f32 * 0.002_17)
    }

    #[test]
    fn exp_is_within_2_ulp_of_the_exact_value() {
        let worst = grid()
            .chain([-87.0, -80.5, 70.25, 87.9, 88.0])
            .map(|x| ulps(exp(x), (x as f64).exp()))
            .fold(0.0, f64::max);
        assert!(worst <= 2.0, "worst error {worst} ulp");
    }

    #[test]
    fn sigmoid_within_3_ulp_and_tanh_within_2_where_they_are_not_saturated() {
        let mut worst = (0.0f64, 0.0f64);
        for x in grid().chain([1e-6, -3e-5, 0.624_999, 0.625, 0.625_001]) {
            let xd = x as f64;
            worst.0 = worst.0.max(ulps(sigmoid(x), 1.0 / (1.0 + (-xd).exp())));
            worst.1 = worst.1.max(ulps(tanh(x), xd.tanh()));
        }
        assert!(
            worst.0 <= 3.0 && worst.1 <= 2.0,
            "worst σ {} ulp, tanh {} ulp",
            worst.0,
            worst.1
        );
    }

    #[test]
    fn the_ends_saturate_and_nan_stays_nan() {
        assert_eq!(tanh(0.0), 0.0);
        assert_eq!(tanh(30.0), 1.0);
        assert_eq!(tanh(-30.0), -1.0);
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(200.0), 1.0);
        assert!(sigmoid(-200.0) >= 0.0 && sigmoid(-200.0) < 1e-37);
        assert!(exp(1000.0).is_finite() && exp(-1000.0) > 0.0);
        for f in [exp, sigmoid, tanh] {
            assert!(f(f32::NAN).is_nan());
        }
    }
}
