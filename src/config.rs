//! [`Config`]: the allocator's tunables.

/// Tunables of an [`Allocator`](crate::Allocator). `Config::default()` suits
/// most engines; every figure is explained where it is used.
/// [`Allocator::new`](crate::Allocator::new) refuses a figure outside the
/// range its field gives ([`Error::InvalidConfig`](crate::Error::InvalidConfig)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Block size on heaps larger than [`small_heap_limit`](Self::small_heap_limit).
    /// Default 256 MiB, as VMA. The first blocks of a memory type are smaller
    /// (down to 1/8 of this) and grow as more are needed; no block is larger
    /// than its heap. Not 0.
    pub large_heap_block_size: u64,
    /// Heaps up to this size get blocks of 1/8 of the heap. Default 1 GiB.
    pub small_heap_limit: u64,
    /// Allocation slots a block's offset allocator starts with (32 bytes of
    /// metadata each); a block that runs out gets as many again, 64 at
    /// least (1 slot grows to 65, 1024 to 2048). Default 1024; not
    /// 0, and at most [`offset::MAX_SLOTS`](crate::offset::MAX_SLOTS).
    pub initial_block_slots: u32,
    /// Without `VK_EXT_memory_budget`, a heap's budget is this fraction of its
    /// size, and its usage this allocator's own memory only (as in VMA):
    /// other allocators, the driver's own objects and other processes are
    /// not seen, so leave room for them here. So is the budget when the
    /// extension reports one of 0 (as VMA reads it; in a heap with a
    /// [`heap_size_limits`](Self::heap_size_limits) entry, this fraction of
    /// the limit beside what others use). Within `0.0..=1.0`
    /// (not NaN). Default 0.8. A fraction near 0 puts the heaps at their
    /// budgets from the first requests: a request that asked to stay
    /// within budget fails, any other passes the budget with memory of its
    /// own, as in VMA (one `VkDeviceMemory` per request, up to 3/4 of
    /// `maxMemoryAllocationCount`, where blocks are shared again), and no
    /// empty block is kept.
    pub budget_fraction: f64,
    /// Devices whose `bufferImageGranularity` is at most this mix buffers
    /// and images in one block: optimal-tiling images take whole granularity
    /// pages (their start and end rounded to a page), so no buffer or linear
    /// image ever shares a page with one, and linear resources are not
    /// padded at all. Above it, linear and optimal resources get separate
    /// blocks (padding a 256-byte image to 64 KiB would waste more than a
    /// second block). Default 4096: lavapipe (64), NVIDIA (1024) and most
    /// mobile GPUs (4096) mix; drivers already align optimal images to the
    /// granularity there, so the padding costs nothing. A granularity that is
    /// not a power of two (no driver reports one) always gets separate
    /// blocks.
    pub max_padded_granularity: u64,
    /// Frames the engine keeps in flight: the deferred-free queue reserves
    /// room for this many sealed frames up front (for at most 64, the most
    /// an upload-ring chunk tracks). More may be in flight (the
    /// queue grows; each upload-ring chunk tracks up to 64 sealed frames,
    /// after which [`end_frame`](crate::Allocator::end_frame) asks for a
    /// [`collect`](crate::Allocator::collect)). Not 0. Default 3.
    pub max_frames_in_flight: u32,
    /// Buffers of at most this many bytes (their size plus
    /// [`debug_margin`](Self::debug_margin), rounded up to their alignment,
    /// which is at most 4 KiB) take a slot of a run: a range of a block cut into up
    /// to 64 equal slots of a quarter-octave size class, allocated and freed
    /// with a bit mask instead of the block's offset allocator. Faster (on
    /// lavapipe's `small-churn` trace, 40 ns per operation against 49), for
    /// up to a quarter of the buffer's size in rounding (a tenth on average).
    /// A run holds its block range (at most 64 KiB, and at most a sixteenth
    /// of its block) while any slot in it is live: at worst, one live slot per run, 64 times the live bytes, where
    /// ranges of their own would hold about 1×. Frees make room that the
    /// next allocations of the class take first, and no trace measured here
    /// reserved more with runs than without. At most 65536, but buffers
    /// past 32 KiB take ranges of their own whatever it says: a larger
    /// class's run would hold one slot (a range that shares nothing, and
    /// is aligned to its slot size's largest power of two). 0 turns runs
    /// off. Default 16384.
    pub small_buffer_limit: u64,
    /// Bytes kept free after every allocation in a block (VMA's
    /// `VMA_DEBUG_MARGIN`), so that a write past an allocation's end lands
    /// in no other allocation and, with
    /// [`detect_corruption`](Self::detect_corruption), can be caught.
    /// Dedicated memory gets none. A multiple of 4 (the pattern's word), at
    /// most 65536; 0, the default, turns margins off and costs nothing.
    ///
    /// The margin is placed once, in the bytes an allocation takes in its
    /// block (a run slot's size class or a range's size is chosen for the
    /// allocation's size plus the margin); the [`Allocation`](crate::Allocation)
    /// still reports the requested size, and so do the live-byte figures of
    /// [`stats`](crate::Allocator::stats). Memory maps and dumps show each
    /// range with the bytes it holds, margin included.
    pub debug_margin: u64,
    /// Writes a pattern (`0x7F84E666`, VMA's) over the margin of every
    /// allocation in a block of a `HOST_VISIBLE | HOST_COHERENT` memory type
    /// when it is allocated, and checks it when the allocation is freed
    /// (directly or through the frame queue): a damaged margin is logged
    /// with `log::error!`, naming the allocation, and counted
    /// ([`Allocator::corruptions_detected`](crate::Allocator::corruptions_detected)).
    /// [`Allocator::check_corruption`](crate::Allocator::check_corruption)
    /// checks every live allocation's margin on demand. Needs a
    /// [`debug_margin`](Self::debug_margin); does nothing without one.
    /// The line is logged once the pool's lock is released, so a logger
    /// may call back into the allocator (read its stats, say) on it; the
    /// same for the lines of [`debug_fill`](Self::debug_fill).
    ///
    /// Non-coherent host-visible types are left out, as in VMA: checking a
    /// margin there needs an invalidate of the atoms around it, which would
    /// drop the allocation's own unflushed host writes. They still get
    /// their margins. Default false.
    pub detect_corruption: bool,
    /// Fills memory with recognisable bytes (VMA's
    /// `VMA_DEBUG_INITIALIZE_ALLOCATIONS`), and catches writes into freed
    /// memory, in blocks and dedicated memory of the `HOST_VISIBLE` memory
    /// types the allocator uses, coherent or not:
    ///
    /// - every block is filled with `0xEF` when it is made, and every
    ///   allocation's bytes in its block (its range, or its run slot,
    ///   margin included) again when it is freed (directly or through the
    ///   frame queue): a read of freed memory reads `0xEF`;
    /// - every new allocation's bytes read `0xDC` (dedicated memory's too):
    ///   a read of memory never written reads `0xDC`;
    /// - when an allocation is placed in a block, the bytes it takes there
    ///   are first checked to still hold `0xEF`: a byte that does not was
    ///   written after its memory was freed (by the host through an old
    ///   pointer, or by the GPU), which is logged with `log::error!`
    ///   (memory type, block, offsets) and counted
    ///   ([`Allocator::corruptions_detected`](crate::Allocator::corruptions_detected));
    ///   [`Allocator::check_corruption`](crate::Allocator::check_corruption)
    ///   checks every free range and free run slot on demand, and an
    ///   empty block is checked whole when it is released (kept past its
    ///   frames, `trim`, `destroy_pool`, the allocator's drop), so that a
    ///   write into memory no allocation took again is caught too.
    ///
    /// In non-coherent types (a mobile GPU's cached readback type,
    /// MoltenVK's managed storage), every fill is flushed, so the GPU reads
    /// the patterns too, and every check reads the host's view first (a
    /// host write after free, never flushed), then invalidates the bytes
    /// and reads them again (a GPU write after free). Allocations there
    /// start on `nonCoherentAtomSize` atoms, so these flushes and
    /// invalidates never reach a live allocation's bytes: its unflushed
    /// writes, and the GPU's writes it has not invalidated yet, are left
    /// alone. `check_corruption` invalidates only the whole atoms of free
    /// memory; the part of an atom that a free range shares with the
    /// allocation before it (an optimal image or a resource of unknown
    /// kind, whose size is rounded to the `bufferImageGranularity` page,
    /// when that page is smaller than the atom) is read as the host sees
    /// it: a GPU write after free there goes unseen. A flush or invalidate
    /// the driver fails is logged with `log::warn!` and skipped: after a
    /// failed flush the GPU's view lacks a fill, which a later check may
    /// report as a write after free; after a failed invalidate a GPU write
    /// after free may go unseen.
    ///
    /// Upload rings are covered as blocks are: the ring space of a chunk
    /// (one allocation of its pool) reads `0xEF` when the chunk is made
    /// and again, for each frame, when [`Allocator::collect`](crate::Allocator::collect)
    /// (or `collect_idle`) gives the frame's space back (space a
    /// `ring_write` still copied into then: when a later `collect`,
    /// `end_frame` or `ring_allocate` gives it back); and
    /// [`Allocator::ring_allocate`](crate::Allocator::ring_allocate)
    /// checks that the bytes it takes out of the free space still read
    /// `0xEF` (its own, and its alignment padding or the end of the ring
    /// it skips to wrap to its start), logging a write after free, naming
    /// the ring, chunk and offset, and counting it, as above (a write
    /// through a ring allocation of a collected frame, or by the GPU),
    /// then fills its own bytes with `0xDC`. `check_corruption` checks
    /// the rings' free space too, and a chunk's free ring space is
    /// checked once more when the chunk is freed (its ring destroyed, or
    /// the allocator dropped), so that a write there that no ring
    /// allocation took again is caught too. In a
    /// non-coherent type, where ring allocations share atoms (they are
    /// packed at their own alignment), only the atoms that hold no live
    /// ring allocation's byte are flushed and invalidated: bytes in an
    /// atom shared with a live neighbour are checked as the host sees
    /// them. Lazily allocated types (never host-visible) and device-local
    /// memory the host cannot see are left out, and so are the chunks of a
    /// ring of GPU-only scratch (a `usage` with neither `UPLOAD` nor
    /// `READBACK`) in a non-coherent type: the GPU writes its live allocations, and the
    /// host's cached view of an atom they share with a fill, written
    /// back, would put the host's bytes over the GPU's.
    ///
    /// Costs, when on: a write of every byte of each block when it is made
    /// and a read of every byte when it is released (O(block size)), a
    /// read and a write of each allocation's bytes when it is allocated
    /// and a write when it is freed (O(size)); in non-coherent types, a
    /// `vkFlushMappedMemoryRanges` of each new block and of each
    /// allocation's bytes when it is allocated and freed, a
    /// `vkInvalidateMappedMemoryRanges` of them when it is allocated and
    /// of each block when it is released, and at most one per free range
    /// and free run slot in `check_corruption` (each a walk over the CPU
    /// cache lines of the range on a real driver). In upload rings, a write
    /// of each frame's ring space when it is collected and a read and a
    /// write of each ring allocation's bytes (O(size); its padding is read
    /// too), with, in non-coherent types, a flush of the first and an
    /// invalidate and a flush of the second, under the rings' lock; and a
    /// read (and an invalidate) of a chunk's free ring space when the
    /// chunk is freed. Off, the default, it
    /// costs nothing: allocations and frees test the same bit mask as for
    /// `detect_corruption`, and `ring_allocate` tests it once. Default
    /// false.
    pub debug_fill: bool,
    /// Empty blocks each memory type keeps for reuse, beyond its largest
    /// empty block (always kept, as VMA keeps one): at most this many
    /// times the bytes allocated in its blocks, checked whenever a block
    /// empties. Default 1.0: a memory type with 500 MiB in use keeps up to
    /// 500 MiB of empty blocks besides the largest, so live bytes that
    /// swing by hundreds of MiB reuse the blocks they had, where VMA's rule
    /// gives them back and asks the driver for them again
    /// (`vkAllocateMemory` and `vkFreeMemory` take milliseconds each on
    /// NVIDIA's driver); when the allocations go, so do the empty blocks,
    /// but one. 0.0 keeps one, VMA's basic rule (VMA also gives the one it
    /// keeps back at a later free once that block has sorted last; here it
    /// stays until a request short of memory, [`Allocator::trim`](crate::Allocator::trim)
    /// or the allocator's drop: aging, [`empty_block_frames`](Self::empty_block_frames),
    /// never releases a type's largest empty block); infinity keeps every empty block
    /// while the type's blocks hold allocations. Whatever the reserve, a
    /// block that empties while its heap is at or over its budget keeps
    /// none (VMA's rule, stretched to the blocks kept before): every empty
    /// block of its pool is released then, but a custom pool's
    /// `min_blocks`. NaN and negative figures are
    /// refused ([`Error::InvalidConfig`](crate::Error::InvalidConfig)).
    ///
    /// Kept blocks never make a request fail: a request that a memory type
    /// refuses for want of memory (out of device memory, over budget, at
    /// `maxMemoryAllocationCount`) first releases the kept empty blocks
    /// (but each type's largest) of the memory types of that type's heap
    /// (of every type at `maxMemoryAllocationCount`), then is tried again,
    /// and when it still falls short, releases each type's largest too and
    /// is tried once more; so do
    /// a custom pool's `min_blocks` blocks that
    /// [`Allocator::create_pool`](crate::Allocator::create_pool) cannot make.
    /// (A memory type short of room for a new block first tries a smaller
    /// one, or dedicated memory, as under any memory pressure; only when
    /// that fails too are kept blocks released.)
    /// [`Allocator::trim`](crate::Allocator::trim) releases them all.
    /// Custom pools keep one, VMA's basic rule (and their `min_blocks`),
    /// none over budget.
    pub empty_block_reserve: f64,
    /// Frames an empty block other than a memory type's largest may stay
    /// kept: [`Allocator::end_frame`](crate::Allocator::end_frame) releases
    /// those that have been empty this many frames, so the memory a spike
    /// left behind goes back to the driver within a few seconds of frames
    /// that no longer need it. Frames are counted in `end_frame` calls, the
    /// one that seals the frame in which a block emptied included: with
    /// 120 it goes at the 120th, and 0 and 1 both release at the next. A
    /// [`collect_idle`](crate::Allocator::collect_idle), which ends the
    /// frame as if sealed and collected, counts as one.
    /// Default 120 (two seconds at 60 frames per second); `u64::MAX` keeps
    /// them for as long as
    /// [`empty_block_reserve`](Self::empty_block_reserve) allows. An engine
    /// that never ends frames ages nothing. Each `end_frame` tries every
    /// memory type's lock once for this, without waiting: a type whose
    /// lock another thread holds then (making a block, say) ages its
    /// blocks at a later `end_frame`.
    pub empty_block_frames: u64,
    /// A cap on this allocator's memory in each heap, in bytes, indexed by
    /// heap (VMA's `VmaAllocatorCreateInfo::pHeapSizeLimit`): to see how an
    /// engine fares on a GPU with less memory, or to keep it to its share
    /// of a heap. 0, the default for every heap, sets none; a heap the
    /// device does not have (Vulkan has at most 16,
    /// `VK_MAX_MEMORY_HEAPS`) ignores its figure.
    ///
    /// With a limit, the allocator takes the heap for one of
    /// `min(size, limit)` bytes everywhere it reads a heap's size: the
    /// memory types whose heap is too small for a request are passed over
    /// ([`Error::SizeExceedsHeaps`](crate::Error::SizeExceedsHeaps) names
    /// the limited size), blocks are sized from it
    /// ([`large_heap_block_size`](Self::large_heap_block_size) on heaps
    /// past [`small_heap_limit`](Self::small_heap_limit), 1/8 of the heap
    /// otherwise), a heap's budget leaves the allocator at most the limit
    /// (without `VK_EXT_memory_budget`,
    /// [`budget_fraction`](Self::budget_fraction) of it; with it, the
    /// driver's budget, but no more than what others use plus the limit),
    /// and [`stats`](crate::Allocator::stats), the memory map and
    /// the JSON dump show it as the heap's size. A memory object that
    /// would take the allocator's memory in the heap (its blocks and
    /// dedicated memory, of every memory type of the heap, custom pools'
    /// and upload rings' included) past `min(size, limit)` is refused as
    /// [`Error::OutOfDeviceMemory`](crate::Error::OutOfDeviceMemory)
    /// without a `vkAllocateMemory`, whether or not the request asked to
    /// stay within budget, so it takes the paths a full heap takes: a
    /// smaller block, dedicated memory, the kept empty blocks released, the
    /// next memory type (another heap's). As in VMA, a limit at or above
    /// the heap's size still caps the allocator's memory there at the
    /// heap's size. Memory other allocators and processes use is not
    /// counted against the limit: it is in the budget's usage (with
    /// `VK_EXT_memory_budget`), and the budget is raised by as much, so it
    /// does not push this allocator's requests out of the heap (VMA clamps
    /// the budget to the limit itself, so there other processes' memory
    /// does).
    pub heap_size_limits: [u64; 16],
    /// Records where each allocation was made, for leak reports
    /// (gpu-allocator's `store_stack_traces` with `log_leaks_on_shutdown`):
    /// every allocation captures a backtrace of its call
    /// ([`std::backtrace::Backtrace::force_capture`], whatever
    /// `RUST_BACKTRACE` says), and each leak the allocator logs at its drop
    /// (custom pools' included: [`destroy_pool`](crate::Allocator::destroy_pool)
    /// refuses a pool that holds allocations) prints it under the leaked
    /// allocation's line. A defragmentation move's destination keeps the
    /// backtrace of the allocation it replaces (where that was first made,
    /// not the [`plan_defragmentation`](crate::Allocator::plan_defragmentation)
    /// call that placed it); allocations in an upload ring record none, and
    /// a leaked ring's line prints none (a ring is reported as one leak).
    /// Without debug info a frame shows only the name of a function not
    /// inlined (from the symbol table); files, lines and inlined functions
    /// need `debug = "line-tables-only"` or more in the profile. It turns
    /// no check on: [`check_corruption`](crate::Allocator::check_corruption)
    /// still refuses the types without detection or debug fills.
    ///
    /// Costs, when on: a capture per allocation (an unwind of the stack,
    /// a few microseconds; symbols are resolved only when a leak is
    /// printed) and its frames kept while the allocation lives (some
    /// hundred bytes to a few KiB), in a hash table per pool; and
    /// every allocation and free takes the debug path of
    /// [`debug_fill`](Self::debug_fill) (out of line, with its log lines
    /// deferred). Off, the default, it costs nothing: the same bit-mask test
    /// as for `debug_fill`. For leak hunts, not for shipping.
    pub allocation_backtraces: bool,
    /// Logs every allocation as it is made and as it is freed, at
    /// `log::Level::Debug` (gpu-allocator's `log_allocations` and
    /// `log_frees`): `vk-suballoc: allocation "name" made: 4096 bytes at
    /// offset 65536 of block 1/0 (memory type 1, memory 0x2a)`, then
    /// `freed` for `made`; dedicated memory says `of dedicated memory`,
    /// and a custom pool's allocation names its pool, as the leak lines
    /// do. (The memory objects' own debug lines, `vk-suballoc: allocating
    /// 268435456 bytes of memory type 1 (unnamed)` and `vk-suballoc: freed
    /// ...`, are logged either way.)
    /// Every allocation a request makes is logged: a resource helper's,
    /// one in a custom pool, one in dedicated memory, each of
    /// [`allocate_many`](crate::Allocator::allocate_many)'s, a
    /// defragmentation move's destination, an upload ring's chunk (but not
    /// the ring allocations carved out of it); a free is logged when it is
    /// carried out, so a [`free_after_frame`](crate::Allocator::free_after_frame)
    /// at the `collect` that releases it. The size is the one requested
    /// (a leaked run slot's line gives its slot's). At the allocator's
    /// drop a live allocation is a leak, with its leak line and no freed
    /// line (a live upload ring's chunks, freed then, have both). Lines
    /// are logged once the allocator's locks are released, so a logger
    /// may call back into the allocator.
    ///
    /// Costs, when on: a line formatted per allocation and per free, and
    /// every allocation and free takes the debug path of
    /// [`debug_fill`](Self::debug_fill). Off, the default, it costs
    /// nothing: the same bit-mask test as for `debug_fill`. For debugging,
    /// not for shipping.
    pub log_allocations: bool,
    /// Hands out a mapping only where every device would have one: an
    /// allocation is mapped (its [`Allocation::mapped_ptr`](crate::Allocation::mapped_ptr)
    /// is `Some`, and [`Allocator::mapped_slice_mut`](crate::Allocator::mapped_slice_mut),
    /// `copy_to_allocation`, `flush` and the rest work) when its request's
    /// usage needs host access ([`Usage::needs_host_access`](crate::Usage::needs_host_access):
    /// `UPLOAD` or `READBACK`, but not `UPLOAD | ALLOW_TRANSFER_INSTEAD`)
    /// or its description requires `HOST_VISIBLE`
    /// ([`AllocationDesc::required_flags`](crate::AllocationDesc::required_flags)),
    /// and not otherwise, even in a host-visible memory type. For tests
    /// on devices whose GPU memory is host-visible (lavapipe, integrated
    /// and mobile GPUs, a discrete GPU with resizable BAR): there code
    /// that writes a `DEVICE_LOCAL` allocation through its mapping works,
    /// and fails on a discrete GPU without resizable BAR with
    /// [`Error::NotHostVisible`](crate::Error::NotHostVisible); with this
    /// on, it fails on every device. An `UPLOAD | ALLOW_TRANSFER_INSTEAD`
    /// allocation then always takes its transfer path (`mapped_ptr`
    /// `None`), as on a discrete GPU whose BAR is full. The same holds for
    /// upload rings by their [`usage`](crate::UploadRingDesc::usage): a
    /// GPU-only ring's allocations have no `mapped_ptr`, and
    /// [`ring_write`](crate::Allocator::ring_write) refuses them. A
    /// defragmentation move's destination is mapped when the allocation
    /// it replaces was.
    ///
    /// Nothing else changes: the memory types chosen, the blocks (mapped
    /// as ever, for [`debug_fill`](Self::debug_fill) and
    /// [`detect_corruption`](Self::detect_corruption), which go on
    /// working in blocks; a GPU-only ring's chunks are not filled, as on a
    /// discrete GPU). VMA has no such check (its
    /// `VMA_ALLOCATION_CREATE_HOST_ACCESS_*` flags only rank memory types).
    ///
    /// Costs, when on: allocations and frees in host-visible memory types
    /// take the debug path of [`debug_fill`](Self::debug_fill). Off, the
    /// default, it costs nothing: the same bit-mask test as for
    /// `debug_fill`. For tests and debug builds, not for shipping.
    pub strict_host_access: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            large_heap_block_size: 256 << 20,
            small_heap_limit: 1 << 30,
            initial_block_slots: 1024,
            budget_fraction: 0.8,
            max_padded_granularity: 4096,
            max_frames_in_flight: 3,
            small_buffer_limit: 16384,
            debug_margin: 0,
            detect_corruption: false,
            debug_fill: false,
            empty_block_reserve: 1.0,
            empty_block_frames: 120,
            heap_size_limits: [0; 16],
            allocation_backtraces: false,
            log_allocations: false,
            strict_host_access: false,
        }
    }
}
