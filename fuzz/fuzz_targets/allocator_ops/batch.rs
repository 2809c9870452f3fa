//! `allocate_many` (all or nothing), `check_alias` against a model of its
//! documented rules, and the `bufferImageGranularity` pages of allocations
//! (live, or freed after a frame not collected) of kinds that may not
//! share one.

use super::*;

/// A request built from a [`Req`], with what its checks need.
pub(super) struct Built {
    pub(super) request: Request<'static>,
    /// The memory types its bits allow.
    pub(super) allowed: u32,
    pub(super) stale_pool: bool,
    /// The error its own flaw names.
    pub(super) flaw: Option<Error>,
    /// The application's resource made for it (its dedicated target).
    pub(super) resource: Option<Resource>,
}

impl Walk {
    pub(super) fn allocate_many(&mut self, reqs: &[Req]) {
        let built: Vec<Built> = reqs.iter().take(4).map(|r| self.build(r)).collect();
        let requests: Vec<Request<'static>> = built.iter().map(|b| b.request).collect();
        let stats = self.allocator.stats();
        let before = self.before();
        let calls = before.counters.allocate_calls;
        let mut memories = self.memories();
        let result = self.allocator.allocate_many(&requests);
        // Placed in order: an existing-memory-only request may use memory
        // made for one before it, never a new object of its own.
        if built.iter().all(|b| b.request.desc.existing_memory_only) {
            assert_eq!(
                self.device.counters().allocate_calls,
                calls,
                "allocate_many {requests:?}, existing memory only, called vkAllocateMemory"
            );
        }
        match result {
            Ok(allocations) => {
                assert_eq!(allocations.len(), built.len());
                let memories_before = memories.clone();
                for (b, allocation) in built.iter().zip(allocations) {
                    assert!(b.flaw.is_none(), "{:?} got {allocation:?}", b.request);
                    let memory = allocation.memory();
                    self.accept(b, allocation, &memories);
                    memories.push(memory);
                }
                let within_budget = built.iter().all(|b| b.request.desc.within_budget);
                if within_budget && self.budget_seen(&before.counters) {
                    self.check_within_budget(&memories_before, &requests);
                }
            }
            Err(error) => {
                // Some request's error; the first failing one is not known.
                let documented = built.iter().any(|b| match &b.flaw {
                    Some(flaw) => *flaw == error,
                    None => self.allocate_error_ok(error, b, &before),
                });
                assert!(documented, "allocate_many {requests:?}: {error:?}");
                self.check_driver_asked(&error, &before.counters, &requests);
                for b in &built {
                    self.drop_resource(b);
                }
                // A flawed request fails the call before any is placed:
                // nothing made, nothing kept or released (the budgets the
                // stats read may move on their own). So does one past a
                // custom pool's fixed block size, one no allowed memory
                // type suits, one whose pool is another's, destroyed or of
                // a type its bits refuse (checked up front too: placement
                // cannot give these errors in a single thread).
                let checked_first = matches!(
                    error,
                    Error::TooLargeForPool { .. }
                        | Error::NoMemoryTypeBits(_)
                        | Error::NoSuitableMemoryType { .. }
                        | Error::DeviceAddressNotEnabled
                        | Error::PoolTypeNotAllowed { .. }
                        | Error::StalePool
                        | Error::ForeignPool
                );
                if checked_first || built.iter().any(|b| b.flaw.is_some()) {
                    assert_eq!(
                        self.device.counters().allocate_calls,
                        calls,
                        "allocate_many {requests:?} called vkAllocateMemory for {error:?}"
                    );
                    let after = self.allocator.stats();
                    assert_eq!(
                        (&after.memory_types, after.memory_objects),
                        (&stats.memory_types, stats.memory_objects),
                        "allocate_many {requests:?} changed the stats for {error:?}"
                    );
                }
                // Nothing stays allocated: the stats as before (checked
                // against the unchanged model by `check`); a block made for
                // the requests before the failing one may be kept empty, as
                // any free may keep one, and kept empty blocks may go.
                let after = self.allocator.stats();
                for (t, (a, b)) in after
                    .memory_types
                    .iter()
                    .zip(&stats.memory_types)
                    .enumerate()
                {
                    assert_eq!(
                        (
                            a.block_allocations,
                            a.block_allocated_bytes,
                            a.dedicated_allocations,
                            a.blocks - a.empty_blocks
                        ),
                        (
                            b.block_allocations,
                            b.block_allocated_bytes,
                            b.dedicated_allocations,
                            b.blocks - b.empty_blocks
                        ),
                        "type {t} after a failed allocate_many"
                    );
                }
            }
        }
    }

    /// `Op::Churn`: resources of kind `kinds[0]`, every other one freed
    /// after the frame, the rest moved or not, then as many of kind
    /// `kinds[1]` beside the queued frees.
    pub(super) fn churn(
        &mut self,
        kinds: [u8; 2],
        usage: u8,
        size_log2: u8,
        size_bits: u16,
        count: u8,
        defragment: bool,
    ) {
        let n = 2 + usize::from(count % 6);
        let req = |kind: u8| Req {
            kind,
            // `DedicatedPolicy::Never`: blocks only.
            policy: 2,
            // 256 bytes to 64 KiB, not page multiples as often as not.
            ..Req::plain(
                8 + size_log2 % 9,
                u64::from(size_bits),
                size_log2 / 16 % 9,
                usage,
            )
        };
        let first = self.live.len();
        for _ in 0..n {
            self.allocate(&req(kinds[0]), false);
        }
        // Every other new one, from the last (`free_after_frame` swaps the
        // last live allocation into the freed one's place).
        let made = self.live.len() - first;
        for i in (first..first + made).rev().step_by(2) {
            self.free_after_frame(i as u16, false);
        }
        if defragment {
            let picks: Vec<u16> = (first..self.live.len()).map(|i| i as u16).collect();
            let limits = DefragmentationLimits {
                max_moves: usize::MAX,
                max_bytes: u64::MAX,
                max_used_percent: 100,
                split_blocks: true,
                compact_blocks: true,
            };
            self.defragment(&picks, &limits, 0, 0);
        }
        for _ in 0..n {
            self.allocate(&req(kinds[1]), false);
        }
    }

    pub(super) fn check_alias(
        &mut self,
        pick: u16,
        offset: u16,
        size_log2: u8,
        align: u8,
        type_bits: u8,
        kind: u8,
    ) {
        let Some(i) = self.index(pick) else { return };
        let live = &self.live[i];
        let a = &live.allocation;
        // Mostly sizes, alignments and offsets that fit, so that the
        // granularity rule is reached.
        let size = match size_log2 % 8 {
            0 => 0,
            1 => u64::MAX,
            n @ 2..6 => (a.size() >> (n - 2)).max(1),
            6 => a.size() + 1,
            _ => 1 << (size_log2 / 8 % 20),
        };
        let alignment = match align {
            0..200 => 1 << (align % 9),
            200..210 => 0,
            n => u64::from(n) * 3,
        };
        let offset = match offset % 4 {
            0 => 0,
            1 => a.size().saturating_sub(size),
            2 => u64::from(offset >> 2) * 64,
            _ => u64::from(offset),
        };
        let memory_type_bits = match type_bits % 3 {
            0 => !0,
            1 => 1 << a.memory_type(),
            _ => !(1 << a.memory_type()),
        };
        let kind = KINDS[kind as usize % KINDS.len()];
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits,
        };
        self.check_alias_of(i, offset, &requirements, kind);
    }

    /// Checks `check_alias` on live allocation `i` against the model of
    /// its rules.
    pub(super) fn check_alias_of(
        &self,
        i: usize,
        offset: u64,
        requirements: &vk::MemoryRequirements,
        kind: ResourceKind,
    ) {
        let live = &self.live[i];
        let a = &live.allocation;
        let (size, alignment) = (requirements.size, requirements.alignment);
        let memory_type_bits = requirements.memory_type_bits;
        let result = self.allocator.check_alias(a, offset, requirements, kind);
        let end = offset.saturating_add(size);
        let granularity = self.layout.buffer_image_granularity;
        let expected = if size == 0 {
            Some(Err(Error::ZeroSize))
        } else if !alignment.is_power_of_two() {
            Some(Err(Error::AlignmentNotPowerOfTwo(alignment)))
        } else if end > a.size() {
            Some(Err(Error::RangeOutOfBounds {
                start: offset,
                end,
                size: a.size(),
            }))
        } else if memory_type_bits & (1 << a.memory_type()) == 0
            || !(a.offset() + offset).is_multiple_of(alignment)
            || live.targeted
        {
            // Dedicated memory made for a resource takes no other.
            Some(Err(Error::CannotAlias("")))
        } else if live.kind.may_share_page_with(kind) || a.is_dedicated() || granularity <= 1 {
            Some(Ok(()))
        } else {
            match live.kind {
                ResourceKind::Unknown => Some(Ok(())),
                ResourceKind::Buffer | ResourceKind::LinearImage => {
                    Some(Err(Error::CannotAlias("")))
                }
                // Padded to whole pages or not, as the pools decide.
                ResourceKind::OptimalImage => None,
            }
        };
        let ok = match (&result, &expected) {
            (Err(Error::CannotAlias(_)), Some(Err(Error::CannotAlias(_)))) => true,
            (_, Some(expected)) => result == *expected,
            (Ok(()) | Err(Error::CannotAlias(_)), None) => true,
            _ => false,
        };
        assert!(
            ok,
            "check_alias({a:?} of {:?}, {offset}, {requirements:?}, {kind:?}): {result:?}, \
             not {expected:?}",
            live.kind
        );
    }

    /// No two allocations in one memory object share a
    /// `bufferImageGranularity` page unless their kinds may: live ones,
    /// ring chunks (buffers) and those freed after a frame not collected
    /// yet, which the GPU may still use.
    pub(super) fn check_granularity(&self) {
        let granularity = self.layout.buffer_image_granularity.max(1);
        let page = |offset: u64| offset / granularity;
        // Start, end, kind, and whether it was freed after a frame.
        let mut by_memory: HashMap<vk::DeviceMemory, Vec<(u64, u64, ResourceKind, bool)>> =
            HashMap::new();
        let live = self.live.iter().map(|l| (l.held(), false));
        let chunks = self.ring_chunks().map(|h| (h, false));
        let queued = self.sealed.iter().flat_map(|f| f.freed.iter());
        let queued = queued.chain(self.current.iter()).map(|h| (*h, true));
        for (h, queued) in live.chain(chunks).chain(queued) {
            if h.dedicated || h.memory == vk::DeviceMemory::null() {
                continue;
            }
            by_memory.entry(h.memory).or_default().push((
                h.offset,
                h.offset + h.size,
                h.kind,
                queued,
            ));
        }
        for (memory, ranges) in &mut by_memory {
            if ranges.iter().all(|r| r.2.may_share_page_with(ranges[0].2)) {
                continue;
            }
            ranges.sort_unstable_by_key(|r| r.0);
            for (i, a) in ranges.iter().enumerate() {
                for b in &ranges[i + 1..] {
                    if a.2.may_share_page_with(b.2) {
                        continue;
                    }
                    assert!(
                        page(a.1 - 1) < page(b.0),
                        "{memory:?}: {a:?} and {b:?} share a page of {granularity}"
                    );
                }
            }
        }
    }
}
