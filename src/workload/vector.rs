//! Copies of a hot loop compiled for the vector units the CPU has, chosen at
//! run time ([`by_features!`]).
//!
//! The build targets baseline x86-64 (SSE2), where the compiler vectorises
//! four lanes at most. A function defined through [`by_features!`] is also
//! compiled with AVX-512F and with AVX2 enabled, and each call runs the
//! widest copy the CPU has. The loops inside multiply then add, never fused
//! (Rust does not contract `a * b + c`), so every copy runs the same IEEE
//! operations in the same order on each value and gives the same bits.

/// Defines `$name`, which runs `$inner` (an `#[inline(always)]` function, or
/// method for the `self: &Type` form, of the same arguments) compiled for
/// AVX-512F or for AVX2 when the CPU has them (checked at run time), or as
/// it is.
macro_rules! by_features {
    ($(#[$meta:meta])* $vis:vis fn $name:ident(self: &$ty:ty $(, $arg:ident: $argty:ty)* $(,)?) $(-> $ret:ty)? => $inner:ident;) => {
        $(#[$meta])*
        $vis fn $name(&self $(, $arg: $argty)*) $(-> $ret)? {
            by_features!(@pick (this: &$ty $(, $arg: $argty)*) ($(-> $ret)?) this.$inner($($arg),*); (self $(, $arg)*))
        }
    };
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $argty:ty),* $(,)?) $(-> $ret:ty)? => $inner:path;) => {
        $(#[$meta])*
        $vis fn $name($($arg: $argty),*) $(-> $ret)? {
            by_features!(@pick ($($arg: $argty),*) ($(-> $ret)?) $inner($($arg),*); ($($arg),*))
        }
    };
    (@pick ($($p:ident: $pty:ty),*) ($($ret:tt)*) $call:expr; ($($a:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f")]
            fn wide($($p: $pty),*) $($ret)* {
                $call
            }
            #[target_feature(enable = "avx2")]
            fn narrow($($p: $pty),*) $($ret)* {
                $call
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F, the only feature `wide` enables.
                return unsafe { wide($($a),*) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, the only feature `narrow` enables.
                return unsafe { narrow($($a),*) };
            }
        }
        fn plain($($p: $pty),*) $($ret)* {
            $call
        }
        plain($($a),*)
    }};
}

pub(crate) use by_features;
