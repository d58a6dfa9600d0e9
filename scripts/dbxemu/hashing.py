"""The Dropbox content hash, computed incrementally over a stream.

Algorithm: split the data into 4 MiB blocks, SHA-256 each block, SHA-256 the concatenation of
the block digests, print lowercase hex. Data may arrive in pieces of any size; the hasher keeps
the partial block between calls, so a sequential upload session can hash as it goes.
"""

import hashlib

BLOCK_SIZE = 4 * 1024 * 1024
EMPTY_HASH = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


class ContentHasher:
    def __init__(self):
        self.block_digests = []
        self._block = hashlib.sha256()
        self._block_len = 0
        self.length = 0

    def update(self, data):
        view = memoryview(data)
        pos, total = 0, len(view)
        self.length += total
        while pos < total:
            take = min(BLOCK_SIZE - self._block_len, total - pos)
            self._block.update(view[pos:pos + take])
            self._block_len += take
            pos += take
            if self._block_len == BLOCK_SIZE:
                self.block_digests.append(self._block.digest())
                self._block = hashlib.sha256()
                self._block_len = 0

    @property
    def at_block_boundary(self):
        return self._block_len == 0

    def copy(self):
        clone = ContentHasher()
        clone.block_digests = list(self.block_digests)
        clone._block = self._block.copy()
        clone._block_len = self._block_len
        clone.length = self.length
        return clone

    def extend(self, other):
        """Appends what `other` hashed, when this hasher sits on a block boundary.

        Lets an upload session hash each request body once: a body that starts at a 4 MiB
        boundary has exactly the file's block digests.
        """
        assert self._block_len == 0
        self.block_digests.extend(other.block_digests)
        self._block = other._block.copy()
        self._block_len = other._block_len
        self.length += other.length

    def all_block_digests(self):
        """The digest of every block so far, the final partial one included."""
        return self.block_digests + ([self._block.digest()] if self._block_len else [])

    def hexdigest(self):
        digests = list(self.block_digests)
        if self._block_len:
            digests.append(self._block.digest())
        return hashlib.sha256(b"".join(digests)).hexdigest()


def content_hash_of_file(path, start=0, length=None):
    """Hashes a file region (whole file by default) by reading it in 4 MiB blocks."""
    hasher = ContentHasher()
    with open(path, "rb") as f:
        f.seek(start)
        remaining = length
        while remaining is None or remaining > 0:
            want = BLOCK_SIZE if remaining is None else min(BLOCK_SIZE, remaining)
            chunk = f.read(want)
            if not chunk:
                break
            hasher.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
    return hasher.hexdigest()


def content_hash(data):
    hasher = ContentHasher()
    hasher.update(data)
    return hasher.hexdigest()
