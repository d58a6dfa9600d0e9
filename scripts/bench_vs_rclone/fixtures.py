"""The data the workloads use: a seed tree for the emulator, and local sources to copy in.

Everything local lives in memory (a /dev/shm folder), so reading a source never slows a write
down and the warm-read limit is "the same bytes, a fresh copy in /dev/shm read once". The
emulator imports the seed at start (`--seed`):

    /read/big.bin            SIZE random bytes: cold and warm reads, first byte, random reads
    /lsr/dNNN/fNNN.txt       LS_FILES files in 100 folders: cold `ls -lR`
    /deep/dNN/sNN/fNNN.txt   about DEEP_ENTRIES entries, and one file five levels down: first access
    /tpl/rm/dNN/fNNN.txt     NS_FILES files in 10 folders, copied (one copy_v2) for each `rm -rf`

and the local sources are: `big.bin` itself (for `cp`), its pieces (for curl's uploads),
SMALL_FILES files of 4 KiB, a tarball of NS_FILES files in 100 folders, and a git repository of
NS_FILES files (packed, one commit).
"""

import hashlib
import os
import subprocess
import tarfile

from dbxemu.hashing import ContentHasher

MIB = 1 << 20
MAX_PIECE = 128 * MIB   # under the 150 MiB a single upload request may carry


def write_random(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = min(left, 8 * MIB)
            f.write(os.urandom(chunk))
            left -= chunk


def write_small(path, text, size=None):
    data = text.encode()
    if size is not None:
        data = (data * (size // max(1, len(data)) + 1))[:size]
    with open(path, "wb") as f:
        f.write(data)


class Fixtures:
    def __init__(self, root, size, ls_files, deep_entries, ns_files, small_files):
        self.root = root
        self.size = size
        self.seed = os.path.join(root, "seed")
        self.big = os.path.join(self.seed, "read", "big.bin")
        self.pieces_dir = os.path.join(root, "pieces")
        self.small_dir = os.path.join(root, "small")
        self.tarball = os.path.join(root, "tree.tar")
        self.repo = os.path.join(root, "repo")
        self.ls_files, self.deep_entries, self.ns_files, self.small_files = ls_files, deep_entries, ns_files, small_files

    def make(self, log):
        log(f"writing the local data in {self.root} ...")
        os.makedirs(os.path.dirname(self.big), exist_ok=True)
        write_random(self.big, self.size)
        self.big_sha256, self.big_content_hash = self._hashes(self.big)
        self.slow_size = self.size // 4
        self.slow_content_hash = self._hashes(self.big, self.slow_size)[1]
        self.pieces = self._split()
        self._tree("lsr", 100, self.ls_files // 100)
        self._deep()
        self._tree("tpl/rm", 10, self.ns_files // 10)
        os.makedirs(self.small_dir)
        for i in range(self.small_files):
            write_small(os.path.join(self.small_dir, f"s{i:05d}.bin"), f"small file {i}\n", 4096)
        self._tarball()
        self._repo()

    def _hashes(self, path, length=None):
        """SHA-256 and Dropbox content hash of the file's first `length` bytes (all: None)."""
        sha, content = hashlib.sha256(), ContentHasher()
        with open(path, "rb") as f:
            while chunk := f.read(8 * MIB if length is None else min(8 * MIB, length - f.tell())):
                sha.update(chunk)
                content.update(chunk)
        return sha.hexdigest(), content.hexdigest()

    def _split(self):
        """big.bin in at least 8 equal pieces of at most 128 MiB: the appends of curl's single
        upload session, or the parallel uploads of curl's concurrent one."""
        count = max(8, -(-self.size // MAX_PIECE))
        os.makedirs(self.pieces_dir)
        pieces = []
        with open(self.big, "rb") as src:
            for i in range(count):
                path = os.path.join(self.pieces_dir, f"piece-{i:03d}")
                length = self.size * (i + 1) // count - self.size * i // count
                with open(path, "wb") as dst:
                    dst.write(src.read(length))
                pieces.append(path)
        return pieces

    def _tree(self, rel, folders, per_folder):
        for d in range(folders):
            folder = os.path.join(self.seed, rel, f"d{d:03d}")
            os.makedirs(folder)
            for i in range(per_folder):
                write_small(os.path.join(folder, f"f{i:03d}.txt"), f"{rel} {d}/{i}\n")

    def _deep(self):
        """20 folders of 10 folders of files, about `deep_entries` entries in all, and a target
        five levels down in the last of them (the file the first-access case stats)."""
        top, sub = 20, 10
        per_folder = max(0, (self.deep_entries - top - top * sub - 3) // (top * sub))
        for d in range(top):
            for s in range(sub):
                folder = os.path.join(self.seed, "deep", f"d{d:02d}", f"s{s:02d}")
                os.makedirs(folder)
                for i in range(per_folder):
                    write_small(os.path.join(folder, f"f{i:03d}.txt"), f"{d}/{s}/{i}\n")
        self.deep_target = f"d{top - 1:02d}/s{sub - 1:02d}/deeper/deepest/target.txt"
        os.makedirs(os.path.dirname(os.path.join(self.seed, "deep", self.deep_target)))
        write_small(os.path.join(self.seed, "deep", self.deep_target), "found\n")
        self.deep_count = top + top * sub + top * sub * per_folder + 3

    def _tarball(self):
        """NS_FILES files of 1 to 8 KiB in 100 folders."""
        self.tar_members = {}
        with tarfile.open(self.tarball, "w") as tar:
            for i in range(self.ns_files):
                name = f"tree/d{i % 100:02d}/f{i:04d}.txt"
                size = 1024 * (1 + i % 8)
                path = os.path.join(self.root, "tar-src.tmp")
                write_small(path, f"tar member {i}\n", size)
                tar.add(path, arcname=name)
                self.tar_members[name] = size
            os.unlink(path)

    def _repo(self):
        """A local git repository of NS_FILES files in 50 folders, one commit, packed."""
        self.repo_files = {}
        for i in range(self.ns_files):
            name = f"src/m{i % 50:02d}/file{i:04d}.c"
            size = 512 + (i * 37) % 3000
            os.makedirs(os.path.join(self.repo, os.path.dirname(name)), exist_ok=True)
            write_small(os.path.join(self.repo, name), f"/* file {i} */\nint f{i}(void) {{ return {i}; }}\n", size)
            self.repo_files[name] = size
        env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com",
                   GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.com")
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "bench"],
                    ["git", "repack", "-adq"], ["git", "prune-packed"]):
            subprocess.run(cmd, cwd=self.repo, env=env, check=True)
