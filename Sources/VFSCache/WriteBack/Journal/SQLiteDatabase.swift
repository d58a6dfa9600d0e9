/// `SQLiteDatabase`: a thin, thread-safe wrapper over the system SQLite (`CSQLite`), used for every
/// piece of state dbxfs must keep across restarts: the upload journal today, the metadata tree
/// later. It gives prepared (and cached) statements, typed binding and column access, transactions,
/// and errors that carry SQLite's own message.
///
/// Durability: the journal opens with WAL and `synchronous=FULL`, so a committed transaction
/// survives kill -9 and power loss. One connection, serialised by a lock: SQLite itself is opened
/// without its own mutex because every call already goes through `lock`.
import CSQLite
import Foundation

/// A failure reported by SQLite, with its (extended) result code and message.
public struct SQLiteError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Int32
    public var message: String
    public init(code: Int32, message: String) { self.code = code; self.message = message }

    /// The primary result code (extended codes keep it in the low byte).
    public var primaryCode: Int32 { code & 0xff }
    /// The disk (or the quota) is full: surfaced to users as ENOSPC.
    public var isDiskFull: Bool { primaryCode == SQLITE_FULL }
    public var description: String { "SQLite error \(code): \(message)" }
}

extension Errno {
    /// SQLite failures as errno: a full disk is ENOSPC, everything else EIO.
    init(_ error: SQLiteError) { self = error.isDiskFull ? .noSpace : .io }
}

/// One value in or out of SQLite.
public enum SQLiteValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

/// Anything that can be bound to a statement parameter.
public protocol SQLiteBindable { var sqliteValue: SQLiteValue { get } }
extension SQLiteValue: SQLiteBindable { public var sqliteValue: SQLiteValue { self } }
extension Int: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Int64: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self) } }
extension UInt64: SQLiteBindable {
    /// Stored as the same 64 bits (SQLite integers are signed); read back with `SQLiteRow.uint64`.
    public var sqliteValue: SQLiteValue { .integer(Int64(bitPattern: self)) }
}
extension Bool: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self ? 1 : 0) } }
extension Double: SQLiteBindable { public var sqliteValue: SQLiteValue { .real(self) } }
extension String: SQLiteBindable { public var sqliteValue: SQLiteValue { .text(self) } }
extension Array: SQLiteBindable where Element == UInt8 { public var sqliteValue: SQLiteValue { .blob(self) } }
extension Date: SQLiteBindable { public var sqliteValue: SQLiteValue { .real(timeIntervalSince1970) } }
extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
    public var sqliteValue: SQLiteValue { self?.sqliteValue ?? .null }
}

/// One result row, copied out of SQLite so it outlives the statement.
public struct SQLiteRow: Sendable {
    public var columns: [String]
    public var values: [SQLiteValue]

    public subscript(_ index: Int) -> SQLiteValue { values[index] }
    public subscript(_ name: String) -> SQLiteValue {
        guard let index = columns.firstIndex(of: name) else { preconditionFailure("no column \(name)") }
        return values[index]
    }
    public func int64(_ name: String) -> Int64? {
        switch self[name] { case .integer(let v): return v; case .real(let v): return Int64(v); default: return nil }
    }
    public func int(_ name: String) -> Int? { int64(name).map { Int($0) } }
    public func uint64(_ name: String) -> UInt64? { int64(name).map { UInt64(bitPattern: $0) } }
    public func bool(_ name: String) -> Bool { (int64(name) ?? 0) != 0 }
    public func double(_ name: String) -> Double? {
        switch self[name] { case .real(let v): return v; case .integer(let v): return Double(v); default: return nil }
    }
    public func date(_ name: String) -> Date? { double(name).map { Date(timeIntervalSince1970: $0) } }
    public func text(_ name: String) -> String? { if case .text(let v) = self[name] { return v } else { return nil } }
    public func blob(_ name: String) -> [UInt8]? { if case .blob(let v) = self[name] { return v } else { return nil } }
}

public final class SQLiteDatabase: @unchecked Sendable {
    // @unchecked: `handle` and `statements` are only touched with `lock` held. The lock is
    // recursive so a transaction body can call `run`/`query` on the same thread.
    public struct Options: Sendable {
        /// Write-ahead log: readers don't block the writer, and commits are appends.
        public var writeAheadLog = true
        /// `synchronous=FULL`: every commit is fsync'ed before it returns (crash- and power-safe).
        public var fullSync = true
        /// How long to wait on a lock held by another connection before failing with SQLITE_BUSY.
        public var busyTimeoutMilliseconds: Int32 = 10_000
        public init(writeAheadLog: Bool = true, fullSync: Bool = true) {
            self.writeAheadLog = writeAheadLog; self.fullSync = fullSync
        }
    }

    public let path: String
    private let lock = NSRecursiveLock()
    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    private var transactionDepth = 0
    private let fullSync: Bool

    /// Opens (creating if needed) the database file at `path`.
    public init(path: String, options: Options = Options()) throws(SQLiteError) {
        self.path = path
        self.fullSync = options.fullSync
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open \(path)"
            sqlite3_close_v2(db)
            throw SQLiteError(code: rc, message: message)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, options.busyTimeoutMilliseconds)
        if options.writeAheadLog { try execute("PRAGMA journal_mode=WAL") }
        try execute("PRAGMA synchronous=\(options.fullSync ? "FULL" : "NORMAL")")
        try execute("PRAGMA foreign_keys=ON")
    }

    deinit { close() }

    /// Finalizes every statement and closes the connection. Later calls fail with SQLITE_MISUSE.
    public func close() {
        lock.lock(); defer { lock.unlock() }
        for statement in statements.values { sqlite3_finalize(statement) }
        statements = [:]
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    /// Runs one or more statements without parameters or results (schema, pragmas).
    public func execute(_ sql: String) throws(SQLiteError) {
        lock.lock(); defer { lock.unlock() }
        let db = try open()
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(db))
            sqlite3_free(errorMessage)
            throw SQLiteError(code: rc, message: message)
        }
    }

    /// Runs one statement with parameters (`?` placeholders, in order) and returns the number of
    /// rows it changed.
    @discardableResult
    public func run(_ sql: String, _ parameters: [any SQLiteBindable] = []) throws(SQLiteError) -> Int {
        lock.lock(); defer { lock.unlock() }
        let db = try open()
        let statement = try prepared(sql, parameters)
        defer { sqlite3_reset(statement); sqlite3_clear_bindings(statement) }
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { break }
            if rc != SQLITE_ROW { throw error(rc) }
        }
        return Int(sqlite3_changes(db))
    }

    /// Runs one query and returns every row.
    public func query(_ sql: String, _ parameters: [any SQLiteBindable] = []) throws(SQLiteError) -> [SQLiteRow] {
        var rows: [SQLiteRow] = []
        try forEachRow(sql, parameters) { rows.append($0) }
        return rows
    }

    /// Runs one query and hands each row to `body` as it is read, for large results.
    public func forEachRow(_ sql: String, _ parameters: [any SQLiteBindable] = [],
                           _ body: (SQLiteRow) throws(SQLiteError) -> Void) throws(SQLiteError) {
        lock.lock(); defer { lock.unlock() }
        let statement = try prepared(sql, parameters)
        defer { sqlite3_reset(statement); sqlite3_clear_bindings(statement) }
        let count = sqlite3_column_count(statement)
        let names = (0..<count).map { String(cString: sqlite3_column_name(statement, $0)) }
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw error(rc) }
            try body(SQLiteRow(columns: names, values: (0..<count).map { column(statement, $0) }))
        }
    }

    /// The rowid of the last successful INSERT on this connection.
    public var lastInsertRowID: Int64 {
        lock.lock(); defer { lock.unlock() }
        return handle.map { sqlite3_last_insert_rowid($0) } ?? 0
    }

    /// Runs `body` in one transaction (BEGIN IMMEDIATE … COMMIT), rolled back if it throws. A nested
    /// call joins the outer transaction. With `synchronous=FULL` the commit is durable on return,
    /// unless `durable` is false: then it is written without a flush (it survives the process
    /// being killed, not a power cut), and becomes durable with the next durable commit (the WAL
    /// is append-only, so its flush covers every frame before it).
    public func transaction<T>(durable: Bool = true, _ body: () throws -> T) throws -> T {
        lock.lock(); defer { lock.unlock() }
        if transactionDepth > 0 {
            transactionDepth += 1; defer { transactionDepth -= 1 }
            return try body()
        }
        let relaxed = !durable && fullSync
        if relaxed { try execute("PRAGMA synchronous=NORMAL") }
        defer { if relaxed { try? execute("PRAGMA synchronous=FULL") } }
        try execute("BEGIN IMMEDIATE")
        transactionDepth = 1
        do {
            let result = try body()
            transactionDepth = 0
            do { try execute("COMMIT") } catch {
                try? execute("ROLLBACK")
                throw error
            }
            return result
        } catch {
            if transactionDepth > 0 {
                transactionDepth = 0
                try? execute("ROLLBACK")
            }
            throw error
        }
    }

    // MARK: Internals (lock held)

    private func open() throws(SQLiteError) -> OpaquePointer {
        guard let handle else { throw SQLiteError(code: SQLITE_MISUSE, message: "database \(path) is closed") }
        return handle
    }

    private func error(_ rc: Int32) -> SQLiteError {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
        return SQLiteError(code: rc, message: message)
    }

    /// The cached prepared statement for `sql`, reset and with `parameters` bound.
    private func prepared(_ sql: String, _ parameters: [any SQLiteBindable]) throws(SQLiteError) -> OpaquePointer {
        let db = try open()
        let statement: OpaquePointer
        if let cached = statements[sql] {
            statement = cached
        } else {
            var made: OpaquePointer?
            let rc = sqlite3_prepare_v2(db, sql, -1, &made, nil)
            guard rc == SQLITE_OK, let made else { throw error(rc) }
            statements[sql] = made
            statement = made
        }
        let expected = Int(sqlite3_bind_parameter_count(statement))
        guard expected == parameters.count else {
            throw SQLiteError(code: SQLITE_RANGE, message: "\(parameters.count) parameters for \(expected) placeholders in: \(sql)")
        }
        for (offset, parameter) in parameters.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch parameter.sqliteValue {
            case .null: rc = sqlite3_bind_null(statement, index)
            case .integer(let v): rc = sqlite3_bind_int64(statement, index, v)
            case .real(let v): rc = sqlite3_bind_double(statement, index, v)
            case .text(let v): rc = sqlite3_bind_text(statement, index, v, -1, sqliteTransient)
            case .blob(let v):
                rc = v.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), sqliteTransient) }
            }
            if rc != SQLITE_OK { sqlite3_reset(statement); sqlite3_clear_bindings(statement); throw error(rc) }
        }
        return statement
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> SQLiteValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT: return .text(String(cString: sqlite3_column_text(statement, index)))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let base = sqlite3_column_blob(statement, index) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: base, count: count)))
        default: return .null
        }
    }
}

/// SQLITE_TRANSIENT: SQLite copies bound text and blobs before the bind call returns.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
