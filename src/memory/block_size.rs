//! How large each `VkDeviceMemory` block is.
//!
//! Few large blocks keep `vkAllocateMemory` calls (slow, and limited by
//! `maxMemoryAllocationCount`, often 4096) rare; but a block reserves its whole
//! size, so an application with little data should not pay 256 MiB per memory
//! type. The policy is VMA's: the preferred size is 256 MiB on heaps above
//! 1 GiB and 1/8 of the heap otherwise; the first blocks of a type are smaller
//! (down to 1/8 of the preferred size, but at least twice the request) and
//! each new block may be twice the largest existing one. When the driver is
//! out of memory (or the budget short), the allocator retries with halved
//! sizes before giving up on blocks: down to 1/64 of the preferred size,
//! where VMA stops at 1/8 (its `NEW_BLOCK_SIZE_SHIFT_MAX` counts the
//! halvings of a small first block too, so a first block at 1/8 is not
//! retried and each request then takes dedicated memory of its own size, an
//! object of `maxMemoryAllocationCount` each). A heap that refused those
//! sizes is not asked for them again by each request: it remembers the
//! fewest bytes it refused (`context/refusals.rs`). Requests larger than
//! half the preferred size (or aligned to more) try dedicated memory first
//! (unless 3/4 of `maxMemoryAllocationCount` objects exist).
//!
//! Below 1/64, a default pool's request still tries one block before
//! dedicated memory of its own size: a *remainder block*
//! ([`remainder_block_size`]), the largest further halving that holds it,
//! leaves at least half of the room the heap has left (as far as the
//! allocator knows: its budget, its size or limit) and is below what the
//! driver last refused there. At the edge of a budget, with less room
//! than the smallest block of the ladder, every small request that no
//! block held took a memory object of its own (VMA's issue #545: thousands
//! of them, then `VK_ERROR_TOO_MANY_OBJECTS`); now the last megabytes go
//! to a few blocks, each at most half of what is left, so they shrink
//! geometrically with the room, and a later request of up to half the
//! room still finds it. Memory types of one heap size theirs one after
//! another, on the room the last one left (`MemoryContext::remainder_turn`),
//! so that together they leave half of it too. (Blocks of all the room, the largest halving that
//! fits, made about half as many memory objects, but with 3.5 MiB left a
//! 2 MiB block left a later 2.5 MiB request 1.5 MiB: it went to another
//! heap, `tests/fake_device/budget_edge.rs`.)
//! A request that may not take dedicated memory then tries the least
//! halving that holds it ([`least_block_size`]): it fails only when the
//! heap has no room for that. Custom pools keep to their ladder (or fixed
//! size): their blocks count against `max_blocks`.

use crate::Config;

/// Halvings of the preferred size for the first, small blocks (VMA's 1/8).
const MAX_HALVINGS: u32 = 3;
/// Halvings allowed when the driver is out of memory: small blocks still
/// use the last free megabytes of a nearly full heap.
const MAX_RETRY_HALVINGS: u32 = 6;

/// The preferred block size for a heap of `heap_size` bytes: never more
/// than the heap (VUID-vkAllocateMemory-pAllocateInfo-01713), whatever the
/// configuration, nor than `maxMemoryAllocationSize`.
pub(crate) fn preferred_block_size(heap_size: u64, config: &Config, max_allocation: u64) -> u64 {
    let size = if heap_size <= config.small_heap_limit {
        (heap_size / 8).next_multiple_of(32)
    } else {
        config.large_heap_block_size
    };
    size.min(max_allocation).min(heap_size).max(1)
}

/// The size of a new block for a `request`-byte allocation, given the largest
/// block the memory type already has.
pub(crate) fn new_block_size(preferred: u64, largest_existing: u64, request: u64) -> u64 {
    let mut size = preferred;
    for _ in 0..MAX_HALVINGS {
        let smaller = size / 2;
        if smaller > largest_existing && smaller >= request.saturating_mul(2) {
            size = smaller;
        } else {
            break;
        }
    }
    size.max(request)
}

/// The size to retry with after `failed` bytes could not be allocated, if
/// any: half, while it still holds the request and stays within
/// `MAX_RETRY_HALVINGS` of the preferred size.
pub(crate) fn retry_block_size(failed: u64, preferred: u64, request: u64) -> Option<u64> {
    let smaller = failed / 2;
    (smaller >= request && smaller >= preferred >> MAX_RETRY_HALVINGS).then_some(smaller)
}

/// The block a default pool tries once its ladder ended at `smallest`
/// bytes, refused (its 1/64 of the preferred size, or the last halving
/// that holds the request), before dedicated memory of the request's own
/// size: the largest further halving of `smallest` that holds the
/// `request`, leaves at least half of the heap's known `room`, and is
/// below the fewest bytes the heap `refused` (`u64::MAX`: none). `None`
/// when no halving is all of that: the request's own memory comes next.
/// So the last megabytes under a budget go to a few blocks, shrinking
/// geometrically (each takes at most half of what is left), not to a
/// memory object per request; and a later request of up to half the room
/// still finds it.
pub(crate) fn remainder_block_size(
    smallest: u64,
    request: u64,
    room: u64,
    refused: u64,
) -> Option<u64> {
    let mut size = smallest / 2;
    while size >= request.max(1) {
        if size <= room / 2 && size < refused {
            return Some(size);
        }
        size /= 2;
    }
    None
}

/// The smallest halving of `smallest` (below it) that holds `request`:
/// the last block a default pool's request that may not take dedicated
/// memory tries, whatever the room, so that it fails only once the
/// driver (or the budget) refused the least it could take. `None` when
/// no halving holds it: `smallest` was that already.
pub(crate) fn least_block_size(smallest: u64, request: u64) -> Option<u64> {
    let mut size = smallest / 2;
    if size < request.max(1) {
        return None;
    }
    while size / 2 >= request.max(1) {
        size /= 2;
    }
    Some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn vma_sizes() {
        let config = Config::default();
        assert_eq!(preferred_block_size(8 << 30, &config, u64::MAX), 256 * MIB);
        assert_eq!(preferred_block_size(256 * MIB, &config, u64::MAX), 32 * MIB);
        assert_eq!(preferred_block_size(8 << 30, &config, 64 * MIB), 64 * MIB);
        let large_blocks_everywhere = Config {
            small_heap_limit: 0,
            ..config
        };
        assert_eq!(
            preferred_block_size(64 * MIB, &large_blocks_everywhere, u64::MAX),
            64 * MIB
        );
    }

    #[test]
    fn first_blocks_start_small_and_grow() {
        let preferred = 256 * MIB;
        assert_eq!(new_block_size(preferred, 0, 1024), 32 * MIB);
        assert_eq!(new_block_size(preferred, 32 * MIB, 1024), 64 * MIB);
        assert_eq!(new_block_size(preferred, 64 * MIB, 1024), 128 * MIB);
        assert_eq!(new_block_size(preferred, 128 * MIB, 1024), 256 * MIB);
        // A large request keeps the block at least twice its size.
        assert_eq!(new_block_size(preferred, 0, 100 * MIB), 256 * MIB);
        assert_eq!(new_block_size(preferred, 0, 40 * MIB), 128 * MIB);
    }

    #[test]
    fn retries_halve_down_to_a_sixty_fourth() {
        let preferred = 256 * MIB;
        assert_eq!(retry_block_size(256 * MIB, preferred, MIB), Some(128 * MIB));
        assert_eq!(retry_block_size(32 * MIB, preferred, MIB), Some(16 * MIB));
        assert_eq!(retry_block_size(8 * MIB, preferred, MIB), Some(4 * MIB));
        assert_eq!(retry_block_size(4 * MIB, preferred, MIB), None);
        assert_eq!(retry_block_size(128 * MIB, preferred, 100 * MIB), None);
    }

    #[test]
    fn a_remainder_block_leaves_half_the_room() {
        let none = u64::MAX;
        // 3.5 MiB left under 4 MiB, the smallest of a 256 MiB ladder: 1 MiB
        // (2 MiB would leave less than half).
        assert_eq!(
            remainder_block_size(4 * MIB, 256, 7 * MIB / 2, none),
            Some(MIB)
        );
        // Exactly twice a halving: that halving.
        assert_eq!(
            remainder_block_size(4 * MIB, 256, 4 * MIB, none),
            Some(2 * MIB)
        );
        assert_eq!(
            remainder_block_size(4 * MIB, 256, 4 * MIB - 1, none),
            Some(MIB)
        );
        assert_eq!(remainder_block_size(4 * MIB, 256, 2 * MIB, none), Some(MIB));
        // Below the heap's remembered refusal.
        assert_eq!(
            remainder_block_size(4 * MIB, 256, 3 * MIB, MIB),
            Some(MIB / 2)
        );
        // Down to the request, not below it.
        assert_eq!(remainder_block_size(4 * MIB, 256, 512, none), Some(256));
        assert_eq!(remainder_block_size(4 * MIB, 256, 511, none), None);
        assert_eq!(remainder_block_size(4 * MIB, 300, 1024, none), Some(512));
        assert_eq!(
            remainder_block_size(4 * MIB, 3 * MIB, 100 * MIB, none),
            None
        );
        // A ladder that is not of powers of two (a 96 MiB heap's 12 MiB).
        assert_eq!(
            remainder_block_size(12 * MIB / 64, 256, 150 << 10, none),
            Some(12 * MIB / 256)
        );
    }

    /// Against their definitions, over ladders that end at a power of two
    /// and at other sizes, requests and rooms around the halvings, and
    /// refusals: the remainder is the largest halving below `smallest`
    /// that holds the request, is at most half the room and below the
    /// refusal; the least, the smallest halving that holds the request.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "pure arithmetic over about 100 000 cases: three minutes under Miri, half of the library's Miri run, for no unsafe code"
    )]
    fn remainder_and_least_blocks_match_their_definitions() {
        let around = |x: u64| [x.saturating_sub(1), x, x + 1];
        for smallest in [4 * MIB, 3 * MIB, 12 * MIB / 64, 1000, 1] {
            let halvings: Vec<u64> = std::iter::successors(Some(smallest / 2), |s| Some(s / 2))
                .take_while(|&s| s > 0)
                .collect();
            let mut points: Vec<u64> = halvings.iter().flat_map(|&h| around(h)).collect();
            points.extend([0, 1, smallest, 2 * smallest, u64::MAX]);
            for &request in &points {
                let holding: Vec<u64> = halvings
                    .iter()
                    .copied()
                    .filter(|&h| h >= request.max(1))
                    .collect();
                assert_eq!(
                    least_block_size(smallest, request),
                    holding.last().copied(),
                    "{smallest} {request}"
                );
                for &room in points.iter().chain(&[2 * smallest + 1]) {
                    for refused in [u64::MAX, smallest / 2, smallest / 4, request] {
                        let expected = holding
                            .iter()
                            .copied()
                            .find(|&h| h <= room / 2 && h < refused);
                        assert_eq!(
                            remainder_block_size(smallest, request, room, refused),
                            expected,
                            "{smallest} {request} {room} {refused}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_least_block_is_the_last_halving_that_holds_the_request() {
        assert_eq!(least_block_size(4 * MIB, 256), Some(256));
        assert_eq!(least_block_size(4 * MIB, 257), Some(512));
        assert_eq!(least_block_size(4 * MIB, 2 * MIB), Some(2 * MIB));
        assert_eq!(least_block_size(4 * MIB, 2 * MIB + 1), None);
        assert_eq!(least_block_size(3 * MIB, MIB), Some(3 * MIB / 2));
    }
}
