/// Placeholder until the client lands.
enum DropboxRemotePlaceholder {}
