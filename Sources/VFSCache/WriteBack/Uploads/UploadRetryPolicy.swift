/// `UploadRetryPolicy`: what the engine does after each failed upload or commit, in one place:
/// retry soon with backoff (network down, rate limits), restart the upload (session gone), resolve
/// a conflict, keep the file journaled and retry slowly (no space, refused name, auth), or keep
/// it and stop retrying (no write permission: a read-only shared folder).
import Foundation

enum UploadRetryPolicy {
    enum Action: Equatable {
        /// Retry after `delay`; `pauseAll` also holds back every other upload (offline, 429).
        case retry(delay: TimeInterval, pauseAll: Bool, resetSession: Bool)
        /// Hard failure: report to fsync/sync, retry after the long delay.
        case hold
        /// Refused for good where it is (no write permission): report, keep, do not retry.
        case refuse
        case conflict
    }

    static func action(for error: RemoteError, attempt: Int, configuration: WriteBackConfiguration) -> Action {
        let backoff = delay(attempt: attempt, configuration: configuration)
        switch error {
        case .unavailable:
            return .retry(delay: backoff, pauseAll: true, resetSession: false)
        case .rateLimited(let retryAfter):
            return .retry(delay: max(backoff, retryAfter), pauseAll: true, resetSession: false)
        case .sessionGone:
            // Restart from byte 0 at once; back off only if it keeps happening.
            return .retry(delay: attempt <= 2 ? 0 : backoff, pauseAll: false, resetSession: true)
        case .cancelled:
            return .retry(delay: backoff, pauseAll: false, resetSession: false)
        case .conflict:
            return .conflict
        case .insufficientSpace, .disallowedName, .malformedPath, .auth, .notFolder, .notFile, .invalidOperation,
             .restrictedContent, .locked, .tooManyFiles:
            return .hold
        case .permissionDenied:
            // Waiting changes nothing: retrying every minute forever only hides it (issue 13).
            return .refuse
        case .notFound, .other, .cursorReset:
            // Unexpected answers (content_hash_mismatch, incorrect offsets...): start the upload
            // over; after a few tries, report it as a hard failure.
            return attempt >= 5 ? .hold : .retry(delay: backoff, pauseAll: false, resetSession: true)
        }
    }

    static func delay(attempt: Int, configuration: WriteBackConfiguration) -> TimeInterval {
        let exponent = Double(max(0, min(attempt - 1, 20)))
        let raw = min(configuration.retryMaxDelay, configuration.retryBaseDelay * pow(2, exponent))
        return raw * Double.random(in: 0.75...1.25)
    }
}
