/// `UploadPlanner`: how a journaled file is sent. Below `largeFileThreshold` it is a small file
/// (one `upload` call alone, or a session + `finishBatch` in a burst); above it, a concurrent
/// session cut into `chunkSize` pieces (multiples of 4 MiB, Dropbox's rule), the last one closing
/// the session. A file whose concurrent session is already open stays large, so a restart with a
/// different threshold still resumes it.
enum UploadPlanner {
    struct Chunk: Equatable, Sendable {
        var offset: UInt64
        var length: UInt64
    }

    static func isLarge(_ record: UploadRecord, configuration: WriteBackConfiguration) -> Bool {
        record.size >= configuration.largeFileThreshold || (record.sessionConcurrent && record.sessionID != nil)
    }

    /// The chunks of a `size`-byte file, in order; the last one is the closing append (it may be
    /// shorter, or empty for an empty file).
    static func chunks(size: UInt64, chunkSize: UInt64) -> [Chunk] {
        var result: [Chunk] = []
        var offset: UInt64 = 0
        while offset < size {
            let length = min(chunkSize, size - offset)
            result.append(Chunk(offset: offset, length: length))
            offset += length
        }
        if result.isEmpty { result.append(Chunk(offset: 0, length: 0)) }
        return result
    }
}
