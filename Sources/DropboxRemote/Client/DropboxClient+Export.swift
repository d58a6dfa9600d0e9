/// `files/export`: the content of a file Dropbox cannot download (a Paper doc, a Google Doc, a
/// `.web` shortcut; FileMetadata.isDownloadable false), converted to a format its `export_info`
/// names. Download style on the content host (files.stone `route export`); the result header
/// carries `ExportResult` (the export's name, size and hash, and the file's metadata).
///
/// Exports are documents, small next to the files `download` streams, so an export is read
/// whole into memory and a failed attempt starts over (no Range resumption: an export is made
/// afresh by each request and its bytes need not be identical).
import Foundation

extension DropboxClient {
    /// Exports the file at `path` (path or `id:`) in `format`, or in its default format (its
    /// `export_as`) when nil. Errors: `.route(.path(...))`, or `.route(.other(tag:))` with
    /// `non_exportable`, `invalid_export_format` or `retry_error`.
    public func export(path: String, format: String? = nil, cancel: CancelHandle? = nil)
        throws(DropboxError) -> (export: ExportMetadata, file: FileMetadata, data: Data) {
        let route = Route.download("files/export", errors: .lookup)
        var arg: [String: JSON] = ["path": .string(path)]
        if let format { arg["export_format"] = .string(format) }
        return try withRetries(route: route, cancel: cancel) { [arg] (context) throws(DropboxError) -> (ExportMetadata, FileMetadata, Data) in
            var data = Data()
            let result = try attempt(route, arg: .object(arg), context: context, sink: { buffer in
                data.append(buffer.assumingMemoryBound(to: UInt8.self))
                return true
            }, cancel: cancel)
            guard let exportJSON = result.result["export_metadata"], let fileJSON = result.result["file_metadata"] else {
                throw .unexpectedResponse("files/export without export_metadata and file_metadata")
            }
            return (try ExportMetadata(json: exportJSON), try FileMetadata(json: fileJSON), data)
        }
    }
}
