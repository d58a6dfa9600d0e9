/// Raising or lowering an `Atomic<UInt64>` to a bound, for marks that only move one way (how far
/// a stream has read, the lowest offset changed, where a reader dropped behind). Not the standard
/// library's `Atomic.max`/`min`: in this toolchain (Swift 6.x, Linux) they compare `UInt64` as
/// signed, so `min(3)` leaves `UInt64.max` in place, and `UInt64.max` is how "none" is written here.
import Synchronization

extension Atomic where Value == UInt64 {
    /// Makes the value at least `bound`.
    func raise(to bound: UInt64) {
        var current = load(ordering: .sequentiallyConsistent)
        while bound > current {
            let (exchanged, original) = compareExchange(expected: current, desired: bound, ordering: .sequentiallyConsistent)
            if exchanged { return }
            current = original
        }
    }

    /// Makes the value at most `bound`.
    func lower(to bound: UInt64) {
        var current = load(ordering: .sequentiallyConsistent)
        while bound < current {
            let (exchanged, original) = compareExchange(expected: current, desired: bound, ordering: .sequentiallyConsistent)
            if exchanged { return }
            current = original
        }
    }
}
