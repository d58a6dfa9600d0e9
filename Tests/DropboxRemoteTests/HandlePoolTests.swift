/// The handle pool's wait for a warm-up in flight, without a network: one warm-up brings back one
/// connection, so one call waits for it and a second call at the same time does not.
import CCurlShim
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

struct HandlePoolTests {
    @Test func oneWarmUpInFlightHoldsBackOneCallNotTwo() throws {
        let pool = HandlePool(capacity: 8)
        let origin = "https://content.dropboxapi.com"
        pool.beginWarmUp(origin)
        let returned = DispatchSemaphore(value: 0)
        let handles = Mutex<[(CurlPointer, Set<String>)]>([])
        for _ in 0..<2 {
            Thread {
                let got = pool.checkout(for: origin, waitingForWarmUpUntil: Date(timeIntervalSinceNow: 60))
                handles.withLock { $0.append(got) }
                returned.signal()
            }.start()
        }
        // One of the two goes at once (a new handle of its own)...
        #expect(returned.wait(timeout: .now() + 10) == .success, "both calls waited for the one warm-up")
        #expect(returned.wait(timeout: .now() + 0.3) == .timedOut, "no call waited for the warm-up")
        #expect(handles.withLock { $0.first?.1 } == [])
        // ...and the other takes the warm-up's handle when it comes back.
        guard let warm = curl_easy_init() else { Issue.record("curl_easy_init"); return }
        pool.checkin(CurlPointer(raw: warm), origins: [origin], endingWarmUpOf: origin)
        #expect(returned.wait(timeout: .now() + 10) == .success)
        #expect(handles.withLock { $0.last?.1 } == [origin])
        for (handle, _) in handles.withLock({ $0 }) { curl_easy_cleanup(handle.raw) }
    }
}
