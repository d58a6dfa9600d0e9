"""dbxemu: an emulator of the Dropbox HTTP API v2, used by every dbxfs test and benchmark.

Entry point: `scripts/dbx-emulator` (see docs/EMULATOR.md). Modules, one concept each:
  errors       the exception types that map onto Dropbox's HTTP error shapes
  paths        path validation, case folding and disallowed names
  hashing      the Dropbox content hash (4 MiB blocks) as a streaming hasher
  storage      the account: sqlite metadata, change log, revisions, blobs on disk
  cursors      self-contained, signed list_folder cursors
  listing_order, listing_pages  how listings come: children first, shuffled; pages uneven
  faults       run-time settings (faults and limits) and request counters
  oauth        tokens, the /oauth2/authorize page and /oauth2/token
  routes_files         files/* metadata, listing, longpoll, download, upload, delete, move, copy
  routes_upload_sessions  files/upload_session/*
  routes_export        export-only files (Paper, Google Docs, .web) and files/export
  routes_account       users/* and auth/token/revoke
  namespaces   the team space, the member folder and Dropbox-API-Path-Root (request views)
  shares       shared folders: sharing_info, read-only ones refusing writes
  account_seed shared folders, export-only files and account settings from /_control or a manifest
  app          the shared state (store, settings, counters, tokens) and the route table
  http_server  the HTTP/1.1 server: body reading, dispatch, faults, TLS, control endpoint
  main         the command line
"""
