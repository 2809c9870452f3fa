//! [`CallHook`]: a test's closure that a [`FakeDevice`](super::FakeDevice)
//! runs inside one kind of call (each wait for a fence or semaphore, each
//! poll of one, each flush, or each heap-budget query), with no lock of the device held, to
//! stand in for what other threads do meanwhile. Apart from `mod.rs`
//! because running a hook that may call the device again, or replace
//! itself, takes its own care.

use std::sync::Mutex;

/// What [`FakeDevice::set_wait_hook`](super::FakeDevice::set_wait_hook) runs
/// in each wait for a fence or semaphore,
/// [`FakeDevice::set_poll_hook`](super::FakeDevice::set_poll_hook) in each
/// poll of one,
/// [`FakeDevice::set_flush_hook`](super::FakeDevice::set_flush_hook) in each
/// flush, or [`FakeDevice::set_budget_hook`](super::FakeDevice::set_budget_hook)
/// at the end of each heap-budget query.
#[derive(Default)]
pub(super) struct CallHook {
    hook: Option<Box<dyn FnMut() + Send>>,
    /// Counts `set_*_hook` calls: a hook that replaced or cleared itself
    /// while running is not put back.
    sets: u64,
}

impl std::fmt::Debug for CallHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = if self.hook.is_some() { "set" } else { "none" };
        write!(f, "CallHook({set})")
    }
}

impl CallHook {
    /// Sets the hook of `slot`.
    pub(super) fn set(slot: &Mutex<Self>, hook: Option<Box<dyn FnMut() + Send>>) {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.hook = hook;
        slot.sets += 1;
    }

    /// Runs the hook of `slot`, if any, taken out while it runs (so that
    /// it may call what runs it, or replace itself), then puts it back
    /// unless it was replaced meanwhile.
    pub(super) fn run(slot: &Mutex<Self>) {
        let (hook, sets) = {
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            (slot.hook.take(), slot.sets)
        };
        if let Some(mut hook) = hook {
            hook();
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            if slot.sets == sets {
                slot.hook = Some(hook);
            }
        }
    }
}
