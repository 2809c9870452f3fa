//! A tiny generational slab: stable keys for blocks, dedicated
//! allocations, runs and upload rings.
//!
//! A slot's generation is bumped each time its value is removed, so a key
//! of a removed value never reaches a later one. A slot whose generation
//! reaches `u32::MAX` is retired for good, never reused, as the custom
//! pools' table retires its slots (`allocator/pool/table.rs`): wrapping
//! would hand a key of a value removed 2^32 values before to a new one,
//! and some keys live in `Copy` handles an engine keeps as long as it
//! likes ([`UploadRing`](crate::UploadRing)). A retired slot costs one
//! entry, after 2^32 values.

/// Names one entry of a [`Slab`]; stale once the entry is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SlabKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// `repr(C)`: the generation first, next to the start of the value, so a
/// lookup reads one cache line where the value's hot fields come first
/// (runs.rs).
#[derive(Debug)]
#[repr(C)]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// Values addressed by generational keys. Removing frees the slot for reuse
/// with a new generation (or retires it, its generations spent), so an old
/// key never reaches a new value.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    vacant: Vec<u32>,
    len: usize,
}

impl<T> Entry<T> {
    /// Bumps the generation of a slot whose value was just taken out.
    /// Returns whether the slot may be reused: not once its generation
    /// reaches `u32::MAX`, which no key is handed out with (it retires).
    fn bump_generation(&mut self) -> bool {
        // A live slot's generation is below `u32::MAX` (`insert` takes no
        // retired slot), so this does not overflow.
        self.generation += 1;
        !self.is_retired()
    }

    /// Whether the slot's generations are spent: it is never reused.
    fn is_retired(&self) -> bool {
        self.generation == u32::MAX
    }
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    pub(crate) const fn new() -> Self {
        Self {
            entries: Vec::new(),
            vacant: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> SlabKey {
        self.len += 1;
        if let Some(index) = self.vacant.pop() {
            let entry = &mut self.entries[index as usize];
            entry.value = Some(value);
            return SlabKey {
                index,
                generation: entry.generation,
            };
        }
        self.entries.push(Entry {
            generation: 0,
            value: Some(value),
        });
        SlabKey {
            index: (self.entries.len() - 1) as u32,
            generation: 0,
        }
    }

    pub(crate) fn get(&self, key: SlabKey) -> Option<&T> {
        let entry = self.entries.get(key.index as usize)?;
        (entry.generation == key.generation)
            .then_some(entry.value.as_ref())
            .flatten()
    }

    pub(crate) fn get_mut(&mut self, key: SlabKey) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.generation == key.generation {
            entry.value.as_mut()
        } else {
            None
        }
    }

    pub(crate) fn remove(&mut self, key: SlabKey) -> Option<T> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.generation != key.generation {
            return None;
        }
        let value = entry.value.take()?;
        if entry.bump_generation() {
            self.vacant.push(key.index);
        }
        self.len -= 1;
        Some(value)
    }

    /// One past the largest key index handed out: a `Vec` this long can be
    /// indexed by [`SlabKey::index`].
    pub(crate) fn index_bound(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Sets the generation of vacant slot `index`, as if it had been
    /// reused that many times: for tests of what happens as generations
    /// run out.
    #[cfg(test)]
    pub(crate) fn set_generation(&mut self, index: u32, generation: u32) {
        let entry = &mut self.entries[index as usize];
        assert!(entry.value.is_none(), "slot {index} is live");
        entry.generation = generation;
    }

    /// Live entries with their keys, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlabKey, &T)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                entry.value.as_ref().map(|value| {
                    (
                        SlabKey {
                            index: index as u32,
                            generation: entry.generation,
                        },
                        value,
                    )
                })
            })
    }

    /// Live entries with their keys, mutably, in slot order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (SlabKey, &mut T)> + '_ {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(index, entry)| {
                let generation = entry.generation;
                entry.value.as_mut().map(|value| {
                    (
                        SlabKey {
                            index: index as u32,
                            generation,
                        },
                        value,
                    )
                })
            })
    }

    /// Live values, mutably, in slot order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.entries
            .iter_mut()
            .filter_map(|entry| entry.value.as_mut())
    }

    /// Removes and returns every value. Each slot stays, vacant (or
    /// retired), with its generation bumped as [`remove`](Self::remove)
    /// bumps it: a key handed out before never reaches a value inserted
    /// after.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> {
        self.len = 0;
        self.vacant.clear();
        let mut values = Vec::new();
        for (index, entry) in self.entries.iter_mut().enumerate() {
            let reusable = match entry.value.take() {
                Some(value) => {
                    values.push(value);
                    entry.bump_generation()
                }
                None => !entry.is_retired(),
            };
            if reusable {
                self.vacant.push(index as u32);
            }
        }
        values.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(a.index, b.index);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.drain().collect::<Vec<_>>(), vec!["b"]);
    }

    /// Draining (a pool releasing everything, `Runs::clear`) keeps keys
    /// generational: a key from before names nothing inserted after, as
    /// after `remove`.
    #[test]
    fn keys_from_before_a_drain_miss() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.drain().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(slab.len(), 0);
        let c = slab.insert("c");
        let d = slab.insert("d");
        for old in [a, b] {
            assert_eq!(slab.get(old), None);
            assert_eq!(slab.remove(old), None);
        }
        assert_eq!((slab.get(c), slab.get(d)), (Some(&"c"), Some(&"d")));
        // The slots are reused, not grown past.
        assert_eq!(slab.index_bound(), 2);
    }

    /// A slot whose generations run out retires instead of wrapping: no
    /// key handed out before, the first one (generation 0) included,
    /// reaches a value inserted after, through `remove` or `drain`; the
    /// next value takes another slot, and the retired one stays out of
    /// use after a drain.
    #[test]
    fn a_slot_retires_when_its_generations_run_out() {
        for drain in [false, true] {
            let mut slab = Slab::new();
            let first = slab.insert(0);
            assert_eq!(slab.remove(first), Some(0));
            // As if 2^32 - 3 values had come and gone in the slot.
            slab.set_generation(first.index, u32::MAX - 2);
            let mut old = vec![first];
            for value in 1..=2 {
                let key = slab.insert(value);
                assert_eq!((key.index, key.generation), (0, u32::MAX - 3 + value));
                if drain {
                    assert_eq!(slab.drain().collect::<Vec<_>>(), vec![value]);
                } else {
                    assert_eq!(slab.remove(key), Some(value));
                }
                old.push(key);
            }
            for round in 0..3 {
                let key = slab.insert(10 + round);
                // Past a drain, slot 1 is vacant again; else the values
                // stay, and each takes a new slot.
                let index = if drain { 1 } else { 1 + round };
                assert_eq!(
                    key.index, index,
                    "drain {drain}: the retired slot 0 is reused"
                );
                for &stale in &old {
                    assert_eq!(slab.get(stale), None, "drain {drain}: {stale:?}");
                    assert_eq!(slab.get_mut(stale), None, "drain {drain}: {stale:?}");
                }
                if drain {
                    assert_eq!(slab.drain().collect::<Vec<_>>(), vec![10 + round]);
                }
            }
            for &stale in &old {
                assert_eq!(slab.remove(stale), None, "drain {drain}: {stale:?}");
            }
        }
    }
}
