//! What the allocator says of itself: its frame, its pools' figures, the
//! memory callback's events, the resources it will destroy, the memory
//! types it would pick, its budgets, the memory objects of allocations.

use super::*;

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
    pub(super) fn check_api(&self) {
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
                let result = self.allocator.memory_type_for(bits, usage);
                let allowed = bits & self.usable_types();
                match result {
                    Ok(t) => {
                        assert!(allowed & (1 << t) != 0, "type {t} for {bits:#x}");
                        assert_eq!(self.protected_types() & (1 << t), 0, "protected {t}");
                        assert!(
                            self.takes_last_resort(t, allowed, usage, 0),
                            "AMD device-coherent type {t} for {bits:#x}, {usage:?}"
                        );
                        let props = self.layout.memory_types[t as usize].props;
                        if usage.needs_host_access() {
                            assert!(props.contains(Props::HOST_VISIBLE), "{t} for {usage:?}");
                        }
                    }
                    Err(Error::NoMemoryTypeBits(b)) => {
                        assert_eq!((b, allowed), (bits, 0), "memory_type_for");
                    }
                    Err(Error::NoSuitableMemoryType {
                        memory_type_bits, ..
                    }) => {
                        assert_eq!(memory_type_bits, bits);
                        assert_ne!(allowed, 0);
                    }
                    Err(Error::DeviceAddressNotEnabled) => {
                        assert!(usage.contains(Usage::DEVICE_ADDRESS), "{usage:?}");
                        assert!(!self.layout.buffer_device_address);
                        assert_ne!(allowed, 0);
                    }
                    Err(error) => panic!("memory_type_for({bits:#x}, {usage:?}): {error:?}"),
                }
            }
            2 => {
                let budgets = self.allocator.budgets();
                assert_eq!(budgets.len(), self.layout.memory_heaps.len());
                let mut own = vec![0u64; budgets.len()];
                for m in self.device.live_allocations() {
                    own[m.heap as usize] += m.size;
                }
                for (h, b) in budgets.iter().enumerate() {
                    assert!(b.usage >= own[h], "heap {h}: {b:?} below {}", own[h]);
                }
            }
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
