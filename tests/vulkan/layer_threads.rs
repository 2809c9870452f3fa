//! The fake-memory layer under calls from several threads on one device.
//!
//! A driver may hand the handle of memory one thread is freeing to memory
//! another thread allocates at the same moment (lavapipe's handles are the
//! addresses of objects it takes from `pAllocator`). The layer keys its
//! records by handle, so its accounting must be done with a handle before the
//! driver can reuse it. The test forces the reuse with allocation callbacks
//! that hand out the slot just freed, and runs the other thread's allocation
//! inside the driver's free.

use std::ffi::c_void;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use ash::vk;

use crate::support::{on_custom_device, Profile, VulkanContext, TEST_DEVICE};

const MIB: u64 = 1 << 20;

/// Bytes and alignment of each slot, more than lavapipe's memory object needs.
const SLOT: usize = 4096;
const SLOTS: usize = 8;

/// How far the scripted free has come.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Frees run straight through.
    #[default]
    Idle,
    /// The next free lets the other thread allocate before returning.
    Armed,
    /// The driver freed the slot; the other thread may allocate.
    Freed,
    /// The other thread's allocation returned.
    Allocated,
}

/// A LIFO pool of host slots behind `VkAllocationCallbacks`: a slot freed is
/// the next one handed out, whichever thread asks.
struct SlotPool {
    storage: *mut u8,
    free: Mutex<Vec<usize>>,
    /// Every slot handed out, in order.
    handed_out: Mutex<Vec<usize>>,
    step: Mutex<Step>,
    changed: Condvar,
}

// SAFETY: `storage` is only handed out slot by slot under the `free` lock.
unsafe impl Sync for SlotPool {}

impl SlotPool {
    fn new() -> Self {
        let layout = std::alloc::Layout::from_size_align(SLOT * SLOTS, SLOT).unwrap();
        // SAFETY: a non-zero size.
        let storage = unsafe { std::alloc::alloc(layout) };
        assert!(!storage.is_null());
        Self {
            storage,
            free: Mutex::new((0..SLOTS).rev().collect()),
            handed_out: Mutex::new(Vec::new()),
            step: Mutex::new(Step::Idle),
            changed: Condvar::new(),
        }
    }

    fn set(&self, step: Step) {
        *self.step.lock().unwrap_or_else(PoisonError::into_inner) = step;
        self.changed.notify_all();
    }

    /// Waits (at most a minute: the other thread may be descheduled long on
    /// a loaded machine) until the step is `step`; whether it is.
    fn wait_for(&self, step: Step) -> bool {
        let guard = self.step.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, Duration::from_secs(60), |now| *now != step)
            .unwrap_or_else(PoisonError::into_inner);
        *guard == step
    }

    fn callbacks(&self) -> vk::AllocationCallbacks<'_> {
        vk::AllocationCallbacks::default()
            .user_data(std::ptr::from_ref(self).cast_mut().cast())
            .pfn_allocation(Some(allocation))
            .pfn_reallocation(Some(reallocation))
            .pfn_free(Some(free))
    }
}

impl Drop for SlotPool {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(SLOT * SLOTS, SLOT).unwrap();
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.storage, layout) };
    }
}

/// # Safety
/// `user_data` is the `SlotPool` of [`SlotPool::callbacks`].
unsafe fn pool<'a>(user_data: *mut c_void) -> &'a SlotPool {
    // SAFETY: the contract.
    unsafe { &*user_data.cast::<SlotPool>() }
}

unsafe extern "system" fn allocation(
    user_data: *mut c_void,
    size: usize,
    alignment: usize,
    _scope: vk::SystemAllocationScope,
) -> *mut c_void {
    // SAFETY: the callbacks' user data.
    let pool = unsafe { pool(user_data) };
    if size > SLOT || alignment > SLOT {
        return std::ptr::null_mut();
    }
    let slot = pool
        .free
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop();
    if let Some(slot) = slot {
        pool.handed_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
    }
    // SAFETY: `slot < SLOTS`, inside the storage.
    slot.map_or(std::ptr::null_mut(), |slot| unsafe {
        pool.storage.add(slot * SLOT).cast()
    })
}

unsafe extern "system" fn reallocation(
    _user_data: *mut c_void,
    _original: *mut c_void,
    _size: usize,
    _alignment: usize,
    _scope: vk::SystemAllocationScope,
) -> *mut c_void {
    std::ptr::null_mut()
}

unsafe extern "system" fn free(user_data: *mut c_void, memory: *mut c_void) {
    if memory.is_null() {
        return;
    }
    // SAFETY: the callbacks' user data.
    let pool = unsafe { pool(user_data) };
    let slot = (memory as usize).wrapping_sub(pool.storage as usize) / SLOT;
    if slot >= SLOTS {
        // Not the pool's: nothing here may panic (it would abort).
        return;
    }
    pool.free
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(slot);
    let armed = {
        let mut step = pool.step.lock().unwrap_or_else(PoisonError::into_inner);
        let armed = *step == Step::Armed;
        if armed {
            *step = Step::Freed;
        }
        armed
    };
    if armed {
        pool.changed.notify_all();
        // Still inside the driver's vkFreeMemory: the other thread allocates now.
        pool.wait_for(Step::Allocated);
    }
}

fn allocate(
    context: &VulkanContext,
    size: u64,
    callbacks: &vk::AllocationCallbacks<'_>,
) -> vk::DeviceMemory {
    context.allow_own_allocations();
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(size)
        .memory_type_index(0);
    // SAFETY: a valid allocate info and callbacks on a live device.
    unsafe { context.device.allocate_memory(&info, Some(callbacks)) }.unwrap()
}

/// `heapUsage` of memory type 0's heap.
fn usage(context: &VulkanContext) -> u64 {
    let heap = context.memory_properties().memory_types[0].heap_index as usize;
    context.memory_budget().unwrap()[heap].usage
}

/// Memory allocated by one thread while another frees memory whose handle
/// it gets keeps its record: `heapUsage` counts it, and freeing it returns
/// the heap to empty.
#[test]
fn a_handle_reused_during_a_free_keeps_its_record() {
    if on_custom_device() {
        // The scripted reuse needs lavapipe's memory handles, which are the
        // host objects its allocation callbacks hand out; another driver's
        // need not be, nor fit a slot.
        eprintln!("not run on {TEST_DEVICE}: the race is scripted through lavapipe's handles");
        return;
    }
    let context = VulkanContext::new(Profile::Discrete);
    let pool = SlotPool::new();
    let callbacks = pool.callbacks();
    let first = allocate(&context, MIB, &callbacks);
    let second = std::thread::scope(|scope| {
        let other = scope.spawn(|| {
            assert!(
                pool.wait_for(Step::Freed),
                "the free never reached the driver"
            );
            let memory = allocate(&context, 2 * MIB, &pool.callbacks());
            pool.set(Step::Allocated);
            memory
        });
        pool.set(Step::Armed);
        // SAFETY: memory of this device, unused, freed once with the
        // callbacks it was allocated with.
        unsafe { context.device.free_memory(first, Some(&callbacks)) };
        other.join().unwrap()
    });
    let handed_out = pool
        .handed_out
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        handed_out,
        [0, 0],
        "the driver reused the first memory object"
    );
    assert_eq!(
        usage(&context),
        2 * MIB,
        "only the second allocation is live"
    );
    // SAFETY: as above.
    unsafe { context.device.free_memory(second, Some(&callbacks)) };
    assert_eq!(usage(&context), 0, "every allocation was freed");
    context.assert_no_validation_messages();
}
