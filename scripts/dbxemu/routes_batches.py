"""Namespace changes in batches: files/delete_batch, files/create_folder_batch and
files/move_batch_v2, each with its /check route, as files.stone defines them.

Each entry of a batch is done like its single route (delete_v2, create_folder_v2, move_v2), in
order, and gets its own result at the same position: `success`, or `failure` with the single
route's error inside the batch's error union (DeleteError; CreateFolderEntryError `path`
WriteError; RelocationBatchErrorEntry `relocation_error` RelocationError). Write contention
(contention.py) can refuse single entries with `too_many_write_operations`, in the place each
union has for it.

Launch results (files.stone `*Launch extends async.LaunchResultBase`): delete_batch is always
asynchronous ("returns a job ID immediately"); create_folder_batch and move_batch_v2 "either
finish synchronously, or return a job ID": here a batch of more than `batch_async_over`
entries, or one sent with `force_async` (create_folder_batch), returns `async_job_id`, and a
smaller one `complete` with its entries. Dropbox does not say where "large" starts; the setting
lets tests exercise both forms. Jobs finish at once; their results wait for /check (app.py).
"""

from . import paths
from .errors import BadRequest, RouteError
from .routes_files import args, batch_entries, delete_one, entry_results, get_field, job_check, relocate_one
from .storage import metadata


def _launch(call, entries, force_async=False):
    """`complete` with the entries, or an async job whose /check answers `complete`."""
    if force_async or len(entries) > call.app.settings["batch_async_over"]:
        return {".tag": "async_job_id", "async_job_id": call.app.save_job({".tag": "complete", "entries": entries})}
    return {".tag": "complete", "entries": entries}


# ----- delete_batch -----
def delete_batch(call):
    # Contention: DeleteError.too_many_write_operations, as it comes.
    results = entry_results(call, batch_entries(args(call)), lambda entry: delete_one(call.app, entry))
    return {".tag": "async_job_id", "async_job_id": call.app.save_job({".tag": "complete", "entries": results})}


# ----- create_folder_batch -----
def create_folder_batch(call):
    arg = args(call)
    raw = get_field(arg, "paths", list, required=True)
    if not isinstance(raw, list) or len(raw) > 10000:
        raise BadRequest("request body: paths: expected a list of at most 10000 items")
    for path in raw:
        if not isinstance(path, str):
            raise BadRequest("request body: paths: expected strings")
        paths.check_pattern("paths", path, "write_path")
    autorename = get_field(arg, "autorename", bool, False)
    force_async = get_field(arg, "force_async", bool, False)
    store = call.app.store
    # "Duplicate path arguments in the batch are considered only once": a repeated path gets the
    # result of its first occurrence.
    done = {}
    results = []
    for path in raw:
        key = paths.lower(path)
        if key in done and not autorename:
            results.append(done[key])
            continue
        contended = call.app.contention.entry_failure()
        if contended is not None:
            # CreateFolderEntryError.path: WriteError.too_many_write_operations.
            results.append({".tag": "failure", "failure": {".tag": "path", "path": contended}})
            continue
        try:
            with store.lock:
                target = store.resolve(path, write=True)
                row = store.create_folder(target, autorename)
            result = {".tag": "success", "metadata": metadata(row, tag=False)}
        except RouteError as err:
            # WriteError raised under the `path` wrapper: already {".tag": "path", "path": ...}.
            failure = err.error if err.error.get(".tag") == "path" else {".tag": "path", "path": err.error}
            result = {".tag": "failure", "failure": failure}
        done[key] = result
        results.append(result)
    return _launch(call, results, force_async)


# ----- move_batch_v2 -----
def move_batch_v2(call):
    arg = args(call)
    entries = batch_entries(arg)
    if not entries:
        raise BadRequest("request body: entries: expected at least 1 item")
    autorename = get_field(arg, "autorename", bool, False)

    # RelocationBatchResultEntry.success is a Metadata (a struct with subtypes): nested under its
    # tag, with its own ".tag" (file/folder). Contention: RelocationBatchErrorEntry's
    # too_many_write_operations, as it comes.
    def one(entry):
        return {"success": metadata(relocate_one(call.app, entry, copy=False, autorename=autorename))}

    results = entry_results(call, entries, one,
                            failure=lambda error: {".tag": "relocation_error", "relocation_error": error})
    return _launch(call, results)


# name: (style, needs auth, is a write commit, function)
ROUTES = {
    "files/delete_batch": ("rpc", True, True, delete_batch),
    "files/delete_batch/check": ("rpc", True, False, job_check),
    "files/create_folder_batch": ("rpc", True, True, create_folder_batch),
    "files/create_folder_batch/check": ("rpc", True, False, job_check),
    "files/move_batch_v2": ("rpc", True, True, move_batch_v2),
    "files/move_batch/check_v2": ("rpc", True, False, job_check),
}
