//! Pools made, used and destroyed by several threads at once: pools made
//! and destroyed while others allocate, a slow `vkAllocateMemory` in one
//! pool that must not hold up another, a request that waits for a pool
//! being destroyed and is refused with `StalePool`, and threads that
//! destroy a pool as soon as its figures read empty while others still
//! free into it. Apart because each races the pool table's lock against
//! another thread's call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Error, PoolDesc, Request, ResourceKind, Usage};

use super::super::{allocator, finish, free, requirements};
use super::{vram_in, MIB};

/// Sets its flag when dropped, unwinding included: the allocating threads
/// below stop when the pool-making thread ends, also by a panic, so that
/// a failure fails the test instead of hanging it.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Threads allocating in their own pools while another thread makes and
/// destroys pools: no deadlock, no lost allocation, the device balanced.
#[test]
fn pools_made_and_destroyed_while_others_allocate() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(5);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let pool =
                    allocator.create_pool(&PoolDesc::new(1).block_size(4 * MIB).max_blocks(2));
                // Unwrapped past the barrier, which would otherwise wait
                // for this thread forever.
                barrier.wait();
                let pool = pool.unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let live: Vec<_> = (0..6)
                        .map(|_| {
                            let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
                            let request = Request::with_desc(
                                vk::MemoryRequirements {
                                    size: MIB,
                                    alignment: 256,
                                    memory_type_bits: !0,
                                },
                                ResourceKind::Buffer,
                                desc,
                            );
                            allocator.allocate(&request).unwrap()
                        })
                        .collect();
                    let _ = allocator.stats();
                    for allocation in live {
                        free(&allocator, allocation);
                    }
                    allocator.trim();
                }
                allocator.destroy_pool(pool).unwrap();
            });
        }
        scope.spawn(|| {
            barrier.wait();
            let _stop = StopOnDrop(&stop);
            for _ in 0..2000 {
                let pool = allocator
                    .create_pool(&PoolDesc::new(1).block_size(MIB).min_blocks(1))
                    .unwrap();
                let _ = allocator.memory_map();
                allocator.destroy_pool(pool).unwrap();
            }
        });
    });
    finish(allocator, &device);
}

/// Threads in different pools never wait for each other: one thread's
/// slow `vkAllocateMemory` in pool A, with a `create_pool` waiting for the
/// table's write lock, does not hold up an allocation in pool B that needs
/// no driver call. (When pool calls held the table's read lock through
/// their driver calls, std's `RwLock`, which lets no new reader in while a
/// writer waits, made B wait for A's driver call.)
#[test]
fn a_slow_block_in_one_pool_does_not_hold_up_other_pools() {
    use std::time::{Duration, Instant};
    // Long enough that an allocation waiting for pool A's driver call (at
    // least 1.6 s) stands apart from one only descheduled on a loaded
    // machine (under 1 s allowed).
    const DELAY: Duration = Duration::from_millis(2000);
    let (allocator, device) = allocator(FakeLayout::discrete());
    let slow = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB))
        .unwrap();
    let ready = allocator
        .create_pool(&PoolDesc::new(1).block_size(4 * MIB).min_blocks(1))
        .unwrap();
    device.slow_allocations(Some(DELAY));
    let in_ready = std::thread::scope(|scope| {
        let slow_thread = scope.spawn(|| allocator.allocate(&vram_in(slow)).unwrap());
        std::thread::sleep(Duration::from_millis(200));
        let maker = scope.spawn(|| {
            let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
            allocator.destroy_pool(pool).unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        let in_ready = allocator.allocate(&vram_in(ready)).unwrap();
        let waited = start.elapsed();
        let in_slow = slow_thread.join().unwrap();
        maker.join().unwrap();
        free(&allocator, in_slow);
        assert!(
            waited < DELAY / 2,
            "an allocation in a ready block of pool B waited {waited:?} for pool A's \
             vkAllocateMemory ({DELAY:?})"
        );
        in_ready
    });
    device.slow_allocations(None);
    free(&allocator, in_ready);
    allocator.destroy_pool(slow).unwrap();
    allocator.destroy_pool(ready).unwrap();
    finish(allocator, &device);
}

/// A request that finds a custom pool in the table while `destroy_pool`
/// releases its blocks, and waits for the pool's lock, is refused with
/// `StalePool` once it gets it: the pool is destroyed, though still in the
/// table. Served, it took a new block in a pool that no handle reaches
/// any more, and leaked it.
#[test]
fn a_request_waiting_for_a_pool_being_destroyed_is_refused() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(MIB).min_blocks(1))
        .unwrap();
    let objects = device.live_allocations().len();
    // The block's free waits 200 ms before its memory goes, and 200 ms
    // after, under the pool's lock.
    device.slow_frees(Some(std::time::Duration::from_millis(200)));
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
    let request = Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc);
    std::thread::scope(|scope| {
        let destroying = scope.spawn(|| allocator.destroy_pool(pool));
        // The block's memory is gone: `destroy_pool` holds the pool's lock
        // a while more. (A request coming after it is refused too.)
        while device.live_allocations().len() == objects {
            std::thread::yield_now();
        }
        let result = allocator.allocate(&request);
        assert_eq!(result.as_ref().err(), Some(&Error::StalePool));
        assert_eq!(destroying.join().unwrap(), Ok(()));
    });
    device.slow_frees(None);
    finish(allocator, &device);
}

/// VMA updated a pool's statistics inside its free and released the
/// emptied block after, outside the lock: an engine that destroyed the
/// pool as soon as its statistics read empty did so under another thread
/// still freeing into it, a use after free
/// (GPUOpen-LibrariesAndSDKs/VulkanMemoryAllocator issue #451). Here
/// threads free a shared pool's allocations (host-visible, with debug
/// fills: each free writes its bytes) and each destroys the pool once
/// `pool_stats` reads no allocation, and all of them try once more together
/// when every free is done: one destroy succeeds, the rest are
/// refused as stale, and the device sees no write into freed memory and
/// ends balanced.
#[test]
fn a_pool_destroyed_once_its_figures_read_empty_races_no_free() {
    let config = vk_suballoc::Config {
        debug_fill: true,
        ..vk_suballoc::Config::default()
    };
    let (allocator, device) = super::super::allocator_with(FakeLayout::discrete(), config);
    for round in 0..100 {
        // discrete: type 2 is host-visible and coherent.
        let pool = allocator
            .create_pool(&vk_suballoc::PoolDesc::new(2).block_size(MIB))
            .unwrap();
        let mut shares: Vec<Vec<_>> = (0..4).map(|_| Vec::new()).collect();
        for i in 0..64 {
            let request = super::upload_in(pool, 4096 + 64 * (i % 7), 2);
            shares[i as usize % 4].push(allocator.allocate(&request).unwrap());
        }
        let barrier = Barrier::new(4);
        let destroyed = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|scope| {
            for share in shares {
                let (allocator, barrier, destroyed) = (&allocator, &barrier, &destroyed);
                scope.spawn(move || {
                    let destroy_if_empty = || match allocator.pool_stats(&pool) {
                        Ok(stats) if stats.block_allocations + stats.dedicated_allocations == 0 => {
                            match allocator.destroy_pool(pool) {
                                Ok(()) => {
                                    destroyed.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(Error::StalePool) => {}
                                Err(error) => panic!("round {round}: {error:?}"),
                            }
                        }
                        Ok(_) | Err(Error::StalePool) => {}
                        Err(error) => panic!("round {round}: {error:?}"),
                    };
                    barrier.wait();
                    for allocation in share {
                        free(allocator, allocation);
                        destroy_if_empty();
                    }
                    // Then every thread at once, the pool (if still there)
                    // read empty by each: still one destroy.
                    barrier.wait();
                    destroy_if_empty();
                });
            }
        });
        assert_eq!(destroyed.load(Ordering::Relaxed), 1, "round {round}");
        assert!(
            device.violations().is_empty(),
            "round {round}: {:?}",
            device.violations()
        );
    }
    finish(allocator, &device);
}
