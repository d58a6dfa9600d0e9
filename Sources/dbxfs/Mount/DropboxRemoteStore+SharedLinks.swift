/// The `user.dropbox.shared_link` attribute's remote call (RemoteStore.sharedLink): the link to
/// the item itself, from list_shared_links with `direct_only` (a link to a folder it is in is not
/// its link).
import DropboxRemote
import Foundation
import VFSCache

extension DropboxRemoteStore {
    func sharedLink(path: String) throws(RemoteError) -> String? {
        do { return try client.listSharedLinks(path: outgoing(path), directOnly: true).first?.url }
        catch { throw remoteError(error, path) }
    }
}
