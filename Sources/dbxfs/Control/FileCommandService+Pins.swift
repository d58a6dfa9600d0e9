/// The daemon's side of `dbxfs pin`, `dbxfs unpin` and `dbxfs pin --list`: the pins themselves
/// live in VFSCache (`PinnedFiles`); this turns paths on the mount into its paths and its refusals
/// into sentences that name the path as the user typed it.
import Foundation
import VFSCache

extension FileCommandService {
    func pin(_ file: FileRequest, shown: String, mountpoint: String) throws(Failure) -> PinReport {
        let pinned = try requirePins(mountpoint)
        do throws(PinRefusal) {
            let change = try pinned.pin(file.path)
            return PinReport(path: Self.onMount(change.path, mountpoint: mountpoint), files: change.files, bytes: change.bytes,
                             alreadyPinned: change.alreadyPinned, pid: getpid())
        } catch {
            throw Failure(message: Self.sentence(error, shown: shown, mountpoint: mountpoint))
        }
    }

    func unpin(_ file: FileRequest, shown: String, mountpoint: String) throws(Failure) -> PinReport {
        let pinned = try requirePins(mountpoint)
        do throws(PinRefusal) {
            let change = try pinned.unpin(file.path)
            return PinReport(path: Self.onMount(change.path, mountpoint: mountpoint), files: change.files, bytes: change.bytes,
                             alreadyPinned: false, pid: getpid())
        } catch {
            throw Failure(message: Self.sentence(error, shown: shown, mountpoint: mountpoint))
        }
    }

    func pinList(mountpoint: String) throws(Failure) -> PinListReport {
        let pinned = try requirePins(mountpoint)
        let pins = pinned.list().map { pin in
            PinnedPathReport(path: Self.onMount(pin.path, mountpoint: mountpoint), exists: pin.exists,
                             counts: PinCountsReport(pin.counts),
                             failures: pin.failures.map { PinFailureReport(path: Self.onMount($0.path, mountpoint: mountpoint), message: $0.message) })
        }
        let usage = vfs?.cacheUsage()
        return PinListReport(mountpoint: mountpoint, pins: pins, diskBytes: pinned.totals()?.diskBytes ?? 0,
                             diskBudget: usage?.diskBudget ?? 0, pid: getpid())
    }

    private func requirePins(_ mountpoint: String) throws(Failure) -> PinnedFiles {
        guard let pinned else { throw Failure(message: "the mount at \(mountpoint) cannot keep files offline: it serves no Dropbox files") }
        return pinned
    }

    static func sentence(_ refusal: PinRefusal, shown: String, mountpoint: String) -> String {
        let size = { (value: UInt64) in StatusRenderer.bytes(Int64(clamping: value)) }
        switch refusal {
        case .notFound:
            return "there is no file or folder at \(shown) on Dropbox"
        case .noDiskCache:
            return "the mount at \(mountpoint) keeps no disk cache (--cache-size 0), so it cannot keep files offline: mount it with a --cache-size"
        case .doesNotFit(let needed, let budget, let pinned):
            let left = UInt64(max(budget, 0)) > pinned ? UInt64(max(budget, 0)) - pinned : 0
            return "\(shown) does not fit in the disk cache: it needs \(size(needed)) (\(needed) bytes), and the cache's budget of "
                + "\(size(UInt64(max(budget, 0)))) has \(size(left)) left beside the \(size(pinned)) pinned already; "
                + "nothing was pinned: unpin something (dbxfs pin --list) or mount with a larger --cache-size"
        case .notPinned(let within?):
            return "\(shown) is not pinned itself: it is kept offline as part of \(onMount(within, mountpoint: mountpoint)); unpin that instead"
        case .notPinned(nil):
            return "\(shown) is not pinned (dbxfs pin --list shows what is)"
        case .listing(_, let error):
            return "cannot list the folders in \(shown) (\(error)); nothing was pinned: try again once Dropbox can be reached"
        }
    }
}
