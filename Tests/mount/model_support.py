"""A model of a folder tree for model-checked mount tests: random file and folder operations are
applied both to the mount (through ordinary system calls) and to an in-memory model, and the
model is then compared with the mount, with the emulator (through its API) and with a fresh
mount. Names are lowercase ASCII, so Dropbox's case rules never make two model paths one.

Each worker owns one subtree (`/w<N>`), so several processes can run at once and each model
stays exact: the union of the workers' models is the expected tree.
"""

import os
import random
from pathlib import Path


class TreeModel:
    """Files (path → bytes) and folders (set of paths), paths relative to the mount root,
    without a leading slash."""

    def __init__(self, files=None, folders=None):
        self.files = dict(files or {})
        self.folders = set(folders or ())

    def copy(self):
        return TreeModel(self.files, self.folders)

    def merge(self, other):
        self.files.update(other.files)
        self.folders |= other.folders

    def under(self, prefix):
        """Paths of files and folders at or under `prefix`."""
        p = prefix + "/"
        return ([f for f in self.files if f.startswith(p)], [d for d in self.folders if d == prefix or d.startswith(p)])

    def children(self, folder):
        p = folder + "/"
        return [x for x in list(self.files) + list(self.folders) if x.startswith(p) and "/" not in x[len(p):]]

    def describe_difference(self, other, label_self="expected", label_other="actual"):
        lines = []
        for name in sorted(set(self.folders) ^ set(other.folders)):
            lines.append(f"folder {name}: {label_self} {'has' if name in self.folders else 'lacks'} it, "
                         f"{label_other} {'has' if name in other.folders else 'lacks'} it")
        for name in sorted(set(self.files) | set(other.files)):
            a, b = self.files.get(name), other.files.get(name)
            if a != b:
                desc = lambda v: "missing" if v is None else f"{len(v)} bytes {v[:24]!r}"
                lines.append(f"file {name}: {label_self} {desc(a)}, {label_other} {desc(b)}")
        return lines


def read_tree(root, skip=()):
    """The tree under a local directory (e.g. the mount) as a TreeModel."""
    root = Path(root)
    model = TreeModel()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            model.folders.add(rel)
        for name in filenames:
            path = os.path.join(dirpath, name)
            key = os.path.relpath(path, root)
            if any(key == s or key.startswith(s + "/") for s in skip):
                continue
            with open(path, "rb") as f:
                model.files[key] = f.read()
    model.folders = {d for d in model.folders if not any(d == s or d.startswith(s + "/") for s in skip)}
    return model


def read_emulator_tree(emu):
    """The whole account on the emulator as a TreeModel (paths in display case)."""
    model = TreeModel()
    for e in emu.listing("", recursive=True):
        rel = e["path_display"].lstrip("/")
        if e[".tag"] == "folder":
            model.folders.add(rel)
        elif e[".tag"] == "file":
            model.files[rel] = emu.download(e["path_display"])
    return model


class RandomOperations:
    """Random operations inside one subtree, applied to the real directory `root` (the mount)
    and to `model` at once. Every operation is one that must succeed (the model knows what
    exists); an OSError is a failure of the filesystem, raised with the operation's name."""

    def __init__(self, root, subtree, model, rng):
        self.root = Path(root)
        self.subtree = subtree
        self.model = model
        self.rng = rng
        self.counter = 0
        self.log = []

    def _name(self, prefix):
        self.counter += 1
        return f"{prefix}{self.rng.randrange(10**6):06d}{self.counter}"

    def _folders(self):
        return sorted(d for d in self.model.folders if d == self.subtree or d.startswith(self.subtree + "/"))

    def _files(self):
        return sorted(f for f in self.model.files if f.startswith(self.subtree + "/"))

    def _data(self):
        size = self.rng.choice([0, 1, 17, 1000, 4096, 70_000, 300_000])
        return self.rng.randbytes(size)

    def run(self, count, exclude=()):
        """`count` operations; `exclude` names kinds to leave out (offline, `append` and `truncate`
        would need the old bytes of files only Dropbox has)."""
        ops = [(self.create, 5), (self.overwrite, 3), (self.append, 3), (self.truncate, 2),
               (self.unlink, 2), (self.rename_file, 3), (self.mkdir, 2), (self.rmdir, 1),
               (self.rename_folder, 1)]
        choices = [op for op, weight in ops for _ in range(weight) if op.__name__ not in exclude]
        for _ in range(count):
            op = self.rng.choice(choices)
            op()

    def _do(self, what, fn):
        self.log.append(what)
        try:
            fn()
        except OSError as error:
            raise AssertionError(f"{what} failed: {error!r}; earlier operations: {self.log[-20:]}") from error

    def create(self):
        folder = self.rng.choice(self._folders())
        path = folder + "/" + self._name("f")
        data = self._data()
        self._do(f"create {path} ({len(data)} bytes)", lambda: (self.root / path).write_bytes(data))
        self.model.files[path] = data

    def overwrite(self):
        files = self._files()
        if not files:
            return self.create()
        path = self.rng.choice(files)
        data = self._data()
        self._do(f"overwrite {path} ({len(data)} bytes)", lambda: (self.root / path).write_bytes(data))
        self.model.files[path] = data

    def append(self):
        files = self._files()
        if not files:
            return self.create()
        path = self.rng.choice(files)
        data = self.rng.randbytes(self.rng.choice([1, 100, 5000]))

        def do():
            with open(self.root / path, "ab") as f:
                f.write(data)
        self._do(f"append {len(data)} bytes to {path}", do)
        self.model.files[path] = self.model.files[path] + data

    def truncate(self):
        files = self._files()
        if not files:
            return self.create()
        path = self.rng.choice(files)
        old = self.model.files[path]
        size = self.rng.choice([0, len(old) // 2, len(old) + 100])
        self._do(f"truncate {path} to {size}", lambda: os.truncate(self.root / path, size))
        self.model.files[path] = old[:size] + b"\0" * max(0, size - len(old))

    def unlink(self):
        files = self._files()
        if not files:
            return
        path = self.rng.choice(files)
        self._do(f"unlink {path}", lambda: os.unlink(self.root / path))
        del self.model.files[path]

    def rename_file(self):
        files = self._files()
        if not files:
            return
        source = self.rng.choice(files)
        if len(files) > 1 and self.rng.random() < 0.3:
            target = self.rng.choice([f for f in files if f != source])   # onto an existing file
        else:
            target = self.rng.choice(self._folders()) + "/" + self._name("r")
        self._do(f"rename {source} -> {target}", lambda: os.rename(self.root / source, self.root / target))
        self.model.files[target] = self.model.files.pop(source)

    def mkdir(self):
        path = self.rng.choice(self._folders()) + "/" + self._name("d")
        self._do(f"mkdir {path}", lambda: os.mkdir(self.root / path))
        self.model.folders.add(path)

    def rmdir(self):
        empty = [d for d in self._folders() if d != self.subtree and not self.model.children(d)]
        if not empty:
            return
        path = self.rng.choice(empty)
        self._do(f"rmdir {path}", lambda: os.rmdir(self.root / path))
        self.model.folders.discard(path)

    def rename_folder(self):
        movable = [d for d in self._folders() if d != self.subtree]
        if not movable:
            return
        source = self.rng.choice(movable)
        targets = [d for d in self._folders() if d != source and not d.startswith(source + "/")]
        target = self.rng.choice(targets) + "/" + self._name("m")
        self._do(f"rename folder {source} -> {target}", lambda: os.rename(self.root / source, self.root / target))
        files, folders = self.model.under(source)
        for f in files:
            self.model.files[target + f[len(source):]] = self.model.files.pop(f)
        for d in folders:
            self.model.folders.discard(d)
            self.model.folders.add(target + d[len(source):])


def remote_changes(emu, model, rng, count, within=None):
    """Another client's changes through the API (while the mount is down or up): new files,
    overwrites, deletes, new folders and moves, anywhere in the model (or only in the subtree
    `within`). Updates `model`."""
    for _ in range(count):
        kind = rng.choice(["add", "overwrite", "delete", "mkdir", "move", "move_folder", "delete_folder"])
        files, folders = model.under(within) if within else (model.files, model.folders)
        files, folders = sorted(files), sorted(folders)
        if kind == "add" and folders:
            path = rng.choice(folders) + f"/api{rng.randrange(10**8)}"
            data = rng.randbytes(rng.choice([0, 10, 3000]))
            emu.upload("/" + path, data, mode="add")
            model.files[path] = data
        elif kind == "overwrite" and files:
            path = rng.choice(files)
            data = rng.randbytes(rng.choice([5, 2000]))
            emu.upload("/" + path, data, mode="overwrite")
            model.files[path] = data
        elif kind == "delete" and files:
            path = rng.choice(files)
            emu.api("files/delete_v2", {"path": "/" + path})
            del model.files[path]
        elif kind == "mkdir" and folders:
            path = rng.choice(folders) + f"/apid{rng.randrange(10**8)}"
            emu.api("files/create_folder_v2", {"path": "/" + path})
            model.folders.add(path)
        elif kind == "move" and files and folders:
            source = rng.choice(files)
            target = rng.choice(folders) + f"/apim{rng.randrange(10**8)}"
            emu.api("files/move_v2", {"from_path": "/" + source, "to_path": "/" + target})
            model.files[target] = model.files.pop(source)
        elif kind in ("move_folder", "delete_folder"):
            # Never a top-level folder: each is a worker's subtree.
            inner = [d for d in folders if "/" in d]
            if not inner:
                continue
            source = rng.choice(inner)
            moved_files, moved_folders = model.under(source)
            if kind == "delete_folder":
                emu.api("files/delete_v2", {"path": "/" + source})
                for f in moved_files:
                    del model.files[f]
                model.folders -= set(moved_folders)
                continue
            targets = [d for d in folders if d != source and not d.startswith(source + "/")]
            target = rng.choice(targets) + f"/apimd{rng.randrange(10**8)}"
            emu.api("files/move_v2", {"from_path": "/" + source, "to_path": "/" + target})
            for f in moved_files:
                model.files[target + f[len(source):]] = model.files.pop(f)
            model.folders -= set(moved_folders)
            model.folders |= {target + d[len(source):] for d in moved_folders}


def worker(root, subtree, model, seed, count, exclude=()):
    """One process's share of a round: `count` random operations in `subtree`. Returns the
    subtree's model afterwards and the error that stopped it (None if all succeeded). A
    module-level function so multiprocessing can run it in a spawned process."""
    own = TreeModel({k: v for k, v in model.files.items() if k.startswith(subtree + "/")},
                    {d for d in model.folders if d == subtree or d.startswith(subtree + "/")})
    ops = RandomOperations(root, subtree, own, random.Random(seed))
    try:
        ops.run(count, exclude)
    except AssertionError as error:
        return own, str(error)
    return own, None


def run_workers(root, subtrees, model, seed, count, exclude=()):
    """Runs one worker process per subtree at once; returns the merged model and the errors."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(subtrees)) as pool:
        results = pool.starmap(worker, [(str(root), s, model, seed * 1000 + i, count, tuple(exclude))
                                        for i, s in enumerate(subtrees)])
    merged = TreeModel({k: v for k, v in model.files.items() if not any(k.startswith(s + "/") for s in subtrees)},
                       {d for d in model.folders if not any(d == s or d.startswith(s + "/") for s in subtrees)})
    errors = []
    for own, error in results:
        merged.merge(own)
        if error:
            errors.append(error)
    return merged, errors
