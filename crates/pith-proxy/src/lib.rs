//! The proxy: HTTP server, upstream client, streaming tee, ledger writes.
