//! The two-level bitmask that finds a non-empty bin in O(1).
//!
//! Bit `e` of the top word is set when any bin of exponent `e` holds a free
//! range; bit `m` of `second[e]` is set when bin `(e << M) | m` does. Finding
//! the first non-empty bin at or above a given one costs at most two
//! `trailing_zeros`, whatever the number of free ranges.

/// Occupancy of the `64 << M` bins.
#[derive(Clone, Debug)]
pub(crate) struct BinMask<const M: u32> {
    top: u64,
    second: [u64; 64],
}

impl<const M: u32> BinMask<M> {
    pub(crate) const fn new() -> Self {
        Self {
            top: 0,
            second: [0; 64],
        }
    }

    #[inline]
    pub(crate) fn set(&mut self, bin: u32) {
        let exponent = (bin >> M) as usize;
        self.second[exponent] |= 1u64 << (bin & ((1 << M) - 1));
        self.top |= 1u64 << exponent;
    }

    #[inline]
    pub(crate) fn clear(&mut self, bin: u32) {
        let exponent = (bin >> M) as usize;
        self.second[exponent] &= !(1u64 << (bin & ((1 << M) - 1)));
        if self.second[exponent] == 0 {
            self.top &= !(1u64 << exponent);
        }
    }

    /// The first non-empty bin `>= bin`, if any.
    ///
    /// # Time complexity
    /// O(1): two `trailing_zeros` at most.
    #[inline]
    pub(crate) fn first_at_or_above(&self, bin: u32) -> Option<u32> {
        let exponent = bin >> M;
        if exponent >= 64 {
            return None;
        }
        let mantissa = bin & ((1 << M) - 1);
        let same_exponent = self.second[exponent as usize] & (u64::MAX << mantissa);
        if same_exponent != 0 {
            return Some((exponent << M) | same_exponent.trailing_zeros());
        }
        let higher = if exponent == 63 {
            0
        } else {
            self.top & (u64::MAX << (exponent + 1))
        };
        if higher == 0 {
            return None;
        }
        let e = higher.trailing_zeros();
        Some((e << M) | self.second[e as usize].trailing_zeros())
    }

    /// The highest non-empty bin, if any.
    #[inline]
    pub(crate) fn highest(&self) -> Option<u32> {
        if self.top == 0 {
            return None;
        }
        let e = 63 - self.top.leading_zeros();
        Some((e << M) | (63 - self.second[e as usize].leading_zeros()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_bin_at_or_above() {
        let mut mask = BinMask::<3>::new();
        assert_eq!(mask.first_at_or_above(0), None);
        mask.set(5);
        mask.set(40);
        mask.set(300);
        assert_eq!(mask.first_at_or_above(0), Some(5));
        assert_eq!(mask.first_at_or_above(5), Some(5));
        assert_eq!(mask.first_at_or_above(6), Some(40));
        assert_eq!(mask.first_at_or_above(41), Some(300));
        assert_eq!(mask.first_at_or_above(301), None);
        assert_eq!(mask.highest(), Some(300));
        mask.clear(300);
        assert_eq!(mask.first_at_or_above(41), None);
        assert_eq!(mask.highest(), Some(40));
        mask.clear(40);
        mask.clear(5);
        assert_eq!(mask.highest(), None);
    }

    #[test]
    fn works_for_the_widest_mantissa() {
        let mut mask = BinMask::<6>::new();
        mask.set(64 * 63 + 63);
        assert_eq!(mask.first_at_or_above(0), Some(64 * 63 + 63));
        assert_eq!(mask.highest(), Some(64 * 63 + 63));
    }
}
