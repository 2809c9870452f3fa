//! The setups that start the walk at a heap's edge: every heap capped a
//! little past its usage (`Setup::opaque_fd_only` bits 1 to 3 of 2), or
//! every heap's budget set a little past it (bits 1 to 3 of 3), each by a
//! room drawn against the heap's block ladder as the allocator sees it.

use super::*;

/// With `Setup::opaque_fd_only` bits 1 to 3 of 2, caps each heap
/// (`FakeDevice::cap_heap`, which the allocator cannot see) at its usage
/// now plus 3/4, 1/2, 3/8 or 1/8 (bits 4 and 5) of the smallest block of
/// its ladder (1/64 of the preferred size, as `block_size.rs` figures it
/// from the heap's size under `Config::heap_size_limits`): a request
/// that no block holds then meets the heap's edge below the ladder, where
/// a default pool tries remainder blocks (`create_remainder_block`)
/// before dedicated memory, which the corpus's inputs never reached. The
/// walk copes with caps at any time (`Op::CapHeap`).
pub(super) fn cap_at_edge(setup: &Setup, device: &FakeDevice, config: &Config) {
    if (setup.opaque_fd_only >> 1) & 7 != 2 {
        return;
    }
    let (num, den) = pick(&[(3, 4), (1, 2), (3, 8), (1, 8)], setup.opaque_fd_only >> 4);
    for heap in heaps_seen(device, config) {
        device.cap_heap(heap.index, heap.usage + heap.smallest / den * num);
    }
}

/// A heap as the allocator sees it, at setup.
struct HeapSeen {
    index: u32,
    /// Its size, as `Config::heap_size_limits` limits it.
    size: u64,
    /// The device's usage of it now.
    usage: u64,
    /// Its ladder's preferred and smallest blocks (`ladder`).
    preferred: u64,
    smallest: u64,
}

/// Every heap of `device` as an allocator made with `config` sees it now.
fn heaps_seen(device: &FakeDevice, config: &Config) -> Vec<HeapSeen> {
    let layout = device.layout();
    let seen = limited(layout, &config.heap_size_limits);
    let max_allocation = layout.max_memory_allocation_size;
    (seen
        .memory_heaps
        .iter()
        .zip(device.heap_usage())
        .enumerate())
    .map(|(index, (figures, usage))| {
        let (preferred, smallest) = ladder(figures.size, config, max_allocation);
        HeapSeen {
            index: index as u32,
            size: figures.size,
            usage,
            preferred,
            smallest,
        }
    })
    .collect()
}

/// With `Setup::opaque_fd_only` bits 1 to 3 of 3 (the layout then has
/// `VK_EXT_memory_budget`), sets each heap's budget, once the walk's first
/// ring is made, at its usage now plus 1, 7 or 4095 bytes, 1/2 of the
/// smallest block of its ladder, that block less a byte, itself, a byte
/// more, 3/2 of it, 2 of it and 5 bytes, 1/2 of the preferred block, that
/// block less a byte, itself, 3 bytes more, 2 of it, 3 of it and a byte,
/// or the heap's room (as `Config::heap_size_limits` limits it), as
/// bits 4 to 7 pick: within-budget requests meet the budget's edge, where
/// `known_room` takes the budget's side and remainder blocks fit the
/// budget byte for byte. The walk then checks (and the allocator reads)
/// the figures; `Op::Budget` moves them later.
pub(super) fn budget_at_edge(
    setup: &Setup,
    walk: &mut Walk,
    device: &FakeDevice,
    config: &Config,
) -> bool {
    if (setup.opaque_fd_only >> 1) & 7 != 3 {
        return false;
    }
    for heap in heaps_seen(device, config) {
        let (p, s, usage) = (heap.preferred, heap.smallest, heap.usage);
        let room = [
            1,
            7,
            4095,
            s / 2,
            s.saturating_sub(1),
            s,
            s + 1,
            s / 2 * 3,
            2 * s + 5,
            p / 2,
            p - 1,
            p,
            p + 3,
            2 * p,
            3 * p + 1,
            heap.size.saturating_sub(usage),
        ][usize::from(setup.opaque_fd_only >> 4)];
        // No usage by others yet: the budget alone.
        walk.set_budget(heap.index, usage.saturating_add(room), 0);
    }
    true
}
