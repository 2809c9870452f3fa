//! What the allocator says of itself: its frame, its pools' figures, the
//! memory callback's events, the resources it will destroy, the memory
//! types it would pick, its budgets, the memory objects of allocations.

use super::*;
use vk_suballoc::device::HeapBudget;

/// A memory callback that keeps the memory objects it is told of, with
/// their sizes, in `tally`; `None` there after an event that does not
/// fit (an object made twice, or freed unmade or with another size).
pub(super) fn tally_events(tally: Events) -> impl Fn(&MemoryEvent<'_>) + Send + Sync + 'static {
    move |event| {
        let mut tally = tally.lock().unwrap();
        let Some(memories) = tally.as_mut() else {
            return;
        };
        let fits = match event.kind {
            MemoryEventKind::Allocated => memories.insert(event.memory, event.size).is_none(),
            MemoryEventKind::Freed => memories.remove(&event.memory) == Some(event.size),
        };
        if !fits {
            *tally = None;
        }
    }
}

impl Walk {
    /// Installs a new memory callback over the memory the allocator
    /// holds (`set_memory_callback`): the callback replaced, if any, must
    /// have been told each object's `Freed` (its tally empty), and the new
    /// one each object's `Allocated` ([`check_api`](Self::check_api)
    /// compares its tally with the device's memory objects).
    pub(super) fn replace_memory_callback(&mut self) {
        let events: Events = Arc::new(Mutex::new(Some(HashMap::new())));
        self.allocator
            .set_memory_callback(tally_events(Arc::clone(&events)));
        if let Some(old) = self.events.replace(events) {
            let old = old.lock().unwrap();
            let left = old.as_ref().map(HashMap::len);
            assert_eq!(left, Some(0), "the replaced callback's tally: {old:?}");
        }
    }

    /// What the allocator says of itself agrees with the model: its frame,
    /// its pools' figures, the memory callback's events, the resources it
    /// will destroy, that it owns every live allocation.
    pub(super) fn check_api(&self, stats: &vk_suballoc::report::Stats) {
        let mut of_types = stats.memory_types.clone();
        assert_eq!(self.allocator.current_frame(), self.next_frame);
        assert_eq!(self.allocator.frames_in_flight(), self.sealed.len());
        assert_eq!(*self.allocator.config(), self.config);
        let resources: usize = self.held().map(|h| h.resources).sum();
        assert_eq!(self.device.live_resources(), resources, "live resources");
        for p in &self.pools {
            let s = self.allocator.pool_stats(&p.pool).unwrap();
            let mut want = (0, 0, 0, 0);
            for h in self.held().filter(|h| h.pool == Some(p.pool)) {
                if h.dedicated {
                    (want.2, want.3) = (want.2 + 1, want.3 + h.size);
                } else {
                    (want.0, want.1) = (want.0 + 1, want.1 + h.size);
                }
            }
            let got = (
                s.block_allocations,
                s.block_allocated_bytes,
                s.dedicated_allocations,
                s.dedicated_bytes,
            );
            assert_eq!(got, want, "stats of {:?}: {s:?}", p.pool);
            assert!(s.blocks >= u64::from(p.min_blocks), "{s:?}");
            self.check_pool_figures(p, &s, &mut of_types[p.memory_type as usize]);
        }
        for dead in &self.dead_pools {
            assert_eq!(self.allocator.pool_stats(dead), Err(Error::StalePool));
        }
        if let Some(events) = &self.events {
            let memories = self.device.live_allocations();
            let events = events.lock().unwrap();
            let events = events.as_ref().expect("a memory event out of turn");
            assert_eq!(events.len(), memories.len(), "memory events");
            for m in &memories {
                assert_eq!(events.get(&m.memory), Some(&m.size), "memory events");
            }
        }
        for live in &self.live {
            assert!(self.allocator.owns(&live.allocation));
        }
    }

    /// `Allocator::name` says each live allocation's last name: its
    /// request's, or the last `set_name` gave it (a move keeps it).
    pub(super) fn check_names(&self) {
        for live in &self.live {
            let name = self.allocator.name(&live.allocation);
            assert_eq!(
                name.as_ref().map(Option::as_deref),
                Ok(live.name),
                "name of {:?}",
                live.allocation
            );
        }
    }

    pub(super) fn query(&mut self, what: u8, bits: u32, usage: u8, pick: u16) {
        let types = self.layout.memory_types.len() as u32;
        match what % 4 {
            0 => {
                let t = u32::from(what / 4) % (types + 2);
                let props = self.allocator.memory_type_properties(t);
                let want = self
                    .layout
                    .memory_types
                    .get(t as usize)
                    .map(|ty| vk::MemoryPropertyFlags::from_raw(u32::from(ty.props.bits())))
                    // AMD's device-coherent types say so, feature on or off.
                    .map(|flags| {
                        if self.layout.amd_device_coherent_types & (1 << t) != 0 {
                            flags | vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD
                        } else {
                            flags
                        }
                    });
                assert_eq!(props, want, "memory_type_properties({t})");
            }
            1 => {
                let bits = if what & 4 != 0 { !0 } else { bits };
                let usage = USAGES[usage as usize % USAGES.len()];
                // Bits 3 to 7 (0 for `memory_type_for` itself): a whole
                // description for `memory_type_for_desc`.
                let desc = (what >> 3 != 0).then(|| query_desc(usage, what >> 3, bits));
                self.check_memory_type_for(bits, usage, desc.as_ref());
            }
            2 => self.check_budgets(),
            _ => {
                let Some(i) = self.index(pick) else { return };
                let a = &self.live[i].allocation;
                assert!(self.allocator.owns(a));
                let memories = self.device.live_allocations();
                let m = memories.iter().find(|m| m.memory == a.memory()).unwrap();
                assert_eq!(self.allocator.memory_size(a), Ok(m.size));
            }
        }
    }
}

/// The description `memory_type_for_desc` is asked of, from `pick` (bits
/// 3 to 7 of the query's `what`, not 0): required flags (bits 0 and 1),
/// preferred flags (bits 2 and 3), and with bit 4 its own memory type
/// bits (those of the query's `bits`, rotated).
fn query_desc(usage: Usage, pick: u8, bits: u32) -> AllocationDesc<'static> {
    use vk::MemoryPropertyFlags as F;
    let required = [
        F::empty(),
        F::DEVICE_LOCAL,
        F::HOST_VISIBLE | F::HOST_CACHED,
        F::DEVICE_COHERENT_AMD,
    ][usize::from(pick & 3)];
    let preferred = [
        F::empty(),
        F::HOST_CACHED,
        F::DEVICE_LOCAL | F::HOST_VISIBLE,
        F::LAZILY_ALLOCATED | F::HOST_COHERENT,
    ][usize::from(pick >> 2 & 3)];
    let desc = AllocationDesc::new(usage)
        .required_flags(required)
        .preferred_flags(preferred);
    if pick & 16 != 0 {
        desc.memory_type_bits(bits.rotate_left(1))
    } else {
        desc
    }
}

impl Walk {
    /// Memory type `t`'s flags as the allocator reports them
    /// (`memory_type_properties`): the layout's, and AMD's device-coherent
    /// types say so, feature on or off.
    fn vk_props(&self, t: u32) -> Option<vk::MemoryPropertyFlags> {
        let ty = self.layout.memory_types.get(t as usize)?;
        let flags = vk::MemoryPropertyFlags::from_raw(u32::from(ty.props.bits()));
        Some(if self.layout.amd_device_coherent_types & (1 << t) != 0 {
            flags | vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD
        } else {
            flags
        })
    }

    /// `memory_type_for(bits, usage)`, or with `desc`
    /// `memory_type_for_desc(bits, desc)` (its usage `usage`): its error
    /// predicted in the docs' order (the bits less the types `desc` rules
    /// out, the required flags, the device-address feature, then a type
    /// that suits the usage, its heap not empty), and its answer a type
    /// that suits the usage, has the required flags and misses no more of
    /// the preferred ones than any other such type (AMD's device-coherent
    /// types last), where a one-byte buffer of that description lands on a
    /// fresh allocator (`check_first_type`).
    fn check_memory_type_for(&self, bits: u32, usage: Usage, desc: Option<&AllocationDesc<'_>>) {
        let plain = AllocationDesc::new(usage);
        let d = desc.unwrap_or(&plain);
        let result = match desc {
            Some(desc) => self.allocator.memory_type_for_desc(bits, desc),
            None => self.allocator.memory_type_for(bits, usage),
        };
        let type_bits = bits & !d.excluded_memory_types;
        let usable = type_bits & self.usable_types();
        let with_flags = |flags: vk::MemoryPropertyFlags| {
            (0..self.layout.memory_types.len().min(32) as u32)
                .filter(|&t| self.vk_props(t).is_some_and(|f| f.contains(flags)))
                .fold(0u32, |mask, t| mask | 1 << t)
        };
        let allowed = usable & with_flags(d.required_flags);
        let no_address =
            usage.contains(Usage::DEVICE_ADDRESS) && !self.layout.buffer_device_address;
        let suiting = allowed & self.suiting_types(usage, 1);
        let predicted = if usable == 0 {
            Err(Error::NoMemoryTypeBits(type_bits))
        } else if allowed == 0 {
            Err(Error::MissingRequiredFlags {
                memory_type_bits: usable,
                required: d.required_flags,
            })
        } else if no_address {
            Err(Error::DeviceAddressNotEnabled)
        } else if suiting == 0 {
            Err(Error::NoSuitableMemoryType {
                memory_type_bits: if d.required_flags.is_empty() {
                    type_bits
                } else {
                    allowed
                },
                usage,
            })
        } else {
            Ok(())
        };
        let t = match (result, predicted) {
            (Ok(t), Ok(())) => t,
            (Err(error), Err(want)) => {
                return assert_eq!(error, want, "memory_type_for({bits:#x}, {d:?})");
            }
            (result, want) => {
                panic!("memory_type_for({bits:#x}, {d:?}): {result:?}, not {want:?}")
            }
        };
        assert!(suiting & (1 << t) != 0, "type {t} for {bits:#x}, {d:?}");
        assert_eq!(self.protected_types() & (1 << t), 0, "protected {t}");
        assert!(
            self.takes_last_resort(t, allowed, usage, 0),
            "AMD device-coherent type {t} for {bits:#x}, {d:?}"
        );
        // The fewest preferred flags missing, among the types that rank
        // with it (AMD's device-coherent ones rank after all others).
        let amd = self.layout.amd_device_coherent_types;
        let missing = |t: u32| {
            let flags = self.vk_props(t).unwrap_or_default();
            (d.preferred_flags & !flags).as_raw().count_ones()
        };
        let peers = suiting & if amd & (1 << t) != 0 { !0 } else { !amd };
        let fewest = (0..32u32)
            .filter(|u| peers & (1 << u) != 0)
            .map(missing)
            .min();
        assert_eq!(
            Some(missing(t)),
            fewest,
            "type {t} misses more preferred flags than another for {bits:#x}, {d:?}"
        );
        self.check_first_type(bits, d, t);
    }

    /// The memory types that suit `usage` for a request of `size` bytes,
    /// whatever its `memoryTypeBits`: usable, not protected, on a heap of
    /// at least `size` bytes, lazily allocated only for a transient usage,
    /// host-visible when the usage needs host access (the ranking's
    /// filters).
    pub(super) fn suiting_types(&self, usage: Usage, size: u64) -> u32 {
        let usable = self.usable_types() & !self.protected_types();
        let suits = |ty: &gpu_alloc_types::MemoryType| {
            let heap = self.layout.memory_heaps.get(ty.heap as usize);
            heap.is_some_and(|h| h.size >= size)
                && (!ty.props.contains(Props::LAZILY_ALLOCATED) || usage.contains(Usage::TRANSIENT))
                && (!usage.needs_host_access() || ty.props.contains(Props::HOST_VISIBLE))
        };
        (self.layout.memory_types.iter().enumerate())
            .filter(|(t, ty)| usable & (1 << t) != 0 && suits(ty))
            .fold(0, |mask, (t, _)| mask | 1 << t)
    }

    /// `memory_type_for_desc(bits, desc)`'s answer `t` (or
    /// `memory_type_for`'s, `desc` its usage alone) is the type a request
    /// of that description is placed in first: on a fresh allocator of the
    /// same device and configuration (nothing allocated, no budget passed,
    /// no fault), where that first type takes it, a one-byte buffer with
    /// those bits and that description lands in `t`.
    fn check_first_type(&self, bits: u32, desc: &AllocationDesc<'_>, t: u32) {
        let device = FakeDevice::new(self.device.layout().clone());
        let fresh = Allocator::new(device, self.config).expect("the walk's configuration");
        assert_eq!(
            fresh.memory_type_for_desc(bits, desc),
            Ok(t),
            "a fresh allocator"
        );
        let requirements = vk::MemoryRequirements {
            size: 1,
            alignment: 1,
            memory_type_bits: bits,
        };
        let request = Request::with_desc(requirements, ResourceKind::Buffer, *desc);
        let placed = fresh.allocate(&request);
        let placed = placed.unwrap_or_else(|e| panic!("{request:?} on a fresh allocator: {e:?}"));
        assert_eq!(
            placed.memory_type(),
            t,
            "memory_type_for({bits:#x}, {desc:?}) said {t}, a request landed in {placed:?}"
        );
        // SAFETY: the fake device runs no GPU work.
        assert_eq!(unsafe { fresh.free(placed) }, Ok(()));
    }

    /// `budgets` says what its docs promise: with `VK_EXT_memory_budget`,
    /// the device's figures (a budget of 0 read as `budget_fraction` of
    /// the heap, one past the heap as the heap; a usage at least the
    /// allocator's own memory); without it, `budget_fraction` of each heap
    /// and the allocator's own memory; a heap under a
    /// `Config::heap_size_limits` entry a budget of at most what others
    /// use plus its limited size.
    fn check_budgets(&self) {
        let budgets = self.allocator.budgets();
        assert_eq!(budgets.len(), self.layout.memory_heaps.len());
        let own = self.own_usage();
        let expected = self.expected_budgets(&own);
        for (h, (b, want)) in budgets.iter().zip(expected).enumerate() {
            assert_eq!(*b, want, "heap {h}'s budget (own {})", own[h]);
        }
    }

    /// The allocator's memory in each heap, as the device counts it.
    pub(super) fn own_usage(&self) -> Vec<u64> {
        let mut own = vec![0u64; self.layout.memory_heaps.len()];
        for m in self.device.live_allocations() {
            own[m.heap as usize] += m.size;
        }
        own
    }

    /// Each heap's figures as `budgets` must read them now, the allocator
    /// holding `own` bytes in each heap ([`check_budgets`](Self::check_budgets)).
    pub(super) fn expected_budgets(&self, own: &[u64]) -> Vec<HeapBudget> {
        let fraction = self.config.budget_fraction.clamp(0.0, 1.0);
        let device_usage = self.device.heap_usage();
        (self.layout.memory_heaps.iter().enumerate())
            .map(|(h, heap)| {
                let limited = self.config.heap_size_limits.get(h).is_some_and(|&l| l != 0);
                let (reported, usage) = if self.layout.memory_budget {
                    let (budget, external) = self.device_budgets[h];
                    (budget, device_usage[h].saturating_add(external).max(own[h]))
                } else {
                    (0, own[h])
                };
                let others = if limited { usage - own[h] } else { 0 };
                let budget = match reported {
                    // No budget (or none reported): `fraction` of the
                    // (limited) heap beside what others use, as the limit
                    // caps this allocator's memory, not theirs.
                    0 => others.saturating_add((heap.size as f64 * fraction) as u64),
                    reported => reported.min(others.saturating_add(heap.size)),
                };
                HeapBudget { budget, usage }
            })
            .collect()
    }

    /// Sets heap `heap`'s budget and the usage by others the device
    /// reports, which the allocator reads at its next reading.
    pub(crate) fn set_budget(&mut self, heap: u32, budget: u64, external: u64) {
        self.device.set_heap_budget(heap, budget, external);
        self.device_budgets[heap as usize] = (budget, external);
        self.budget_changed_at = Some(self.device.counters().budget_queries);
    }

    /// Sets `near.heap`'s budget a drawn figure above (or, with `how` bit
    /// 3, below) its usage now (the device's, with the usage by others it
    /// reports, which stays): `how % 8` picks the unit, which `count`
    /// counts (bytes; 4 KiB pages; quarters of the smallest block of the
    /// heap's ladder; smallest blocks; quarters of the preferred block;
    /// preferred blocks; the heap's own room, as `known_room` figures it,
    /// once; none), and `how >> 4` adds bytes: a budget a few bytes to a
    /// few blocks from the usage, where `known_room` takes the budget's
    /// side byte for byte and remainder blocks fit the budget's edge, or
    /// one below the usage, as when other processes take memory.
    pub(crate) fn budget_near_usage(&mut self, near: NearUsage) {
        let h = near.heap as usize;
        let external = self.device_budgets[h].1;
        let device_usage = self.device.heap_usage()[h];
        let usage = device_usage.saturating_add(external);
        let size = self.layout.memory_heaps[h].size;
        let max_allocation = self.layout.max_memory_allocation_size;
        let (preferred, smallest) = ladder(size, &self.config, max_allocation);
        let count = u64::from(near.count);
        let room = match near.how % 8 {
            0 => count,
            1 => count % 64 * 4096,
            2 => count % 64 * (smallest / 4),
            3 => count % 64 * smallest,
            4 => count % 16 * (preferred / 4),
            5 => count % 8 * preferred,
            6 => size.saturating_sub(device_usage),
            _ => 0,
        } + u64::from(near.how >> 4);
        let budget = if near.how & 8 != 0 {
            usage.saturating_sub(room)
        } else {
            usage.saturating_add(room)
        };
        self.set_budget(near.heap, budget, external);
    }

    /// Whether the allocator's budget figures were the device's when an
    /// operation that found the device's counters at `before` began: no
    /// `VK_EXT_memory_budget`, or no change since its last reading (or
    /// none read yet). Between readings the allocator estimates the
    /// figures from its own changes (`BudgetCache`), and a budget that
    /// moved since shows only at its next reading, as the docs say.
    pub(super) fn budget_seen(&self, before: &FakeCounters) -> bool {
        !self.layout.memory_budget
            || self
                .budget_changed_at
                .is_none_or(|at| before.budget_queries > at || before.budget_queries == 0)
    }

    /// A within-budget request (or a batch of them, all or nothing) that
    /// succeeded on figures that were the device's (`budget_seen`) left
    /// each heap where it made memory within the heap's budget, on the
    /// device's own figures (`expected_budgets`): `AllocationDesc::within_budget`
    /// "fails rather than exceed a heap's budget". Not predicted exactly:
    /// which types and blocks it tried depends on the ladder, the
    /// remembered refusals and the remainder blocks; this holds whatever
    /// they were.
    pub(super) fn check_within_budget(
        &self,
        memories_before: &[vk::DeviceMemory],
        what: &dyn std::fmt::Debug,
    ) {
        let expected = self.expected_budgets(&self.own_usage());
        let made = self.device.live_allocations();
        let made = made.iter().filter(|m| !memories_before.contains(&m.memory));
        for m in made {
            let figures = expected[m.heap as usize];
            assert!(
                figures.usage <= figures.budget,
                "{what:?} within budget made {m:?}: heap {} at {figures:?}",
                m.heap
            );
        }
    }
}
