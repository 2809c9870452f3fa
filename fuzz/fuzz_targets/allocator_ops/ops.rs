//! The operations of `allocator_ops`, as the input describes them.

use arbitrary::Arbitrary;

/// A custom pool's description (as `Walk::create_pool` reads it).
#[derive(Arbitrary, Debug)]
pub struct PoolSpec {
    pub(super) memory_type: u8,
    pub(super) block_size: u8,
    pub(super) min_blocks: u8,
    pub(super) max_blocks: u8,
    pub(super) named: bool,
    pub(super) export: u8,
    pub(super) priority: u8,
}

/// A request; sizes and alignments come as exponents and low bits, so
/// that small, huge and odd ones are equally easy to reach.
#[derive(Arbitrary, Debug)]
pub struct Req {
    pub(super) size_log2: u8,
    pub(super) size_bits: u64,
    /// Below 224: a power of two; else an odd figure (or 0).
    pub(super) align: u8,
    pub(super) align_bits: u16,
    /// 0: every type; 1: none; 2: only a drawn subset; 3: as 2, narrowed
    /// through `AllocationDesc::memory_type_bits` (the low two bits); bits 2
    /// and 3: 1 `Strategy::MinMemory`, 2 `Strategy::MinOffset`, 3
    /// `Strategy::MaxOffset`.
    pub(super) type_bits_mode: u8,
    pub(super) type_bits: u32,
    pub(super) usage: u8,
    pub(super) kind: u8,
    pub(super) policy: u8,
    pub(super) within_budget: bool,
    pub(super) existing_memory_only: bool,
    /// 0: none; below 200: a power of two; else not one.
    pub(super) min_alignment: u8,
    /// Below 64: the live pool `pool % pools`; 64..96: a destroyed pool.
    pub(super) pool: u8,
    pub(super) name: u8,
    /// Bit 0: the driver requires dedicated memory; bit 1: prefers it.
    pub(super) hint: u8,
    /// 1: a buffer of the application's for dedicated memory; 2: an
    /// image; else none.
    pub(super) target: u8,
    /// 0: none; else a priority, in range or not: it changes no placement
    /// (the fake device has no `VK_EXT_memory_priority`), but the memory
    /// records it, clamped, and the model checks that.
    pub(super) priority: u8,
    pub(super) can_alias: bool,
}

impl Req {
    /// A request the walk makes itself (not one drawn whole): of `size_log2`,
    /// `size_bits`, `align` and `usage` as the fields say, for a buffer in
    /// every type its requirements allow, with no pool, no name, no hint or
    /// target, and the defaults of the rest. Callers change what they need.
    pub(super) fn plain(size_log2: u8, size_bits: u64, align: u8, usage: u8) -> Self {
        Self {
            size_log2,
            size_bits,
            align,
            align_bits: 0,
            type_bits_mode: 0,
            type_bits: 0,
            usage,
            kind: 0,
            // `DedicatedPolicy::Auto`.
            policy: 0,
            within_budget: false,
            existing_memory_only: false,
            min_alignment: 0,
            // None.
            pool: 255,
            name: 3,
            hint: 0,
            target: 0,
            priority: 0,
            can_alias: false,
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Op {
    Allocate(Req),
    AllocateMut(Req),
    /// Bit 0 of `how`: through `free_mut`. Bit 1: then a byte written
    /// after free into the bytes it held, by the GPU (bit 2) or through
    /// the allocation's kept pointer, at `how >> 3` thirty-seconds of its
    /// size, where the walk can tell when that write must be counted
    /// (`Walk::write_after_free`). Bit 2 without bit 1: first a byte
    /// written `how >> 3` bytes into its debug margin, which the free must
    /// count (`Walk::overrun`). (A byte, where a `bool` was: the corpus's
    /// inputs keep their layout.)
    Free {
        pick: u16,
        how: u8,
    },
    /// With a resource: destroyed with the allocation
    /// (`destroy_*_after_frame`) or, with `alias`, queued as an alias
    /// before the allocation's own free.
    FreeAfterFrame {
        pick: u16,
        alias: bool,
    },
    /// Bit 0: sealed with a timeline value, else a fence; bits 1 to 3
    /// all set: with a null fence or semaphore (with bits 0 and 4, the
    /// walk's semaphore and the value 0), which `end_frame` refuses
    /// (`NullFrameSignal`, nothing changed). A byte, where a `bool` was:
    /// the corpus's inputs keep their layout.
    EndFrame {
        how: u8,
    },
    /// Signals the oldest pending frame, one out of order, or all.
    Signal {
        how: u8,
    },
    /// Bit 0: `wait_and_collect`, else `collect`; then bits 1 and 2 pick
    /// its timeout (0, 1 ms, 16.7 ms or `u64::MAX`), and bits 3 to 7 how
    /// many frames the GPU finishes while it waits (for a finite
    /// timeout: the oldest unfinished one at each wait, until that many
    /// did; with `u64::MAX` every frame the call waits for). A byte, where
    /// a `bool` was: the corpus's inputs keep their layout.
    Collect {
        how: u8,
    },
    CollectIdle,
    CreatePool(PoolSpec),
    DestroyPool {
        pick: u8,
    },
    Defragment {
        picks: Vec<u16>,
        max_moves: u8,
        max_bytes: u8,
        max_used_percent: u8,
        split: bool,
        compact: bool,
        /// Bit `i % 64`: give up move `i`; else carry it out, freeing the
        /// source now or (bit `i % 64` of `later`) after the frame.
        give_up: u64,
        later: u64,
    },
    Trim,
    Write {
        pick: u16,
        value: u8,
    },
    Read {
        pick: u16,
    },
    Flush {
        pick: u16,
        start: u16,
        end: u16,
        invalidate: bool,
        /// Through `flush_allocations` / `invalidate_allocations`, with
        /// every live allocation whole and this one's range.
        many: bool,
    },
    SetName {
        pick: u16,
        name: u8,
    },
    /// `what % 4`: 0 the JSON dump (detailed with bit 2), 1 the SVG, 2
    /// the memory map, then with bit 2 a new memory callback installed
    /// over the live memory (`Walk::replace_memory_callback`), 3
    /// `check_corruption` and `check_pool_corruption`.
    Inspect {
        what: u8,
    },
    FailAllocation {
        nth: u8,
        error: u8,
    },
    FailMap {
        nth: u8,
    },
    CapHeap {
        heap: u8,
        mib: u16,
    },
    /// Heap `heap % heaps`'s budget and the usage by others the device
    /// reports, in MiB; or, with `heap` bits 6 and 7 of 1 (a bit pattern
    /// that read as a heap alone before: the corpus keeps its layout), a
    /// budget near the heap's usage, `external_mib` picking how and
    /// `budget_mib` how much (`Walk::budget_near_usage`), set at once or,
    /// with bit 5, at the start of the next operation, after this one's
    /// checks read the figures, so that the allocator meets a budget that
    /// moved since its last reading.
    Budget {
        heap: u8,
        budget_mib: u16,
        external_mib: u16,
    },
    LoseDevice,
    /// Up to four requests at once, all or nothing.
    AllocateMany(Vec<Req>),
    CheckAlias {
        pick: u16,
        offset: u16,
        size_log2: u8,
        align: u8,
        type_bits: u8,
        kind: u8,
    },
    CreateRing {
        size: u8,
        size_bits: u16,
        usage: u8,
        buffer_usage: u8,
        grow: bool,
        unchecked: bool,
    },
    /// `1 + repeat % 8` ring allocations of one size, or with `repeat % 8`
    /// of 7 as many as succeed (up to 64), so that rings fill; through
    /// `ring_allocate_mut` when bit 3 of `repeat` is set (a bit unused
    /// before: the corpus's inputs keep their layout).
    RingAllocate {
        pick: u8,
        size_log2: u8,
        size_bits: u16,
        align: u8,
        repeat: u8,
    },
    /// Writes both ends of a live ring allocation; with `past`, one byte
    /// past its end and into a stale one.
    RingWrite {
        pick: u16,
        value: u8,
        past: bool,
    },
    DestroyRing {
        pick: u8,
    },
    /// `memory_type_properties`, `memory_type_for`, `budgets`,
    /// `memory_size` and `owns`.
    Query {
        what: u8,
        bits: u32,
        usage: u8,
        pick: u16,
    },
    /// Fills a ring (`pick`) across `2 + frames % 4` frames, sealed as
    /// they go, with parts of what its newest chunk has free (the last
    /// part all that is left, so that it fills up to exactly its
    /// capacity); then the GPU finishes the oldest `complete` of the
    /// frames in flight, `collect` reclaims them, and one more ring
    /// allocation (`then`: the whole capacity, the free bytes, one more,
    /// a part, ...) meets a ring partly reclaimed. Bits 2 and 3 of
    /// `frames` pick `ring_allocate`, `ring_allocate_mut` or the two in
    /// turn.
    RingFill {
        pick: u8,
        frames: u8,
        complete: u8,
        then: u8,
        align: u8,
        timeline: bool,
    },
    /// Another allocator's handle (allocation, upload ring and its
    /// allocations, custom pool) given to one of this allocator's entry
    /// points (`what`), which refuses it with `ForeignAllocation` (or
    /// `ForeignPool`) and changes nothing (the ring's allocation through
    /// `ring_allocate_mut` on odd `pick`s).
    Foreign {
        what: u8,
        pick: u16,
    },
    /// Resources of two kinds meeting in few pages, some of the first
    /// freed after the frame: `2 + count % 6` requests of kind `first`
    /// (blocks only, one usage and size), every other one then freed
    /// after the frame; with `defragment`, the rest moved (the plan's
    /// limits wide open, every move carried out); then as many requests
    /// of kind `second`, which must keep off the queued frees' pages.
    Churn {
        first: u8,
        second: u8,
        usage: u8,
        size_log2: u8,
        size_bits: u16,
        count: u8,
        defragment: bool,
    },
    /// A custom pool of a usable memory type made (or one there taken),
    /// a request placed in it and one thing done to it that its checks
    /// need (`what`: a margin overrun or a write after free, dedicated
    /// memory and the memory map, a request larger than its blocks, a
    /// failed map; then `trim` or its destroy): checks that a pool, a
    /// request naming it and the step drawn apart seldom met
    /// (`Walk::pool_probe`).
    PoolProbe {
        memory_type: u8,
        block_size: u8,
        what: u8,
        size_log2: u8,
        how: u8,
    },
    /// A request whose `memoryTypeBits` are AMD's device-coherent types
    /// and one other (the `other % n`-th of the rest), of usage `usage`, 1 byte to 64
    /// KiB, so that it lands in a device-coherent type beside another
    /// type it allows, which random bits seldom draw
    /// (`Walk::last_resort`).
    LastResort {
        other: u8,
        usage: u8,
        size_log2: u8,
        policy: u8,
    },
}
