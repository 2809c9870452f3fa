//! Requests: built from the input, made, and checked (the flaws' errors,
//! the documented errors, where the allocation lies).
//!
//! This file holds the building, making and acceptance of requests; the
//! errors the docs promise for them are told apart in
//! `requests/documented_errors.rs`.

use super::*;
use vk_suballoc::Strategy;

#[path = "requests/documented_errors.rs"]
mod documented_errors;

/// The device as an operation found it: what explains the operation's
/// errors (faults met since, memory objects made since).
pub(super) struct Before {
    pub(super) counters: FakeCounters,
    /// Its memory objects.
    pub(super) objects: usize,
}

impl Walk {
    /// The request `req` describes, with what the checks need.
    pub(super) fn build(&self, req: &Req) -> Built {
        let size = match req.size_log2 % 72 {
            64.. => u64::MAX - (req.size_bits & 0xff),
            n => (1u64 << n) | (req.size_bits & ((1u64 << n) - 1)) ^ (req.size_bits & 1),
        };
        let size = if req.size_log2 >= 250 { 0 } else { size };
        let alignment = if req.align < 224 {
            1 << (req.align % 24)
        } else {
            u64::from(req.align_bits) * 2 + u64::from(req.align % 2) * 3
        };
        let types = self.layout.memory_types.len() as u32;
        let all = ((1u64 << types) - 1) as u32;
        let (type_bits, narrowed) = match req.type_bits_mode % 4 {
            0 => (!0, None),
            1 => (0, None),
            2 => (req.type_bits, None),
            _ => (!0, Some(req.type_bits)),
        };
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: type_bits,
        };
        let usage = USAGES[req.usage as usize % USAGES.len()];
        let kind = KINDS[req.kind as usize % KINDS.len()];
        let min_alignment = match req.min_alignment {
            0 => 0,
            n @ 1..200 => 1 << (n % 24),
            n => u64::from(n) * 3,
        };
        let (pool, stale_pool) = match req.pool {
            n @ 0..64 if !self.pools.is_empty() => {
                (Some(self.pools[n as usize % self.pools.len()].pool), false)
            }
            n @ 64..96 if !self.dead_pools.is_empty() => (
                Some(self.dead_pools[n as usize % self.dead_pools.len()]),
                true,
            ),
            _ => (None, false),
        };
        let mut desc = AllocationDesc::new(usage);
        desc.dedicated = POLICIES[req.policy as usize % POLICIES.len()];
        desc.within_budget = req.within_budget;
        desc.existing_memory_only = req.existing_memory_only;
        desc.min_alignment = min_alignment;
        desc.pool = pool;
        desc.name = (req.name % 4 != 3).then(|| NAMES[req.name as usize % 3]);
        if let Some(bits) = narrowed {
            desc = desc.memory_type_bits(bits);
        }
        desc.priority = match req.priority {
            0 => None,
            1 => Some(f32::NAN),
            2 => Some(-1.0),
            3 => Some(7.5),
            n => Some(f32::from(n) / 255.0),
        };
        desc.can_alias = req.can_alias;
        // Bits 2 and 3 of the type bits' mode, which reads only its low
        // two: where the request lands in a block, not whether it is placed.
        desc.strategy = match req.type_bits_mode >> 2 & 3 {
            1 => Strategy::MinMemory,
            2 => Strategy::MinOffset,
            3 => Strategy::MaxOffset,
            _ => Strategy::MinTime,
        };
        let resource = match req.target % 4 {
            n @ 1..=2 => Some(Resource {
                handle: self.device.create_resource(),
                image: n == 2,
            }),
            _ => None,
        };
        let mut request = Request::with_desc(requirements, kind, desc);
        request.driver_dedicated = DedicatedHint {
            required: req.hint & 1 != 0,
            preferred: req.hint & 2 != 0,
        };
        if let Some(resource) = resource {
            // SAFETY: no driver sees the handle: the fake device checks a
            // dedicated target itself (a reported violation when wrong).
            request = unsafe { request.dedicated_target(resource.target()) };
        }
        let allowed = type_bits & narrowed.unwrap_or(!0) & all;
        // The flaws checked first, whatever the device's state.
        let flaw = if size == 0 {
            Some(Error::ZeroSize)
        } else if !alignment.is_power_of_two() {
            Some(Error::AlignmentNotPowerOfTwo(alignment))
        } else if min_alignment != 0 && !min_alignment.is_power_of_two() {
            Some(Error::AlignmentNotPowerOfTwo(min_alignment))
        } else if resource.is_none() && request.driver_dedicated.required {
            Some(Error::MissingDedicatedTarget)
        } else if resource.is_some_and(|r| match kind {
            ResourceKind::Buffer => r.image,
            ResourceKind::LinearImage | ResourceKind::OptimalImage => !r.image,
            ResourceKind::Unknown => false,
        }) {
            Some(Error::DedicatedTargetMismatch)
        } else {
            None
        };
        Built {
            request,
            allowed,
            stale_pool,
            flaw,
            resource,
        }
    }

    /// Destroys the resource made for a request that failed.
    pub(super) fn drop_resource(&self, built: &Built) {
        if let Some(resource) = built.resource {
            self.device.destroy_resource(resource.handle);
        }
    }

    pub(super) fn allocate(&mut self, req: &Req, mutable: bool) {
        let built = self.build(req);
        let request = &built.request;
        let before = self.before();
        let memories_before = self.memories();
        let result = if mutable {
            self.allocator.allocate_mut(request)
        } else {
            self.allocator.allocate(request)
        };
        let after = self.device.counters();
        if request.desc.existing_memory_only {
            assert_eq!(
                before.counters.allocate_calls, after.allocate_calls,
                "an existing-memory-only request called vkAllocateMemory"
            );
        }
        let allocation = match (result, &built.flaw) {
            (Err(error), Some(flaw)) => {
                self.drop_resource(&built);
                return assert_eq!(&error, flaw, "{request:?}");
            }
            (Ok(a), Some(flaw)) => panic!("{request:?} got {a:?}, not {flaw:?}"),
            (Err(error), None) => {
                self.drop_resource(&built);
                self.check_driver_asked(&error, &before.counters, request);
                let ok = self.allocate_error_ok(error, &built, &before);
                assert!(ok, "{request:?}: undocumented {error:?}");
                return self.check_over_budget_reading(error);
            }
            (Ok(a), None) => a,
        };
        self.accept(&built, allocation, &memories_before);
        if built.request.desc.within_budget && self.budget_seen(&before.counters) {
            self.check_within_budget(&memories_before, &built.request);
        }
    }

    /// The device's memory objects now.
    pub(super) fn memories(&self) -> Vec<vk::DeviceMemory> {
        self.device
            .live_allocations()
            .iter()
            .map(|m| m.memory)
            .collect()
    }

    /// Checks `allocation`, made for `built` (with `memories_before` the
    /// device's memory before), and adds it to the live ones.
    pub(super) fn accept(
        &mut self,
        built: &Built,
        allocation: Allocation,
        memories_before: &[vk::DeviceMemory],
    ) {
        let request = &built.request;
        let (requirements, kind, desc) = (request.requirements, request.kind, &request.desc);
        let (size, alignment) = (requirements.size, requirements.alignment);
        let (allowed, pool, usage) = (built.allowed, desc.pool, desc.usage);
        let min_alignment = desc.min_alignment;
        assert!(
            !built.stale_pool,
            "a destroyed pool allocated {allocation:?}"
        );
        let checked = self.checks_error(built);
        assert_eq!(checked, None, "{allocation:?} for {request:?}");

        let t = allocation.memory_type();
        assert!(
            allowed & (1 << t) != 0,
            "type {t} outside {allowed:#x}: {allocation:?}"
        );
        assert_eq!(allocation.size(), size, "{allocation:?}");
        let props = self.layout.memory_types[t as usize].props;
        if usage.needs_host_access() {
            assert!(
                props.contains(Props::HOST_VISIBLE),
                "{allocation:?} for {usage:?}"
            );
        }
        // Mapped in memory the host sees, but with `strict_host_access`
        // only where the request asks for host access.
        let asks = usage.needs_host_access()
            || desc
                .required_flags
                .contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        assert_eq!(
            allocation.mapped_ptr().is_some(),
            props.contains(Props::HOST_VISIBLE) && (asks || !self.config.strict_host_access),
            "{allocation:?} for {request:?}"
        );
        let (export, pool_priority) = if let Some(pool) = pool {
            assert!(allocation.is_in_custom_pool());
            assert_eq!(t, pool.memory_type());
            let live = self.pools.iter().find(|p| p.pool == pool);
            let live = live.unwrap_or_else(|| panic!("{pool:?} is not live"));
            (live.export, live.priority)
        } else {
            assert!(!allocation.is_in_custom_pool());
            assert_eq!(
                self.protected_types() & (1 << t),
                0,
                "{allocation:?} in a protected type, not in a pool"
            );
            (vk::ExternalMemoryHandleTypeFlags::empty(), None)
        };
        if request.driver_dedicated.required {
            assert!(allocation.is_dedicated(), "{request:?} got {allocation:?}");
        }
        if pool.is_none() {
            assert!(
                self.takes_last_resort(t, allowed, usage, size),
                "{allocation:?}: an AMD device-coherent type for {request:?}"
            );
        }
        let memories = self.device.live_allocations();
        let memory = memories.iter().find(|m| m.memory == allocation.memory());
        let memory = memory.unwrap_or_else(|| panic!("{allocation:?} in no memory"));
        let target = request.target().filter(|_| allocation.is_dedicated());
        assert_eq!(memory.dedicated, target, "{allocation:?} for {request:?}");
        if !(export & DEDICATED_ONLY).is_empty() {
            assert!(
                target.is_some(),
                "{allocation:?} exported as {export:?} for {request:?}"
            );
        }
        assert_eq!(memory.export_handle_types, export, "{allocation:?}");
        // Handed to the device (which drops it without
        // `VK_EXT_memory_priority`): a dedicated allocation's own, else its
        // pool's; the default pools' blocks have none. Clamped to [0, 1],
        // NaN as 0.5, as `AllocateInfo::priority` promises every backend.
        let priority = if allocation.is_dedicated() {
            desc.priority.or(pool_priority)
        } else {
            pool_priority
        }
        .map(|p| if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) });
        assert_eq!(
            memory.priority.map(f32::to_bits),
            priority.map(f32::to_bits),
            "{allocation:?} for {request:?}"
        );
        assert_eq!(
            self.allocator.memory_size(&allocation),
            Ok(memory.size),
            "{allocation:?}"
        );
        if desc.existing_memory_only {
            assert!(
                memories_before.contains(&allocation.memory()),
                "{allocation:?} in new memory"
            );
        }
        if allocation.is_dedicated() {
            assert_eq!(allocation.offset(), 0);
        } else {
            assert_eq!(allocation.offset() % alignment, 0, "{allocation:?}");
            assert_eq!(
                allocation.offset() % min_alignment.max(1),
                0,
                "{allocation:?}"
            );
            let pool_alignment = self.pool_min_alignment(desc.pool).max(1);
            assert_eq!(allocation.offset() % pool_alignment, 0, "{allocation:?}");
            if is_non_coherent(props) {
                let atom = self.layout.non_coherent_atom_size.max(1);
                assert_eq!(
                    allocation.offset() % atom,
                    0,
                    "{allocation:?} not on an atom"
                );
            }
        }
        let mut requirements = requirements;
        requirements.alignment = alignment.max(min_alignment);
        let targeted = target.is_some();
        self.live.push(Live {
            allocation,
            requirements,
            kind,
            pool,
            tag: None,
            resource: built.resource,
            targeted,
            name: desc.name,
        });
        // Every new allocation, aliased whole by a resource of each kind.
        let whole = vk::MemoryRequirements {
            alignment: 1,
            memory_type_bits: !0,
            ..requirements
        };
        for other in KINDS {
            self.check_alias_of(self.live.len() - 1, 0, &whole, other);
        }
    }

    /// `Op::LastResort`: a request of `USAGES[usage % n]`, 1 byte to 64
    /// KiB, in no custom pool, whose `memoryTypeBits` are AMD's
    /// device-coherent types and the `other % n`-th of the `n` other
    /// types. With their feature
    /// on, it lands in one of them when that other type does not admit it
    /// (device-local memory for an upload, say), where `accept` asks
    /// `takes_last_resort` whether the other type should have taken it:
    /// random bits drew such a request on such a device in none of 10
    /// minutes' inputs. Elsewhere, a request for one memory type.
    pub(super) fn last_resort(&mut self, other: u8, usage: u8, size_log2: u8, policy: u8) {
        let amd = self.layout.amd_device_coherent_types;
        let ordinary: Vec<u32> = (0..self.layout.memory_types.len() as u32)
            .filter(|t| amd & (1 << t) == 0)
            .collect();
        let other = ordinary.get(usize::from(other) % ordinary.len().max(1));
        let req = Req {
            // Only the drawn bits.
            type_bits_mode: 2,
            type_bits: amd | other.map_or(0, |t| 1 << t),
            policy,
            ..Req::plain(
                size_log2 % 17,
                u64::from(size_log2) << 3,
                size_log2 / 17 % 9,
                usage,
            )
        };
        self.allocate(&req, false);
    }

    /// Whether memory type `t` may take a request of `usage` and `size`
    /// bytes that names no custom pool and allows the types `allowed`:
    /// any type but AMD's device-coherent ones, which (with their feature
    /// on) rank after every other and take only a request that no other
    /// usable type admits (crash breadcrumbs), never as the fallback of
    /// one the other types refused. A type admits a request when its heap
    /// holds `size`, it is not protected, lazily allocated only for a
    /// transient usage, and host-visible when the usage needs host access.
    pub(super) fn takes_last_resort(&self, t: u32, allowed: u32, usage: Usage, size: u64) -> bool {
        let amd = self.layout.amd_device_coherent_types;
        if amd & (1 << t) == 0 {
            return true;
        }
        let others = allowed & self.usable_types() & !amd & !self.protected_types();
        let admits = |(i, ty): &(usize, &gpu_alloc_types::MemoryType)| {
            let heap = self.layout.memory_heaps.get(ty.heap as usize);
            others & (1 << i) != 0
                && heap.is_some_and(|h| h.size >= size)
                && (!ty.props.contains(Props::LAZILY_ALLOCATED) || usage.contains(Usage::TRANSIENT))
                && (!usage.needs_host_access() || ty.props.contains(Props::HOST_VISIBLE))
        };
        !self
            .layout
            .memory_types
            .iter()
            .enumerate()
            .any(|e| admits(&e))
    }

    /// Panics when `error` is `OutOfDeviceMemory` yet the driver refused
    /// no `vkAllocateMemory` call since `before`, with no heap under a
    /// `Config::heap_size_limits` entry (the one refusal without a call
    /// that a placed request meets: sizes past a heap or
    /// `maxMemoryAllocationSize` are refused before as such, and a heap's
    /// remembered refusal never skips a request's last attempt in a memory
    /// type, `memory/context/refusals.rs`), so that no request fails for
    /// want of device memory without the driver having been asked.
    pub(super) fn check_driver_asked(
        &self,
        error: &Error,
        before: &FakeCounters,
        what: &dyn std::fmt::Debug,
    ) {
        if *error != Error::OutOfDeviceMemory
            || self.config.heap_size_limits.iter().any(|&l| l != 0)
        {
            return;
        }
        let now = self.device.counters();
        assert!(
            now.refused_allocations() > before.refused_allocations(),
            "{error:?} for {what:?}, yet the driver refused no call ({} calls, {} refused before; {} calls, {} refused after; heap usage {:?})",
            before.allocate_calls,
            before.refused_allocations(),
            now.allocate_calls,
            now.refused_allocations(),
            self.device.heap_usage(),
        );
    }

    /// An `OverBudget` refusing one request carries the reading that
    /// refused it (`Error::OverBudget`'s docs), which `budgets()` gives
    /// still: the refused attempt was the request's last, and nothing was
    /// made or released in the heap after it. (Not for `allocate_many`,
    /// whose failed batch frees what its earlier requests made.)
    fn check_over_budget_reading(&self, error: Error) {
        if let Error::OverBudget {
            heap,
            usage,
            budget,
            ..
        } = error
        {
            let read = self.allocator.budgets()[heap as usize];
            assert_eq!(
                (usage, budget),
                (read.usage, read.budget),
                "{error:?}: heap {heap}'s usage and budget, as budgets() reads them"
            );
        }
    }
}

/// The handle types memory is exported as only when dedicated to a named
/// image or buffer (Vulkan requires every driver to report
/// `DEDICATED_ONLY` for them): a pool exporting one makes no block.
pub(super) const DEDICATED_ONLY: vk::ExternalMemoryHandleTypeFlags = {
    use vk::ExternalMemoryHandleTypeFlags as H;
    H::from_raw(
        H::D3D11_TEXTURE.as_raw() | H::D3D11_TEXTURE_KMT.as_raw() | H::D3D12_RESOURCE.as_raw(),
    )
};
