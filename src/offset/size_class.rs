//! Small-float size classes: how a byte size maps to a bin.
//!
//! A size is written as a tiny floating-point number with `M` mantissa bits and
//! a 6-bit exponent. Sizes below `2^M` are "denormals" and get one bin each;
//! above that, every power-of-two interval `[2^k, 2^(k+1))` is cut into `2^M`
//! equal bins, so a bin's width is at most `1/2^M` of its lower bound (12.5 %
//! for the default `M = 3`). The exponent has 64 values, so every `u64` size
//! has a bin and the bin index fits the two-level bitmask of
//! [`BinMask`](super::bin_mask::BinMask): 64 top-level bits, `2^M` bits below
//! each.
//!
//! Two roundings are needed:
//! - a free range is filed under [`bin_down`] of its size: every range in bin
//!   `b` is at least `bin_lower_bound(b)` bytes long;
//! - a request looks from [`bin_up`] of its size upwards: the lower bound of
//!   that bin is at least the request, so *any* range found there fits.
//!
//! The bins between the two roundings may hold ranges that fit and ranges that
//! do not; the allocator looks at them only when the guaranteed search fails
//! (see `tlsf.rs` and `tlsf/gap_bins.rs`), which is what keeps it from
//! reporting a false out-of-space.

/// Mantissa widths the allocators accept.
pub(crate) const MIN_MANTISSA_BITS: u32 = 2;
/// See [`MIN_MANTISSA_BITS`].
pub(crate) const MAX_MANTISSA_BITS: u32 = 6;

/// Compile-time check of the const generic `M`, referenced by every constructor
/// (the rlsf way: an invalid `M` is a build error, not a run-time one).
pub(crate) struct MantissaBits<const M: u32>;

impl<const M: u32> MantissaBits<M> {
    pub(crate) const VALID: () = {
        if M < MIN_MANTISSA_BITS || M > MAX_MANTISSA_BITS {
            panic!("the mantissa width M must be 2, 3, 4, 5 or 6");
        }
    };
}

/// Number of bins for mantissa width `M`: 64 exponents times `2^M` mantissas.
pub(crate) const fn bin_count(m: u32) -> usize {
    64 << m
}

/// The bin whose lower bound is the largest one `<= size` (`size >= 1`).
///
/// Branch-free: with `shift` the number of low bits the mantissa drops (0 for
/// denormals), `size >> shift` is `2^M + mantissa` for normal sizes and `size`
/// itself for denormals, so adding `shift << M` lands on the right bin in both
/// cases.
///
/// # Time complexity
/// O(1): one `leading_zeros`.
#[inline(always)]
pub(crate) const fn bin_down<const M: u32>(size: u64) -> u32 {
    let shift = mantissa_shift::<M>(size);
    (shift << M) + (size >> shift) as u32
}

/// The bin whose lower bound is the smallest one `>= size` (`size >= 1`).
///
/// When the mantissa drops set bits, the next bin up; a mantissa that
/// overflows carries into the exponent, which is exactly the next bin. Sizes
/// above the largest lower bound a `u64` holds, `2^64 - 2^(63 - M)`
/// (`2^63 + 2^62 + 2^61` for `M = 2`, `15 * 2^60` for `M = 3`), have no
/// such bin; callers cap sizes at [`MAX_CAPACITY`](super::MAX_CAPACITY)
/// long before that.
///
/// # Time complexity
/// O(1).
#[inline(always)]
pub(crate) const fn bin_up<const M: u32>(size: u64) -> u32 {
    let shift = mantissa_shift::<M>(size);
    let dropped = size & ((1u64 << shift) - 1);
    (shift << M) + (size >> shift) as u32 + (dropped != 0) as u32
}

/// How many low bits of `size` the `M`-bit mantissa cannot hold: 0 for sizes
/// below `2^(M+1)`, else the position of the highest set bit minus `M`.
#[inline(always)]
const fn mantissa_shift<const M: u32>(size: u64) -> u32 {
    let highest_bit = 63 - (size | (1u64 << M)).leading_zeros();
    highest_bit - M
}

/// The smallest size filed under `bin`.
#[cfg(test)]
pub(crate) const fn bin_lower_bound<const M: u32>(bin: u32) -> u64 {
    let exponent = bin >> M;
    let mantissa = (bin & ((1 << M) - 1)) as u64;
    if exponent == 0 {
        mantissa
    } else {
        (mantissa | (1u64 << M)) << (exponent - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_roundings<const M: u32>() {
        // Fewer small sizes under Miri, which interprets every step.
        let small = if cfg!(miri) { 300 } else { 5000 };
        let mut sizes: Vec<u64> = (1..small).collect();
        for shift in 0..50 {
            for delta in [0i64, -1, 1, 3, -7] {
                let size = (1u64 << shift) as i64 + delta;
                if size >= 1 {
                    sizes.push(size as u64);
                }
            }
        }
        for size in sizes {
            let down = bin_down::<M>(size);
            let up = bin_up::<M>(size);
            assert!(bin_lower_bound::<M>(down) <= size, "M={M} size={size}");
            assert!(bin_lower_bound::<M>(down + 1) > size, "M={M} size={size}");
            assert!(bin_lower_bound::<M>(up) >= size, "M={M} size={size}");
            assert!(up == down || up == down + 1);
            if up > 0 {
                assert!(bin_lower_bound::<M>(up - 1) < size, "M={M} size={size}");
            }
            assert!((down as usize) < bin_count(M));
        }
    }

    #[test]
    fn roundings_bracket_every_size() {
        check_roundings::<2>();
        check_roundings::<3>();
        check_roundings::<4>();
        check_roundings::<5>();
        check_roundings::<6>();
    }

    /// `bin_up`'s docs: sizes up to `2^64 - 2^(63 - M)` have a bin whose
    /// lower bound is at least the size, and that size is the largest
    /// such bound (the next size up would need a bound past `u64::MAX`).
    fn check_largest_bin<const M: u32>() {
        let limit = u64::MAX - ((1u64 << (63 - M)) - 1);
        assert_eq!(bin_lower_bound::<M>(bin_up::<M>(limit)), limit, "M={M}");
        assert_eq!(
            bin_lower_bound::<M>(bin_down::<M>(u64::MAX)),
            limit,
            "M={M}"
        );
    }

    #[test]
    fn the_largest_bin_bound_is_2_64_minus_2_63_minus_m() {
        check_largest_bin::<2>();
        check_largest_bin::<3>();
        check_largest_bin::<4>();
        check_largest_bin::<5>();
        check_largest_bin::<6>();
    }

    #[test]
    fn lower_bounds_increase_strictly() {
        for bin in 1..(49 << 3) {
            assert!(bin_lower_bound::<3>(bin) > bin_lower_bound::<3>(bin - 1));
        }
    }

    #[test]
    fn classic_layout_matches_offset_allocator() {
        // The 5.3 small float of OffsetAllocator: 69 files under bin 32 (64..72),
        // a 67-byte request searches from bin 33 (72..80).
        assert_eq!(bin_down::<3>(69), 32);
        assert_eq!(bin_up::<3>(67), 33);
        assert_eq!(bin_lower_bound::<3>(32), 64);
        assert_eq!(bin_lower_bound::<3>(33), 72);
    }
}
