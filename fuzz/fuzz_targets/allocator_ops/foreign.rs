//! Another allocator's handles given to this one: a second `Allocator`,
//! on a fake device of its own with the same layout and configuration,
//! made at the first such op, whose allocations, upload ring, ring
//! allocations and custom pool go to this allocator's entry points. Each
//! refuses them with `ForeignAllocation` (`ForeignPool` for a pool), as
//! documented, and changes nothing: `check` runs after the op against the
//! unchanged model (stats, memory objects, frames, the frees queued, the
//! device's resources and calls); the other allocator keeps what it made.

use ash::vk::Handle;

use super::*;

pub(super) struct ForeignSide {
    allocator: FakeAllocator,
    /// Its upload ring and one allocation of it, when they could be made.
    ring: Option<(UploadRing, RingAllocation)>,
    /// Its custom pool, when one could be made.
    pool: Option<Pool>,
}

impl ForeignSide {
    fn new(layout: &FakeLayout, config: Config) -> Option<Self> {
        let allocator = Allocator::new(FakeDevice::new(layout.clone()), config).ok()?;
        let desc = UploadRingDesc {
            size: 4096,
            usage: Usage::UPLOAD,
            buffer_usage: vk::BufferUsageFlags::TRANSFER_SRC,
            grow: false,
            name: None,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc).ok().and_then(|ring| {
            let allocation = allocator.ring_allocate(ring, 64, 16).ok()?;
            Some((ring, allocation))
        });
        let usable = crate::layout_model::usable_types(layout);
        let pool = (usable != 0)
            .then(|| allocator.create_pool(&PoolDesc::new(usable.trailing_zeros())))
            .and_then(Result::ok);
        Some(Self {
            allocator,
            ring,
            pool,
        })
    }

    /// A new allocation of its own: host-visible when it can be.
    fn allocation(&self) -> Option<Allocation> {
        let requirements = vk::MemoryRequirements {
            size: 256,
            alignment: 16,
            memory_type_bits: !0,
        };
        [Usage::UPLOAD, Usage::DEVICE_LOCAL]
            .iter()
            .find_map(|&usage| {
                let request = Request::new(requirements, usage, ResourceKind::Buffer);
                self.allocator.allocate(&request).ok()
            })
    }
}

impl Walk {
    pub(super) fn foreign(&mut self, what: u8, pick: u16) {
        if self.foreign.is_none() {
            self.foreign = ForeignSide::new(&self.layout, self.config);
        }
        let Some(foreign) = &self.foreign else { return };
        let Some(mut theirs) = foreign.allocation() else {
            return;
        };
        let their_stats = tally_of(&foreign.allocator);
        let counters = self.device.counters();
        let resources = self.device.live_resources();
        let ours = &self.allocator;
        const FOREIGN: Result<(), Error> = Err(Error::ForeignAllocation);
        let what = what % 24;
        match what {
            // SAFETY (0, 1): the fake device runs no GPU work; a refused
            // free changes nothing.
            0 => assert_eq!(unsafe { ours.free(theirs) }, FOREIGN, "free"),
            1 => {
                let result = unsafe { self.allocator.free_mut(theirs) };
                assert_eq!(result, FOREIGN, "free_mut");
            }
            // Nothing is queued: `check` and the frames' counts of frees
            // (`collect`) say so.
            2 => assert_eq!(ours.free_after_frame(theirs), FOREIGN),
            3 | 4 => {
                // The application's resource, which is not destroyed.
                let handle = self.device.create_resource();
                // SAFETY: refused before it is queued; the fake device
                // runs no GPU work.
                let result = unsafe {
                    if what == 3 {
                        ours.destroy_buffer_after_frame(vk::Buffer::from_raw(handle), theirs)
                    } else {
                        ours.destroy_image_after_frame(vk::Image::from_raw(handle), theirs)
                    }
                };
                assert_eq!(result, FOREIGN, "destroy_*_after_frame");
                assert_eq!(self.device.live_resources(), resources + 1);
                self.device.destroy_resource(handle);
            }
            5 if pick % 2 == 1 => assert_eq!(ours.name(&theirs), Err(Error::ForeignAllocation)),
            5 => assert_eq!(ours.set_name(&theirs, Some("foreign")), FOREIGN),
            6 => assert_eq!(ours.memory_size(&theirs), Err(Error::ForeignAllocation)),
            7 => assert!(!ours.owns(&theirs), "owns another allocator's"),
            8 => assert_eq!(
                ours.mapped_slice(&theirs).err(),
                Some(Error::ForeignAllocation)
            ),
            9 => {
                let result = self.allocator.mapped_slice_mut(&mut theirs).err();
                assert_eq!(result, Some(Error::ForeignAllocation), "mapped_slice_mut");
            }
            10 => assert_eq!(ours.flush(&theirs, ..), FOREIGN, "flush"),
            11 => assert_eq!(ours.invalidate(&mut theirs, ..), FOREIGN, "invalidate"),
            12 => {
                let result = ours.copy_to_allocation(&mut theirs, 0, &[1]);
                assert_eq!(result, FOREIGN, "copy_to_allocation");
            }
            13 => {
                let mut out = [7u8; 1];
                let result = ours.copy_from_allocation(&mut theirs, 0, &mut out);
                assert_eq!((result, out), (FOREIGN, [7]), "copy_from_allocation");
            }
            // Every entry checked before any is flushed, and the first
            // error said: ours (host-visible, whole) around theirs.
            14 => {
                let mut entries: Vec<_> = self
                    .live
                    .iter()
                    .filter(|l| l.allocation.mapped_ptr().is_some())
                    .map(|l| (&l.allocation, 0..l.allocation.size()))
                    .collect();
                let theirs_at = pick as usize % (entries.len() + 1);
                entries.insert(theirs_at, (&theirs, 0..1));
                assert_eq!(
                    ours.flush_allocations(entries),
                    FOREIGN,
                    "flush_allocations"
                );
            }
            15 => {
                let entries = std::iter::once((&mut theirs, 0..1));
                let result = ours.invalidate_allocations(entries);
                assert_eq!(result, FOREIGN, "invalidate_allocations");
            }
            16 => {
                let requirements = vk::MemoryRequirements {
                    size: 16,
                    alignment: 16,
                    memory_type_bits: !0,
                };
                let result = ours.check_alias(&theirs, 0, &requirements, ResourceKind::Buffer);
                assert_eq!(result, FOREIGN, "check_alias");
            }
            // Checked for every movable before anything changes: ours
            // first, then theirs; nothing moves.
            17 => {
                let mut movables: Vec<Movable<'_>> = self
                    .live
                    .iter()
                    .take(pick as usize % 4)
                    .map(|l| Movable::new(&l.allocation, l.requirements, l.kind))
                    .collect();
                let requirements = vk::MemoryRequirements {
                    size: theirs.size(),
                    alignment: 16,
                    memory_type_bits: !0,
                };
                movables.push(Movable::new(&theirs, requirements, ResourceKind::Buffer));
                let limits = DefragmentationLimits::default();
                let result = ours.plan_defragmentation(&movables, &limits);
                assert_eq!(
                    result.map(|plan| plan.moves.len()).err(),
                    Some(Error::ForeignAllocation),
                    "plan_defragmentation"
                );
            }
            18..=20 => {
                let Some((ring, ring_allocation)) = &foreign.ring else {
                    return;
                };
                let result = match what {
                    18 if pick % 2 == 1 => {
                        self.allocator.ring_allocate_mut(*ring, 16, 1).map(|_| ())
                    }
                    18 => ours.ring_allocate(*ring, 16, 1).map(|_| ()),
                    19 => ours.ring_write(ring_allocation, 0, &[1]),
                    _ => ours.destroy_upload_ring(*ring),
                };
                assert_eq!(result, FOREIGN, "another allocator's ring ({what})");
                // Still theirs, and alive.
                let again = foreign.allocator.ring_write(ring_allocation, 0, &[2]);
                let expected = match ring_allocation.mapped_ptr() {
                    Some(_) => Ok(()),
                    None => Err(Error::NotHostVisible),
                };
                assert_eq!(again, expected, "their ring");
            }
            _ => {
                let Some(pool) = foreign.pool else { return };
                let result = match what {
                    21 => ours.destroy_pool(pool),
                    22 if pick % 2 == 1 => ours.check_pool_corruption(&pool).map(|_| ()),
                    22 => ours.pool_stats(&pool).map(|_| ()),
                    _ => {
                        let requirements = vk::MemoryRequirements {
                            size: 256,
                            alignment: 16,
                            memory_type_bits: !0,
                        };
                        let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
                        desc.pool = Some(pool);
                        let request = Request::with_desc(requirements, ResourceKind::Buffer, desc);
                        if pick & 1 == 0 {
                            ours.allocate(&request).map(|_| ())
                        } else {
                            ours.allocate_many(&[request]).map(|_| ())
                        }
                    }
                };
                assert_eq!(result, Err(Error::ForeignPool), "another allocator's pool");
                assert!(foreign.allocator.pool_stats(&pool).is_ok(), "their pool");
            }
        }
        // Nothing reached this allocator's device; the other allocator
        // keeps what it made (a refused free drops the handle, not the
        // memory).
        assert_eq!(
            self.device.counters(),
            counters,
            "a call for a foreign handle"
        );
        assert_eq!(self.device.live_resources(), resources);
        assert_eq!(
            tally_of(&foreign.allocator),
            their_stats,
            "their allocations"
        );
    }
}

/// Per memory type: block allocations, their bytes, dedicated ones, theirs.
fn tally_of(allocator: &FakeAllocator) -> Vec<(u64, u64, u64, u64)> {
    let stats = allocator.stats();
    let types = stats.memory_types.iter();
    types
        .map(|s| {
            let dedicated = (s.dedicated_allocations, s.dedicated_bytes);
            (
                s.block_allocations,
                s.block_allocated_bytes,
                dedicated.0,
                dedicated.1,
            )
        })
        .collect()
}
