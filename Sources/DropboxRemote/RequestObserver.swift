/// What a client's calls go through, for whoever reports on the link to Dropbox (the mount's
/// `dbxfs status`): each wait before a retry, with the error that caused it, each call's final
/// failure, and each success. The retry loop (`DropboxClient.withRetries`) is the only caller.
///
/// Called on the calling thread, outside the client's locks; an observer must be cheap (a success
/// is reported for every call) and must not call the client back.
public protocol RequestObserver: Sendable {
    /// A call failed with `error` and will be sent again in `seconds`.
    func willRetry(after error: DropboxError, in seconds: Double)
    /// A call gave up with `error` (after its retries, or at once for errors never retried).
    func failed(_ error: DropboxError)
    /// A call got its answer.
    func succeeded()
}
