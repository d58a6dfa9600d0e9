/// `CacheUsage`: a snapshot of what the cache holds against its budgets, for `dbxfs status`.
public struct CacheUsage: Sendable, Equatable {
    public var memoryBytes: Int
    public var memoryBudget: Int
    public var memoryBlocks: Int
    public var diskBytes: Int64
    public var diskBudget: Int64
    public var diskBlocks: Int
    /// Files and folders in the metadata cache.
    public var nodes: Int
    public var openFiles: Int
    public var openDirectories: Int
}
