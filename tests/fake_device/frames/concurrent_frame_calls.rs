//! Frame calls while another thread is in a slow driver call: `end_frame`
//! does not wait for a memory type making a block, `free_after_frame` and
//! `end_frame` do not wait for another thread's `collect` polling fences or
//! carrying out its frees, and `wait_and_collect` and `collect_idle` return only once the
//! frees another thread's `collect` took out of the queue are carried out.
//! In each test the memory callback (or the device's poll hook) stands for
//! the slow driver call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, Usage};

use super::super::{allocator, buffer};

use super::end_frame;

/// A slow driver call a test holds, to see what another thread can do
/// meanwhile: [`Hold::hold`], run in the call (a memory callback or a
/// device hook, on the calling thread), tells the test the call has begun
/// and waits, up to 3 s, for the test to let it return. A call that had to
/// wait them out means the test's other thread was blocked by it.
struct HeldCall {
    entered: mpsc::Receiver<()>,
    returned: mpsc::Sender<()>,
    waited_out: Arc<AtomicBool>,
}

/// The held call's side of a [`HeldCall`]: `Sync`, for callbacks.
struct Hold {
    entered: Mutex<mpsc::Sender<()>>,
    returned: Mutex<mpsc::Receiver<()>>,
    waited_out: Arc<AtomicBool>,
}

impl HeldCall {
    fn new() -> (Self, Hold) {
        let (entered_tx, entered) = mpsc::channel();
        let (returned, returned_rx) = mpsc::channel();
        let waited_out = Arc::default();
        let hold = Hold {
            entered: Mutex::new(entered_tx),
            returned: Mutex::new(returned_rx),
            waited_out: Arc::clone(&waited_out),
        };
        let held = Self {
            entered,
            returned,
            waited_out,
        };
        (held, hold)
    }

    /// Waits until the call has begun.
    fn wait_until_entered(&self) {
        self.entered.recv().unwrap();
    }

    /// Lets the call return.
    fn let_return(&self) {
        self.returned.send(()).unwrap();
    }

    /// Whether the call waited 3 s for [`let_return`](Self::let_return).
    fn waited_out(&self) -> bool {
        self.waited_out.load(Ordering::SeqCst)
    }
}

impl Hold {
    /// Tells the test the call has begun, then waits for it (3 s at most).
    fn hold(&self) {
        self.entered.lock().unwrap().send(()).unwrap();
        let returned = self.returned.lock().unwrap();
        if returned.recv_timeout(Duration::from_secs(3)).is_err() {
            self.waited_out.store(true, Ordering::SeqCst);
        }
    }
}

/// `end_frame` does not wait for a memory type another thread holds while
/// it makes a block (`vkAllocateMemory` takes milliseconds on some
/// drivers): aging kept empty blocks (`Config::empty_block_frames`) skips
/// that type for this frame. Here the memory callback, which runs under the
/// type's lock, stands for the slow driver call: it waits for `end_frame`
/// to return.
#[test]
fn end_frame_does_not_wait_for_a_memory_type_making_a_block() {
    use vk_suballoc::MemoryEventKind;

    let (mut allocator, device) = super::super::allocator_with(
        FakeLayout::discrete(),
        vk_suballoc::Config {
            empty_block_frames: 1,
            ..vk_suballoc::Config::default()
        },
    );
    let (held, hold) = HeldCall::new();
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Allocated {
            hold.hold();
        }
    });
    let allocator = &allocator;
    let allocation = std::thread::scope(|scope| {
        let maker = scope.spawn(move || {
            allocator
                .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        });
        held.wait_until_entered();
        let fence = end_frame(allocator, &device);
        held.let_return();
        device.signal_fence(fence);
        maker.join().unwrap()
    });
    assert!(
        !held.waited_out(),
        "end_frame waited for the memory type's lock"
    );
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.free(allocation) }.unwrap();
    device.signal_fence(end_frame(allocator, &device));
    allocator.collect().unwrap();
}

/// `collect` carries out its frees after releasing the frame queue's lock:
/// a thread queueing frees and sealing frames does not wait for the
/// driver's `vkFreeMemory` calls (milliseconds each for large memory on
/// some drivers). The memory callback, on the `Freed` of a dedicated
/// allocation that `collect` releases, stands for the slow driver call: it
/// waits for the other thread's `free_after_frame` and `end_frame`.
#[test]
fn free_after_frame_does_not_wait_for_collect_s_frees() {
    use vk_suballoc::{DedicatedPolicy, MemoryEventKind};

    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let (held, hold) = HeldCall::new();
    let armed = AtomicBool::new(true);
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Freed && armed.swap(false, Ordering::SeqCst) {
            hold.hold();
        }
    });
    let dedicated = buffer(1 << 20, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let big = allocator.allocate(&dedicated).unwrap();
    allocator.free_after_frame(big).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    let small = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();

    let allocator = &allocator;
    let collected = std::thread::scope(|scope| {
        let collector = scope.spawn(move || allocator.collect().unwrap());
        held.wait_until_entered();
        allocator.free_after_frame(small).unwrap();
        let fence = end_frame(allocator, &device);
        held.let_return();
        device.signal_fence(fence);
        collector.join().unwrap()
    });
    assert!(
        !held.waited_out(),
        "free_after_frame or end_frame waited for collect's frees"
    );
    assert_eq!(collected.frees, 1);
    assert_eq!(allocator.collect().unwrap().frees, 1);
    assert_eq!(allocator.stats().allocations(), 0);
}

/// `collect` polls the frames' fences with the frame queue's lock released:
/// a thread queueing frees and sealing frames does not wait for the
/// driver's `vkGetFenceStatus` (a system call on some drivers). The device's
/// poll hook, in the poll of the first frame's fence, stands for the slow
/// driver call: it waits for the other thread's `free_after_frame` and
/// `end_frame`. The frame sealed meanwhile, its fence signalled by then, is
/// left to the next `collect` (`collect_polls_only_the_frames_sealed_before_it`).
#[test]
fn free_after_frame_does_not_wait_for_collect_s_polls() {
    use vk_suballoc::Collected;

    let (allocator, device) = allocator(FakeLayout::discrete());
    let request = buffer(4096, 256, Usage::DEVICE_LOCAL);
    let first = allocator.allocate(&request).unwrap();
    allocator.free_after_frame(first).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    let second = allocator.allocate(&request).unwrap();

    let (held, hold) = HeldCall::new();
    let armed = AtomicBool::new(true);
    device.set_poll_hook(Some(Box::new(move || {
        if armed.swap(false, Ordering::SeqCst) {
            hold.hold();
        }
    })));

    let allocator = &allocator;
    let collected = std::thread::scope(|scope| {
        let collector = scope.spawn(move || allocator.collect().unwrap());
        held.wait_until_entered();
        allocator.free_after_frame(second).unwrap();
        device.signal_fence(end_frame(allocator, &device));
        held.let_return();
        collector.join().unwrap()
    });
    device.set_poll_hook(None);
    assert!(
        !held.waited_out(),
        "free_after_frame or end_frame waited for collect's poll"
    );
    let one = Collected {
        frames: 1,
        frees: 1,
    };
    assert_eq!(collected, one);
    assert_eq!(allocator.frames_in_flight(), 1);
    assert_eq!(allocator.collect(), Ok(one));
    assert_eq!(allocator.stats().allocations(), 0);
}

/// `collect` polls only the frames sealed before it began: a thread that
/// goes on sealing frames whose fences have signalled by the time they are
/// polled (a render loop sealing after each submission while the driver's
/// polls are slow) does not keep it polling, with every free found due
/// held back until it stops, and an upload ring's space too (its 64 sealed
/// frames then fill up: `end_frame` fails with `TooManyFramesInFlight`
/// while every fence has signalled). The device's poll hook has the other
/// thread seal one more frame, its fence signalled, in each poll (at most
/// `ASKS`).
#[test]
fn collect_polls_only_the_frames_sealed_before_it() {
    use vk_suballoc::Collected;

    /// The frames the hook may have sealed: enough for the test to see a
    /// `collect` that goes on polling, few enough for it to end anyway.
    const ASKS: usize = 20;
    enum Message {
        Seal,
        Collected(Collected),
    }
    let (allocator, device) = allocator(FakeLayout::discrete());
    let request = buffer(4096, 256, Usage::DEVICE_LOCAL);
    let first = allocator.allocate(&request).unwrap();
    allocator.free_after_frame(first).unwrap();
    device.signal_fence(end_frame(&allocator, &device));

    let (message_tx, message_rx) = mpsc::channel::<Message>();
    let (sealed_tx, sealed_rx) = mpsc::channel::<()>();
    let hook_tx = message_tx.clone();
    let mut asks = 0;
    device.set_poll_hook(Some(Box::new(move || {
        if asks == ASKS {
            return;
        }
        asks += 1;
        hook_tx.send(Message::Seal).unwrap();
        // Never hangs: a `collect` that kept the frame queue locked here
        // would keep the other thread's `end_frame` waiting.
        let _ = sealed_rx.recv_timeout(Duration::from_secs(3));
    })));

    let allocator = &allocator;
    let (collected, sealed) = std::thread::scope(|scope| {
        scope.spawn(move || {
            let collected = allocator.collect().unwrap();
            message_tx.send(Message::Collected(collected)).unwrap();
        });
        let mut sealed = 0;
        loop {
            match message_rx.recv().unwrap() {
                Message::Seal => {
                    let later = allocator.allocate(&request).unwrap();
                    allocator.free_after_frame(later).unwrap();
                    device.signal_fence(end_frame(allocator, &device));
                    sealed += 1;
                    sealed_tx.send(()).unwrap();
                }
                Message::Collected(collected) => break (collected, sealed),
            }
        }
    });
    device.set_poll_hook(None);
    let one = Collected {
        frames: 1,
        frees: 1,
    };
    assert_eq!(
        (collected, sealed),
        (one, 1),
        "collect polled the frames sealed during it"
    );
    assert_eq!(allocator.frames_in_flight(), 1);
    // The frame sealed during it is the next call's.
    assert_eq!(allocator.collect(), Ok(one));
    assert_eq!(allocator.stats().allocations(), 0);
}

/// `end_frame` does not wait for another thread's `collect` polling a
/// fence, so an upload ring's 64 sealed frames may fill up meanwhile: the
/// frames the render thread seals during one slow poll are the next
/// `collect`'s, and once a ring holds 64, `end_frame` fails with
/// `TooManyFramesInFlight`, as its docs say, every fence signalled or not;
/// the frame seals once the `collect` has returned.
#[test]
fn a_ring_fills_up_with_frames_sealed_during_one_poll() {
    use vk_suballoc::{Collected, UploadRingDesc};

    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        size: 64 << 10,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    allocator.ring_allocate(ring, 256, 16).unwrap();
    device.signal_fence(end_frame(&allocator, &device));
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let mut armed = true;
    device.set_poll_hook(Some(Box::new(move || {
        if std::mem::take(&mut armed) {
            entered_tx.send(()).unwrap();
            // Never hangs: it goes on, told to or not.
            let _ = go_rx.recv_timeout(Duration::from_secs(3));
        }
    })));
    let allocator = &allocator;
    let (collected, sealed, refused) = std::thread::scope(|scope| {
        let collector = scope.spawn(move || allocator.collect());
        entered_rx.recv().unwrap();
        let mut sealed = 0;
        let refused = loop {
            allocator.ring_allocate(ring, 256, 16).unwrap();
            let fence = device.create_fence();
            device.signal_fence(fence);
            // SAFETY: a fake fence, signalled.
            match unsafe { allocator.end_frame(fence) } {
                Ok(_) => sealed += 1,
                Err(error) => break error,
            }
            assert!(sealed < 64, "no limit on the frames a ring holds");
        };
        go_tx.send(()).unwrap();
        (collector.join().unwrap(), sealed, refused)
    });
    device.set_poll_hook(None);
    let one = Collected {
        frames: 1,
        frees: 0,
    };
    assert_eq!(
        (collected, sealed, refused),
        (Ok(one), 63, Error::TooManyFramesInFlight)
    );
    // The refused frame seals now; the 63 sealed during the poll collect.
    device.signal_fence(end_frame(allocator, &device));
    assert_eq!(allocator.collect().map(|c| c.frames), Ok(64));
    allocator.destroy_upload_ring(ring).unwrap();
    device.signal_fence(end_frame(allocator, &device));
    allocator.collect().unwrap();
}

/// What [`a_call_after_collect_s_frees`] checks: `wait_and_collect` or
/// `collect_idle`.
#[derive(Clone, Copy, Debug)]
enum Finisher {
    WaitAndCollect,
    CollectIdle,
}

/// Another thread's `collect` has taken a finished frame's frees out of the
/// queue and is carrying them out (the memory callback, on the `Freed` of
/// the frame's first free, stands for a slow `vkFreeMemory`) when this
/// thread calls `finisher`, then destroys the custom pool of the frame's
/// second free, as `destroy_pool` says to. The pool must be empty by then:
/// `wait_and_collect` waits for the frames sealed before the call and
/// `collect_idle` releases everything queued, even when another thread
/// took the frees out first. Returns what `destroy_pool` said.
fn a_call_after_collect_s_frees(finisher: Finisher) -> Result<(), Error> {
    use vk_suballoc::{
        AllocationDesc, DedicatedPolicy, MemoryEventKind, PoolDesc, Request, ResourceKind,
    };

    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let (held, hold) = HeldCall::new();
    let armed = AtomicBool::new(true);
    allocator.set_memory_callback(move |event| {
        // Never hangs: with or without the other thread's answer, it goes on.
        if event.kind == MemoryEventKind::Freed && armed.swap(false, Ordering::SeqCst) {
            hold.hold();
        }
    });
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let dedicated = buffer(1 << 20, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always);
    let big = allocator.allocate(&dedicated).unwrap();
    let in_pool = Request::with_desc(
        super::super::requirements(4096, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
    );
    let small = allocator.allocate(&in_pool).unwrap();
    allocator.free_after_frame(big).unwrap();
    allocator.free_after_frame(small).unwrap();
    device.signal_fence(end_frame(&allocator, &device));

    let allocator = &allocator;
    let destroyed = std::thread::scope(|scope| {
        let collector = scope.spawn(move || allocator.collect().unwrap());
        held.wait_until_entered();
        let (done_tx, done_rx) = mpsc::channel();
        let finishing = scope.spawn(move || {
            match finisher {
                Finisher::WaitAndCollect => {
                    allocator.wait_and_collect(u64::MAX).unwrap();
                }
                Finisher::CollectIdle => {
                    // SAFETY: the fake device runs no GPU work.
                    unsafe { allocator.collect_idle() };
                }
            }
            let destroyed = allocator.destroy_pool(pool);
            done_tx.send(()).unwrap();
            destroyed
        });
        // Time for a call that does not wait for the collector to return
        // (it returns at once); one that waits returns once told to go on.
        let _ = done_rx.recv_timeout(Duration::from_millis(300));
        held.let_return();
        assert_eq!(collector.join().unwrap().frees, 2);
        finishing.join().unwrap()
    });
    if destroyed.is_err() {
        // Still there: let the allocator's drop release it.
        allocator.collect().unwrap();
    }
    assert_eq!(allocator.stats().allocations(), 0);
    destroyed
}

/// A loading thread's `wait_and_collect` returns once the frees of the
/// frames sealed before it are carried out, even when the render thread's
/// `collect` took them out of the queue first: destroying a custom pool
/// they were in then succeeds. Before, it found nothing queued and
/// returned while they were still being carried out.
#[test]
fn wait_and_collect_waits_for_frees_another_collect_carries_out() {
    assert_eq!(
        a_call_after_collect_s_frees(Finisher::WaitAndCollect),
        Ok(())
    );
}

/// As `wait_and_collect`, `collect_idle` returns once every free queued
/// before it is carried out, those another thread's `collect` took out of
/// the queue first included.
#[test]
fn collect_idle_waits_for_frees_another_collect_carries_out() {
    assert_eq!(a_call_after_collect_s_frees(Finisher::CollectIdle), Ok(()));
}
