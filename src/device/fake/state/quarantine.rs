//! The quarantine of freed memory's host bytes: when a host-visible fake
//! memory object is freed, its host bytes are poisoned and kept (up to
//! 64 MiB in all, objects up to 16 MiB), so that a host write through a
//! pointer from its old mapping lands in allocated bytes rather than in
//! freed heap memory, and shows as a changed poison byte when the object
//! leaves. Apart from `state.rs` because it is a bounded FIFO with caps of
//! its own, tested on its own, which the state only feeds on each free and
//! drains when a test checks.

use std::collections::VecDeque;

use super::HostBytes;

/// The byte a freed object's host bytes are filled with in the quarantine.
pub(super) const POISON: u8 = 0xA5;
/// The most host bytes the quarantine keeps, all objects together.
pub(super) const QUARANTINE_BYTES: usize = 64 << 20;
/// Larger freed objects skip the quarantine (their bytes are released at
/// once, unchecked): poisoning touches every page of bytes the OS
/// allocated lazily, which would make tests with huge blocks slow.
pub(super) const QUARANTINE_MAX_OBJECT: usize = 16 << 20;

/// The host bytes of a freed memory object, poisoned, kept so that a host
/// write through a pointer from its old mapping lands in live memory and
/// shows (`State::free`).
#[derive(Debug)]
struct Quarantined {
    handle: u64,
    host: HostBytes,
}

/// Freed objects' host bytes, the oldest first, at most
/// [`QUARANTINE_BYTES`] in all.
#[derive(Debug, Default)]
pub(crate) struct Quarantine {
    objects: VecDeque<Quarantined>,
    bytes: usize,
}

impl Quarantine {
    /// Takes in `host`, freed as `handle`, poisoned; evicts (and checks) the
    /// oldest objects to stay within the cap, pushing a line to `violations`
    /// for each that was written after its free.
    pub(super) fn admit(&mut self, handle: u64, mut host: HostBytes, violations: &mut Vec<String>) {
        let size = host.size();
        if size > QUARANTINE_MAX_OBJECT {
            return;
        }
        while self.bytes + size > QUARANTINE_BYTES {
            match self.objects.pop_front() {
                Some(old) => self.release(old, violations),
                None => break,
            }
        }
        host.poison(POISON);
        self.bytes += size;
        self.objects.push_back(Quarantined { handle, host });
    }

    /// Checks and releases every object.
    pub(super) fn drain(&mut self, violations: &mut Vec<String>) {
        while let Some(old) = self.objects.pop_front() {
            self.release(old, violations);
        }
    }

    fn release(&mut self, old: Quarantined, violations: &mut Vec<String>) {
        self.bytes -= old.host.size();
        if let Some(offset) = old.host.first_changed(POISON) {
            violations.push(format!(
                "use after vkFreeMemory: host bytes of freed memory {:#x} were written after the free (first changed byte at offset {offset})",
                old.handle
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::fake::state::MAP_ALIGNMENT;

    /// The handles of the objects `quarantine` holds, the oldest first.
    fn held(quarantine: &Quarantine) -> Vec<u64> {
        quarantine.objects.iter().map(|old| old.handle).collect()
    }

    /// Admits a freed object of `size` host bytes, unwritten, as `handle`:
    /// whatever it evicts breaks no rule.
    fn admit(quarantine: &mut Quarantine, handle: u64, size: usize) {
        let mut violations = Vec::new();
        let host = HostBytes::new(size, MAP_ALIGNMENT).expect("a small object");
        quarantine.admit(handle, host, &mut violations);
        assert!(violations.is_empty(), "{violations:#?}");
    }

    /// Checks and releases every object of `quarantine`, none written.
    fn drain_clean(quarantine: &mut Quarantine) {
        let mut violations = Vec::new();
        quarantine.drain(&mut violations);
        assert!(violations.is_empty(), "{violations:#?}");
        assert_eq!((held(quarantine), quarantine.bytes), (vec![], 0));
    }

    /// The quarantine keeps freed objects up to 64 MiB in all, exactly, and
    /// past it evicts the oldest, only as many as the new one needs: a write
    /// through an old mapping into any of the last 64 MiB freed lands in
    /// bytes still allocated, and is reported. The use-after-free tests
    /// write into the last object freed, which a quarantine of one object
    /// (or of none but the last) keeps too; each miscount of its bytes here
    /// held fewer objects than the cap allows, or more.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "poisons 80 MiB byte by byte (14 s under Miri); the host bytes' unsafe code runs under Miri in only_objects_over_16_mib_skip_the_quarantine"
    )]
    fn the_quarantine_holds_64_mib_and_evicts_the_oldest_first() {
        let mut quarantine = Quarantine::default();
        for handle in 1..=4 {
            admit(&mut quarantine, handle, QUARANTINE_MAX_OBJECT);
        }
        // 4 × 16 MiB: at the cap, not past it.
        assert_eq!(held(&quarantine), [1, 2, 3, 4]);
        assert_eq!(quarantine.bytes, QUARANTINE_BYTES);
        admit(&mut quarantine, 5, QUARANTINE_MAX_OBJECT);
        assert_eq!(held(&quarantine), [2, 3, 4, 5]);
        assert_eq!(quarantine.bytes, QUARANTINE_BYTES);
        // One page past the cap evicts a whole object, the oldest.
        admit(&mut quarantine, 6, 4096);
        assert_eq!(held(&quarantine), [3, 4, 5, 6]);
        assert_eq!(quarantine.bytes, 3 * QUARANTINE_MAX_OBJECT + 4096);
        drain_clean(&mut quarantine);
    }

    /// Objects over 16 MiB skip the quarantine (poisoning them would touch
    /// every page the OS allocated lazily); one of 16 MiB exactly, and
    /// smaller ones, are kept.
    #[test]
    fn only_objects_over_16_mib_skip_the_quarantine() {
        let mut quarantine = Quarantine::default();
        admit(&mut quarantine, 1, QUARANTINE_MAX_OBJECT + 1);
        admit(&mut quarantine, 2, QUARANTINE_MAX_OBJECT);
        admit(&mut quarantine, 3, 4096);
        assert_eq!(held(&quarantine), [2, 3]);
        assert_eq!(quarantine.bytes, QUARANTINE_MAX_OBJECT + 4096);
        drain_clean(&mut quarantine);
    }
}
