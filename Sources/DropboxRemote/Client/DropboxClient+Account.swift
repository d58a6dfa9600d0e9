/// Account routes: `users/get_current_account` and `users/get_space_usage` (both take Void).
extension DropboxClient {
    public func currentAccount() throws(DropboxError) -> FullAccount {
        try FullAccount(json: call(.rpc("users/get_current_account"), arg: nil))
    }

    public func spaceUsage() throws(DropboxError) -> SpaceUsage {
        try SpaceUsage(json: call(.rpc("users/get_space_usage"), arg: nil))
    }
}
