/// The request pacer as pure arithmetic over an injected clock: 429s pause the client and space
/// its requests out, successes bring the rate back, write contention pauses without slowing.
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

@Suite struct RequestPacerTests {
    final class Clock: Sendable {
        let time = Mutex(100.0)
        var now: Double { time.withLock { $0 } }
        func advance(_ seconds: Double) { time.withLock { $0 += seconds } }
    }

    @Test func unpacedUntilTheFirst429() {
        let clock = Clock()
        let pacer = RequestPacer(now: { clock.now }, random: { 0 })
        for _ in 0..<100 { #expect(pacer.reserve() == 0) }
        #expect(pacer.interval == 0)
    }

    @Test func a429PausesEveryoneAndSpacesRequestsOut() {
        let clock = Clock()
        let pacer = RequestPacer(now: { clock.now }, random: { 0 })
        pacer.rateLimited(retryAfter: 2)
        #expect(pacer.interval == 0.05)
        // Three threads asking at once: the first waits out the pause, the others queue behind it.
        #expect(pacer.reserve() == 2)
        #expect(abs(pacer.reserve()! - 2.05) < 1e-9)
        #expect(abs(pacer.reserve()! - 2.10) < 1e-9)
        // A caller who may wait one second at most takes no slot.
        #expect(pacer.reserve(limit: 1) == nil)
    }

    @Test func aVolleyOf429sSlowsDownOnceAndSuccessesSpeedUpAgain() {
        let clock = Clock()
        let pacer = RequestPacer(now: { clock.now }, random: { 0 })
        for _ in 0..<8 { pacer.rateLimited(retryAfter: 1) }   // requests already in flight
        #expect(pacer.interval == 0.05)
        clock.advance(1)
        pacer.rateLimited(retryAfter: 1)
        #expect(pacer.interval == 0.1)   // 10 requests per second
        for _ in 0..<10 { pacer.succeeded() }   // +0.1 per success: 11 per second
        #expect(abs(1 / pacer.interval - 11) < 1e-6)
        for _ in 0..<2000 { pacer.succeeded() }
        #expect(pacer.interval == 0)   // fast enough: pacing stops
    }

    @Test func writeContentionPausesWithoutSlowingDown() {
        let clock = Clock()
        let pacer = RequestPacer(now: { clock.now }, random: { 0 })
        pacer.rateLimited(retryAfter: 1, slowDown: false)
        #expect(pacer.interval == 0)
        #expect(pacer.reserve() == 1)
        clock.advance(1)
        #expect(pacer.reserve() == 0)
    }
}
