/// Listings and changes read whole, as a client must read them from Dropbox: a page may hold more
/// entries than `limit`, or none while `has_more` is true (files.stone on `ListFolderArg.limit`;
/// dropbox/dropbox-sdk-java#281), and the emulator's pages do the same by default
/// (scripts/dbxemu/listing_pages.py). Tests read listings through these, never one page.
import DropboxRemote

extension DropboxClient {
    /// Every entry of the listing of `path`, following has_more.
    func allEntries(path: String, recursive: Bool = false) throws(DropboxError) -> [Metadata] {
        var entries: [Metadata] = []
        try listFolderPages(path: path, recursive: recursive) { (page) throws(DropboxError) -> Bool in
            entries += page.entries
            return true
        }
        return entries
    }

    /// Every change since `cursor`, following has_more, and the cursor after them.
    func allChanges(since cursor: String) throws(DropboxError) -> (entries: [Metadata], cursor: String) {
        var page = try listFolderContinue(cursor: cursor)
        var entries = page.entries
        while page.hasMore {
            page = try listFolderContinue(cursor: page.cursor)
            entries += page.entries
        }
        return (entries, page.cursor)
    }
}
